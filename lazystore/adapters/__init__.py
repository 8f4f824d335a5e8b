"""Bridges between lazystore's numpy arrays and other tensor libraries.

Each adapter imports its library lazily, only when one of its tensors has
to be made, so lazystore works (numpy only) without any of them installed.

- :mod:`lazystore.adapters.torch`: PyTorch (``pip install 'lazystore[torch]'``).
"""
