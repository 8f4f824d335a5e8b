"""The package's shape, as docs/architecture.md describes it: no import
cycles (counting imports inside functions), no import of a later stage of
the pipeline, small modules, ``__init__`` modules that only re-export, and
no ``# noqa`` without a reason."""

from __future__ import annotations

import ast
import re

import pytest

from tests.paths import REPO

PACKAGE = REPO / "lazystore"
MAX_LINES = 500


def module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_imports(tree) -> set[int]:
    """The ids of import nodes under ``if TYPE_CHECKING:``: read by type
    checkers only, never run."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return ids


def imported(name: str, path, *, type_only: bool = True) -> set[str]:
    """The lazystore modules a module imports, anywhere in it. ``from a.b
    import c`` counts as importing ``a.b.c`` when that is a module, else
    ``a.b``. ``type_only=False`` leaves out the imports under ``if
    TYPE_CHECKING:``, which never run (so make no cycle)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    skipped = set() if type_only else _type_checking_imports(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in MODULES else base)
    return {m for m in out if m in MODULES and m != name}


@pytest.mark.slow
def test_no_import_cycles():
    graph = {name: imported(name, path, type_only=False) for name, path in MODULES.items()}
    cycles = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_cycle_detection_can_fail(tmp_path):
    # The checker above, on a package that does have a cycle through a
    # function-level import.
    a = "def f():\n    from lazystore.b import g\n"
    b = "from lazystore.a import f\n"
    (tmp_path / "a.py").write_text(a)
    (tmp_path / "b.py").write_text(b)
    MODULES["lazystore.a"], MODULES["lazystore.b"] = tmp_path / "a.py", tmp_path / "b.py"
    try:
        assert imported("lazystore.a", tmp_path / "a.py") == {"lazystore.b"}
        assert imported("lazystore.b", tmp_path / "b.py") == {"lazystore.a"}
    finally:
        del MODULES["lazystore.a"], MODULES["lazystore.b"]


# The pipeline's stages, earliest first (docs/architecture.md): a module
# imports its own stage or an earlier one, never a later one. Within a
# stage, modules may use each other (hf reads through lazystore.torch);
# cycles are refused apart, above.
STAGES = (
    ("errors",),
    ("_core",),
    ("codecs", "sources", "sinks"),
    ("_native",),
    ("_config",),  # show_config(): versions, and whether the C kernels are in use
    ("views",),
    ("writing",),
    ("interop",),
    ("signing",),  # signatures over the index: checks the open path calls (anchors), sign and verify
    ("api",),
    ("training", "torch", "numpy", "dcp", "hf", "testing"),
    ("lazystore",),  # the package's __init__: the public names, re-exported from the stages above
    ("cli", "lightning", "demo", "__main__"),  # over the public names (import lazystore as ls)
)
STAGE = {folder: i for i, folders in enumerate(STAGES) for folder in folders}


def stage_of(module: str) -> str:
    """The stage folder (or top-level module) a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "lazystore"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a later stage, as "importer -> imported"."""
    return sorted(f"{name} -> {dep}" for name, deps in graph.items() for dep in deps
                  if STAGE[stage_of(dep)] > STAGE[stage_of(name)])


def test_every_folder_has_a_stage():
    assert {stage_of(m) for m in MODULES} <= set(STAGE), "place the new folder in STAGES"


def test_no_module_imports_a_later_stage():
    graph = {name: imported(name, path) for name, path in MODULES.items()}
    assert not upward_imports(graph), "imports of a later stage:\n" + "\n".join(upward_imports(graph))


def test_upward_import_detection_can_fail():
    # A delta writer in the format's stage reading its base through a view,
    # as it once did; the import map of lazystore itself, as it is now.
    assert upward_imports({"lazystore._native.delta_writer": {"lazystore.views.checkpoint"},
                           "lazystore.views.checkpoint": {"lazystore._native.index"}}) == [
        "lazystore._native.delta_writer -> lazystore.views.checkpoint"]


def test_an_import_for_type_checkers_only_makes_no_cycle_but_keeps_its_stage(tmp_path):
    a = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lazystore.api import open\n"
    (tmp_path / "a.py").write_text(a)
    MODULES["lazystore._core.a"] = tmp_path / "a.py"
    try:
        assert imported("lazystore._core.a", tmp_path / "a.py", type_only=False) == set()
        assert imported("lazystore._core.a", tmp_path / "a.py") == {"lazystore.api"}  # still an upward import
    finally:
        del MODULES["lazystore._core.a"]


def test_modules_are_small():
    big = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_init_modules_only_re_export():
    allowed = (ast.Import, ast.ImportFrom, ast.Expr)  # imports and the docstring
    for name, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, allowed):
                continue
            # __all__, and plain constants such as __version__
            assert isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets), (
                f"{name}: {ast.dump(node)[:80]} is logic, not a re-export")


def test_every_noqa_says_why():
    marker = re.compile(r"#\s*noqa(?::\s*[A-Z0-9, ]+)?(\s.*)?$")
    bare = []
    for path in [*PACKAGE.rglob("*.py"), *(REPO / "tests").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            m = marker.search(line)
            if m and not re.match(r"\s*-+\s*\S", m.group(1) or ""):
                bare.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
    assert not bare, "noqa without a reason (write '# noqa: CODE - why'):\n" + "\n".join(bare)


# A timing or a throughput figure: "9.4 ms", "2 GB/s", "121-144 us".
FIGURE = re.compile(r"\b\d+(\.\d+)?\s?(us|µs|ms|GB/s|MB/s)\b")


def test_no_measurement_figures_in_the_code():
    # Figures go in docs/benchmarks.md ("Figures behind the code"); the code
    # says why, and points there.
    found = [f"{p.relative_to(REPO)}:{i}: {line.strip()}"
             for p in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c")])
             for i, line in enumerate(p.read_text().splitlines(), 1) if FIGURE.search(line)]
    assert not found, "figures in the code:\n" + "\n".join(found)


def test_figure_detection_can_fail():
    assert FIGURE.search("# Measured on one core: Blosc 245 us, this 121-144 us")
    assert FIGURE.search("copies at about 2 GB/s") and not FIGURE.search("chunk_bytes = 1 << 20  # 1 MiB")
