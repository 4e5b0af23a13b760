"""Where the repository is, for tests that read its files (examples/, deploy/, docs/): one constant, so a
test file can move between folders without counting parent directories."""

from __future__ import annotations

from pathlib import Path
from typing import Final

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
