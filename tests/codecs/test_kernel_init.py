"""The C kernels' module initialisation (multi-phase, PEP 489): its exec
slot ran, a free-threaded Python keeps its GIL off, and an isolated
sub-interpreter may import it. The last two only run on the Pythons that
have them (3.13t; 3.13 and later)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig

import pytest

from lazystore.codecs import compiled

kernels = compiled.kernels
pytestmark = pytest.mark.skipif(kernels is None, reason="the C kernels are not built here")


def test_the_exec_slot_says_how_the_loops_were_built():
    assert kernels.dispatch in (
        "AVX2 or baseline x86-64 loops, picked at load by gcc's target_clones",
        "loops built for this target only, no target_clones",
    )


@pytest.mark.skipif(not sysconfig.get_config_var("Py_GIL_DISABLED"), reason="not a free-threaded Python")
def test_a_free_threaded_python_keeps_the_gil_off():
    # Importing a module that does not declare Py_mod_gil turns the GIL back
    # on for the whole process (with a RuntimeWarning): a fresh process shows it.
    code = "import sys, lazystore.codecs._kernels; print(sys._is_gil_enabled())"
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def _isolated_interpreters():
    try:
        from concurrent import interpreters  # 3.14
    except ImportError:
        pass
    else:
        return lambda code: interpreters.create().exec(code)
    try:
        import _interpreters  # 3.13
    except ImportError:
        return None

    def run(code: str) -> None:
        interp = _interpreters.create("isolated")
        try:
            failure = _interpreters.exec(interp, code)
        finally:
            _interpreters.destroy(interp)
        if failure is not None:
            raise RuntimeError(failure.formatted)

    return run


@pytest.mark.skipif(_isolated_interpreters() is None, reason="no sub-interpreters with their own GIL here")
def test_an_isolated_sub_interpreter_imports_it():
    # By its file, not through lazystore's package: numpy, which lazystore
    # imports, does not load in sub-interpreters.
    _isolated_interpreters()(
        "import importlib.machinery as m, importlib.util as u\n"
        f"loader = m.ExtensionFileLoader('_kernels', {kernels.__file__!r})\n"
        "module = u.module_from_spec(u.spec_from_loader('_kernels', loader))\n"
        "loader.exec_module(module)\n"
        "assert module.dispatch\n"
    )
