"""lazystore weights where Hugging Face's libraries load models: transformers'
``from_pretrained``/``save_pretrained``, accelerate's big-model inference and
sentence-transformers (docs/integrations.md)."""
