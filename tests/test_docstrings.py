"""Public functions, classes and methods have numpydoc docstrings (the style
numpy and zarr use), so that an API reference can be rendered from them.

For each object of the covered modules' public surface:

- a one-line summary, ending with a period, then a blank line;
- only numpydoc's section names, each underlined;
- a Parameters section naming exactly the signature's parameters, in order,
  each with a type (``*args`` and ``**kwargs`` with their stars and no type;
  a class documents its ``__init__``'s; a dataclass may list its fields
  under Attributes instead);
- a Returns (or, for a generator, Yields) section when it returns something,
  none when it returns None;
- a Raises section naming each of lazystore's exceptions (lazystore/errors.py)
  that its body raises itself, and naming no exception that does not exist.

Properties need only the summary. A method without a docstring of its own
inherits its base class's (as Sphinx's autodoc renders it): one inherited
from a third-party class (torch's ``StorageWriter``, Lightning's
``CheckpointIO``) is in that library's style, so it fails here.

The parser is this module's own, not numpydoc's: numpydoc's validator needs
Sphinx installed.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import importlib
import inspect
import re
import textwrap

import pytest

from lazystore import errors

# The modules converted so far, with the names that are their public surface
# (None: the module's __all__). Still to convert (their docstrings predate
# this test): lazystore.views.chunk_reader (internal). "lazystore": None
# checks every top-level export.
COVERED: dict[str, tuple[str, ...] | None] = {
    "lazystore": None,
    "lazystore._config": ("show_config",),
    "lazystore.api": None,
    "lazystore.training.manager": ("CheckpointManager",),
    "lazystore.training.reading": ("CheckpointReading",),  # the manager's methods that read
    "lazystore.numpy": None,
    "lazystore.views.arrays": None,
    "lazystore.views.base": None,
    "lazystore.views.sharded": None,
    "lazystore.views.tree": None,
    "lazystore.views.tree_scalars": None,
    "lazystore.hf": None,
    "lazystore.lightning": None,
    "lazystore.dcp": None,
    "lazystore.testing.fault_plans": None,
    "lazystore.testing.faults": None,
    "lazystore.testing.rangeserver": None,
    "lazystore.testing.strategies": None,
    "lazystore.torch": None,
    "lazystore.signing": None,
    "lazystore.interop.convert": None,
    "lazystore.interop.sharded_writer": ("ShardedWriter", "shard_name", "remove_unreferenced"),
    "lazystore.writing.writer": ("Writer",),
    "lazystore.views.checkpoint": None,
    "lazystore.errors": None,
    "lazystore.codecs": None,
    "lazystore.codecs.float_planes": ("FloatPlanes", "mode_bytes", "header_bytes"),
    "lazystore.codecs.float_layout": ("layout_of", "split", "merge_into"),
    "lazystore.codecs.huffman_code": ("code_lengths", "stream_count", "plane_header", "parse_plane", "encode_plane",
                                      "decode_plane"),
    "lazystore.codecs.huffman_ref": ("encode_streams", "decode_table", "decode_streams"),
    "lazystore.cli.main": ("main",),
}

SECTIONS = ("Parameters", "Returns", "Yields", "Receives", "Other Parameters", "Raises", "Warns", "Warnings",
            "See Also", "Notes", "References", "Examples", "Attributes", "Methods")
HEADER = re.compile(r"^(?P<title>\S.*)\n(?P<rule>-{3,})$", re.MULTILINE)
# An entry of Parameters, Returns or Raises: a line that is not indented.
ENTRY = re.compile(r"^(?P<names>[^\s:][^:]*?)(\s*:\s*(?P<type>.*))?$")


@dataclasses.dataclass
class Docstring:
    summary: str
    problems: list[str]
    sections: dict[str, str]

    def untyped(self, section: str) -> list[str]:
        """The entries of a section that give no type ("name" rather than "name : type")."""
        return [line for line in self.sections.get(section, "").splitlines()
                if line.strip() and not line[0].isspace() and (m := ENTRY.match(line)) and not m["type"]]

    def entries(self, section: str) -> list[str]:
        """The names a section's entries give, in order ("a, b : int" gives two)."""
        names = []
        for line in self.sections.get(section, "").splitlines():
            m = ENTRY.match(line)
            if m and line.strip():
                names += [n.strip().replace("\\", "") for n in m["names"].split(",")]
        return names


def parse(doc: str) -> Docstring:
    """The summary, the format problems and the sections of a docstring."""
    doc = inspect.cleandoc(doc)
    problems = []
    lines = doc.splitlines()
    summary = lines[0].strip() if lines else ""
    if not summary:
        problems.append("no summary line")
    elif not summary.endswith("."):
        problems.append(f"the summary line does not end with a period: {summary!r}")
    if len(lines) > 1 and lines[1].strip():
        problems.append("the summary is more than one line (a blank line must follow its first)")
    headers = list(HEADER.finditer(doc))
    sections = {}
    for i, h in enumerate(headers):
        title = h["title"].strip()
        if title not in SECTIONS:
            problems.append(f"unknown section {title!r}")
        if len(h["rule"]) != len(title):
            problems.append(f"the underline of {title!r} is not as long as the title")
        if title in sections:
            problems.append(f"section {title!r} twice")
        end = headers[i + 1].start() if i + 1 < len(headers) else len(doc)
        sections[title] = doc[h.end():end].strip("\n")
    return Docstring(summary, problems, sections)


