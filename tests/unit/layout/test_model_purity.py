"""common.model stays pure: no module in it imports anything that does I/O.

import-linter checks the same in CI (`lint-imports`); this test makes the rule fail inside the test
suite too, so a developer sees it without running the linter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.testing.paths import REPO_ROOT

MODEL = REPO_ROOT / "common" / "model"
FORBIDDEN = {
    "aiohttp", "kubernetes_asyncio", "kubernetes", "asyncio", "socket", "ssl", "http", "urllib",
    "requests", "httpx", "subprocess", "shutil", "tempfile", "pathlib", "io", "os", "threading",
    "multiprocessing", "prometheus_client", "rich", "logging",
}  # fmt: skip


def imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in {"__import__", "open"}:
            roots.add(f"<{node.func.id}()>")  # type: ignore[attr-defined]
    return roots


# Every module, those of the engine packages (common/model/capacity_card/, ...) included.
MODULES = sorted(MODEL.rglob("*.py"))


def test_model_modules_exist() -> None:
    assert len(MODULES) >= 8
    assert any(module.parent != MODEL for module in MODULES), "the engine packages are covered"


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(MODEL)))
def test_model_module_does_no_io(module: Path) -> None:
    bad = imported_roots(module.read_text()) & (FORBIDDEN | {"<__import__()>", "<open()>"})
    name = module.relative_to(MODEL)
    assert not bad, f"{name} imports {sorted(bad)}: common.model must stay pure (docs/design.md, Layout)"


def test_the_check_catches_io() -> None:
    assert "asyncio" in imported_roots("import asyncio.tasks")
    assert "os" in imported_roots("from os import path")
    assert "<open()>" in imported_roots("open('x')")
