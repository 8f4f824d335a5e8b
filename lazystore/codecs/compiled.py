"""The optional C kernels (lazystore/codecs/_kernels.c), or None.

setup.py builds them where a C compiler is found; without them decoding
takes the Blosc and numpy paths, slower, to the same bytes. Callers read
``compiled.kernels`` when they decode (not at import), so a test can switch
the fallback on by setting it to None. ``import_error`` keeps why they are
not in use (not built, built for another Python, or a stale build), for
``lazystore.show_config()`` to say.
"""

from __future__ import annotations

from lazystore._core.distribution import rebuild_hint

# What this side relies on the kernels for (their refusals, their
# ``dispatch``; from 3, codec 4's float planes; from 4, ``byte_counts`` and
# ``float_decode``'s stored Huffman planes), as _kernels.c's INTERFACE: an
# editable install keeps the module it built in place across later
# checkouts, and a module from before a change must not be used as if it had it.
INTERFACE = 4

import_error: str | None = None
try:
    import lazystore.codecs._kernels as kernels
except ImportError as exc:
    kernels = None
    import_error = str(exc)
else:
    if getattr(kernels, "INTERFACE", 1) != INTERFACE:
        import_error = (f"{kernels.__file__} is a stale build (interface {getattr(kernels, 'INTERFACE', 1)}, "
                        f"this lazystore needs {INTERFACE}): rebuild it with {rebuild_hint()}")
        kernels = None