def _expected_parameters(sig: inspect.Signature) -> list[str]:
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [stars.get(p.kind, "") + p.name for p in sig.parameters.values()]


def _function_node(func) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    node = ast.parse(source).body[0]
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _own_nodes(func_node):
    """The nodes of a function's body, without those of functions, lambdas
    and classes defined inside it (they run when called, not here)."""
    stack = list(func_node.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.append(child)


def _raised_lazystore_errors(func, func_node) -> set[str]:
    """lazystore's exceptions that the function's own body raises by name."""
    found = set()
    for node in _own_nodes(func_node):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
        cls = getattr(errors, name, None) if name else None
        if isinstance(cls, type) and issubclass(cls, errors.LazyStoreError):
            found.add(name)
    return found


def _returns_a_value(func, func_node) -> bool | None:
    """Does the function return something? From its annotation, else from
    its body; None for a generator (it yields)."""
    if func_node is not None and any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(func_node)):
        return None
    annotation = inspect.signature(func).return_annotation
    if annotation is not inspect.Signature.empty:
        return annotation not in (None, "None")
    if func_node is None:
        return False
    return any(isinstance(n, ast.Return) and n.value is not None
               and not (isinstance(n.value, ast.Constant) and n.value.value is None) for n in _own_nodes(func_node))


def _exception_names(func) -> set[str]:
    names = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
             and issubclass(getattr(builtins, n), BaseException)}
    names |= {n for n in dir(errors) if isinstance(getattr(errors, n), type)
              and issubclass(getattr(errors, n), BaseException)}
    scope = getattr(func, "__globals__", {})
    names |= {n for n, v in scope.items() if isinstance(v, type) and issubclass(v, BaseException)}
    return names


def check_parameters(doc: Docstring, sig: inspect.Signature, where: str = "Parameters") -> list[str]:
    documented = doc.entries(where)
    expected = _expected_parameters(sig)
    problems = [f"a parameter without a type: {line!r}" for line in doc.untyped(where)
                if not line.lstrip("\\").startswith("*")]  # *args and **kwargs take none
    missing = [p for p in expected if p not in documented]
    extra = [p for p in documented if p not in expected]
    if missing:
        problems.append(f"parameters not documented: {missing}")
    if extra:
        problems.append(f"documented parameters it does not take: {extra}")
    if not missing and not extra and documented != expected:
        problems.append(f"parameters documented in the order {documented}, the signature's is {expected}")
    return problems


def check_function(func, doc_text: str | None, *, drop_first: bool) -> list[str]:
    """What is wrong with the docstring of a function or method."""
    if not doc_text:
        return ["no docstring"]
    doc = parse(doc_text)
    problems = list(doc.problems)
    sig = inspect.signature(func)
    if drop_first:  # self or cls
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    problems += check_parameters(doc, sig)
    node = _function_node(inspect.unwrap(func))
    returns = _returns_a_value(func, node)
    if returns is None:
        if "Yields" not in doc.sections:
            problems.append("a generator without a Yields section")
    elif returns and "Returns" not in doc.sections:
        problems.append("returns a value but has no Returns section")
    elif not returns and "Returns" in doc.sections:
        problems.append("a Returns section, but it returns None")
    problems += check_raises(doc, func, node)
    return problems


def check_raises(doc: Docstring, func, node) -> list[str]:
    problems = []
    documented = {name.rpartition(".")[2].lstrip("~") for name in doc.entries("Raises")}
    unknown = documented - _exception_names(func)
    if unknown:
        problems.append(f"Raises names what is no exception here: {sorted(unknown)}")
    if node is not None:
        undocumented = _raised_lazystore_errors(func, node) - documented
        if undocumented:
            problems.append(f"raises {sorted(undocumented)} without saying so in Raises")
    return problems


def check_class(cls) -> list[str]:
    """What is wrong with a class's docstring (it documents ``__init__``'s parameters)."""
    doc_text = cls.__dict__.get("__doc__")
    if not doc_text:
        return ["no docstring"]
    doc = parse(doc_text)
    problems = list(doc.problems)
    init = cls.__dict__.get("__init__")
    if dataclasses.is_dataclass(cls) and "Parameters" not in doc.sections:
        fields = [f.name for f in dataclasses.fields(cls)]
        if doc.entries("Attributes") != fields:
            problems.append(f"a dataclass whose Attributes {doc.entries('Attributes')} are not its fields {fields}")
    elif init is not None:
        sig = inspect.signature(init)
        problems += check_parameters(doc, sig.replace(parameters=list(sig.parameters.values())[1:]))
        problems += check_raises(doc, init, _function_node(init))
    if "Returns" in doc.sections:
        problems.append("a class docstring with a Returns section")
    return problems


