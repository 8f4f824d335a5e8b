"""lazystore weights where Hugging Face's libraries load models: transformers'
``from_pretrained``/``save_pretrained``, accelerate's big-model inference and
sentence-transformers (docs/integrations.md)."""

from lazystore.hf.big_model import load_checkpoint_and_dispatch, load_checkpoint_in_model
from lazystore.hf.offload import FileWeights, dispatch_from_file
from lazystore.hf.pretrained import from_pretrained
from lazystore.hf.saving import save_pretrained
from lazystore.hf.sentence import sentence_transformer

__all__ = ["FileWeights", "dispatch_from_file", "from_pretrained", "load_checkpoint_and_dispatch",
           "load_checkpoint_in_model", "save_pretrained", "sentence_transformer"]
