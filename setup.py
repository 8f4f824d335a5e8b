"""Only the optional C kernels live here; everything else is in pyproject.toml.

``lazystore.codecs._kernels`` (byte un-shuffle and the delta codec's zigzag
addition in one pass) is built where a C compiler is found. ``optional``
lets an install without one go on: lazystore then decodes through Blosc and
numpy, slower but with the same bytes.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("lazystore.codecs._kernels",
                  [f"lazystore/codecs/{name}.c" for name in ("_kernels", "_float_planes", "_huffman")],
                  depends=["lazystore/codecs/_kernels.h", "lazystore/codecs/_huffman.h"],
                  extra_compile_args=["-O3"], optional=True),
    ],
)
