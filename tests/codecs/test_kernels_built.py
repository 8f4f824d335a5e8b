"""Where a C compiler is found, installing lazystore builds its C kernels
(setup.py, ``optional=True``): a failed compile is only a warning in pip's
output, and the install goes on to decode more slowly. So where CI has a
compiler (``.ci/run`` installs with ``pip install -e '.[test]'``, which
builds them in place), this fails unless the kernels were built from this
checkout's _kernels.c and are the ones in use."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lazystore._core.distribution import rebuild_hint
from lazystore.codecs import compiled

COMPILER = shutil.which("cc") or shutil.which("gcc")


@pytest.mark.skipif(COMPILER is None, reason="no C compiler here: the kernels are optional")
def test_the_kernels_were_built_and_are_in_use():
    assert compiled.kernels is not None, (
        f"a C compiler is here ({COMPILER}) but lazystore's C kernels are not in use: {compiled.import_error}. "
        f"{rebuild_hint()} builds them, and its output says why the build failed")
    assert Path(compiled.kernels.__file__).parent == Path(compiled.__file__).parent
    assert compiled.kernels.INTERFACE == compiled.INTERFACE
