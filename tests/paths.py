"""Where the tests find the repository and their data files."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
FORMAT_SPEC = REPO / "docs" / "format.md"
