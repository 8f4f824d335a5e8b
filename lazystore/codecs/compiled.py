"""The optional C kernels (lazystore/codecs/_kernels.c), or None.

setup.py builds them where a C compiler is found; without them decoding
takes the Blosc and numpy paths, slower, to the same bytes. Callers read
``compiled.kernels`` when they decode (not at import), so a test can switch
the fallback on by setting it to None.
"""

from __future__ import annotations

try:
    import lazystore.codecs._kernels as kernels
except ImportError:
    kernels = None
