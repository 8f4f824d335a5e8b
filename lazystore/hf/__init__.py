"""lazystore weights where Hugging Face's libraries load models: transformers'
``from_pretrained``/``save_pretrained``, accelerate's big-model inference and
sentence-transformers (docs/integrations.md)."""

from lazystore.hf.pretrained import from_pretrained
from lazystore.hf.saving import save_pretrained
from lazystore.hf.sentence import sentence_transformer

__all__ = ["from_pretrained", "save_pretrained", "sentence_transformer"]
