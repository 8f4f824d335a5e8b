"""The public surface is annotated: every parameter of a public function,
class constructor, method or property, and its return, so that mypy checks
callers against it (and the annotation says what a docstring's types say).

The public surface is tests/test_docstrings.py's, all of it: the names each
module it covers exports (lazystore.testing by its modules, having no
``__all__`` of its own), their public methods and properties. A module
added there is checked here too.
"""

from __future__ import annotations

import inspect

import pytest

from tests.test_docstrings import COVERED, _import_or_skip, check_class, check_member, public_objects

ANNOTATED = tuple(COVERED)


def unannotated(func, *, drop_first: bool) -> list[str]:
    """The parameters of ``func`` without an annotation, and "return" when
    its return has none (``self`` or ``cls`` left out with ``drop_first``)."""
    sig = inspect.signature(func)
    params = list(sig.parameters.values())[1 if drop_first else 0:]
    missing = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def _callables(module_name: str):
    """``(qualified name, function, drop_first)`` for each public function,
    constructor, method and property getter of a module's public surface."""
    for where, check in public_objects(module_name):
        target = check.args
        if check.func is check_class:
            init = target[0].__dict__.get("__init__")
            if init is not None:
                yield f"{where}.__init__", init, True
        elif check.func is check_member:
            raw = inspect.getattr_static(*target)
            if isinstance(raw, property):
                yield where, raw.fget, True
            elif isinstance(raw, (classmethod, staticmethod)):
                yield where, raw.__func__, isinstance(raw, classmethod)
            else:
                yield where, raw, True
        else:  # check_function
            yield where, target[0], False


@pytest.mark.parametrize("module_name", ANNOTATED)
def test_the_public_surface_is_annotated(module_name):
    _import_or_skip(module_name)
    bad = {where: missing for where, func, drop in _callables(module_name)
           if (missing := unannotated(func, drop_first=drop))}
    assert not bad, "\n".join(f"{where}: no annotation for {', '.join(m)}" for where, m in bad.items())


def test_the_check_finds_what_is_not_annotated():
    def half(a: int, b, *args, c: str = "", **kwargs) -> None: ...

    def no_return(a: int): ...

    assert unannotated(half, drop_first=False) == ["b", "args", "kwargs"]
    assert unannotated(no_return, drop_first=False) == ["return"]
    assert unannotated(lambda self, x: x, drop_first=True) == ["x", "return"]