def check_member(cls, name: str) -> list[str]:
    raw = inspect.getattr_static(cls, name)
    if isinstance(raw, property):
        doc_text = inspect.getdoc(getattr(cls, name)) if raw.__doc__ is None else raw.__doc__
        if not doc_text:
            return ["a property without a docstring"]
        return parse(doc_text).problems
    func = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
    # Without a docstring of its own, what a base class's says (autodoc's rendering).
    doc_text = func.__doc__ or inspect.getdoc(getattr(cls, name))
    return check_function(func, doc_text, drop_first=not isinstance(raw, staticmethod))


def public_objects(module_name: str):
    """``(qualified name, check)`` for each public function, class and public
    method of a covered module."""
    module = importlib.import_module(module_name)
    names = COVERED[module_name]
    for name in module.__all__ if names is None else names:
        obj = getattr(module, name)
        where = f"{module_name}.{name}"
        if inspect.isclass(obj):
            yield where, functools.partial(check_class, obj)
            for member in sorted(vars(obj)):
                if not member.startswith("_") and (callable(inspect.getattr_static(obj, member))
                                                   or isinstance(inspect.getattr_static(obj, member),
                                                                 (property, classmethod, staticmethod))):
                    yield f"{where}.{member}", functools.partial(check_member, obj, member)
        elif callable(obj):
            yield where, functools.partial(check_function, obj, obj.__doc__, drop_first=False)


def _import_or_skip(module_name: str) -> None:
    try:
        importlib.import_module(module_name)
    except ImportError as exc:  # MissingDependencyError is one: an extra not installed
        pytest.skip(f"{module_name} needs what is not installed: {exc}")


@pytest.mark.parametrize("module_name", sorted(COVERED))
def test_public_docstrings_are_numpydoc(module_name):
    _import_or_skip(module_name)
    found = {where: check() for where, check in public_objects(module_name)}
    assert found, f"{module_name} has no public functions or classes"
    bad = {where: problems for where, problems in found.items() if problems}
    assert not bad, "\n".join(f"{where}: {'; '.join(problems)}" for where, problems in bad.items())


# -- the checker itself fails on what it is meant to catch ---------------------------


def _well_documented(path, *, strict: bool = False) -> str:
    """Open a file.

    Parameters
    ----------
    path : str
        The file.
    strict : bool, optional
        Refuse more.

    Returns
    -------
    str
        Its name.

    Raises
    ------
    InvalidInputError
        ``path`` is empty.
    """
    if not path:
        raise errors.InvalidInputError("empty")
    return path


def _drifted(path, *, mode: str = "r") -> str:
    """Open a file
    and say so.

    Parameters
    ----------
    path
        The file, without a type.
    strict : bool
        Gone from the signature.

    Raises
    ------
    ValueErr
        Not an exception.

    Example
    -------
    Not a section of numpydoc's ("Examples").
    """
    if not path:
        raise errors.FormatError("empty")
    return path


def _generator(n):
    """Count.

    Parameters
    ----------
    n : int
        How far.
    """
    yield from range(n)


def test_the_checker_passes_a_complete_docstring():
    assert check_function(_well_documented, _well_documented.__doc__, drop_first=False) == []


def test_the_checker_finds_each_kind_of_drift():
    problems = "\n".join(check_function(_drifted, _drifted.__doc__, drop_first=False))
    for expected in ("does not end with a period", "more than one line", "unknown section 'Example'",
                     "a parameter without a type: 'path'", "parameters not documented: ['mode']",
                     "documented parameters it does not take: ['strict']", "no Returns section",
                     "Raises names what is no exception here: ['ValueErr']",
                     "raises ['FormatError'] without saying so"):
        assert expected in problems, problems
    assert check_function(_generator, _generator.__doc__, drop_first=False) == [
        "a generator without a Yields section"]
    assert check_function(_generator, None, drop_first=False) == ["no docstring"]


class _Undocumented:
    """A class.

    Parameters
    ----------
    b : int
        Second.
    a : int
        First.
    """

    def __init__(self, a, b, c=None):
        if c is not None:
            raise errors.InvalidInputError("c")


@dataclasses.dataclass
class _Record:
    """A record.

    Attributes
    ----------
    name : str
        Its name.
    """

    name: str
    size: int


def test_the_checker_reads_a_class_docstring_as_its_init_s():
    assert check_class(_Undocumented) == ["parameters not documented: ['c']",
                                          "raises ['InvalidInputError'] without saying so in Raises"]
    three = _Undocumented.__doc__.replace("First.", "First.\n    c : int\n        Third.")
    assert check_parameters(parse(three), inspect.signature(lambda a, b, c=None: None)) == [
        "parameters documented in the order ['b', 'a', 'c'], the signature's is ['a', 'b', 'c']"]
    assert check_class(_Record) == [
        "a dataclass whose Attributes ['name'] are not its fields ['name', 'size']"]
