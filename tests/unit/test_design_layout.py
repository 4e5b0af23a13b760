"""docs/design.md's layout and the README's layout table match the tree (issue: a reader finds any rule in
one obvious file, so the map of files must not drift from the files)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "scheduler", "webhook", "certs", "gpuq")


def _layout_block() -> str:
    design = (ROOT / "docs" / "design.md").read_text()
    section = design.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def _source_modules() -> list[Path]:
    return sorted(
        path.relative_to(ROOT)
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py"
    )


@pytest.mark.parametrize("module", _source_modules(), ids=str)
def test_every_module_is_on_the_design_map(module: Path) -> None:
    block = _layout_block()
    assert re.search(rf"\b{re.escape(module.stem)}\b", block), f"{module} is not in docs/design.md's layout"


# Every directory of modules below a top-level package (some are namespace packages, without __init__.py).
SUBPACKAGES = sorted(
    {module.parent.relative_to(ROOT) for package in PACKAGES for module in (ROOT / package).rglob("*/*.py")}
)


@pytest.mark.parametrize("package", SUBPACKAGES, ids=str)
def test_every_package_is_on_the_design_map(package: Path) -> None:
    assert f"{package.name}/" in _layout_block(), f"{package}/ is not in docs/design.md's layout"


def test_every_file_the_design_map_names_exists() -> None:
    named = set(re.findall(r"\b([a-z_]+\.py)\b", _layout_block()))
    existing = {path.name for package in (*PACKAGES, "tests") for path in (ROOT / package).rglob("*.py")}
    assert named, "the layout names files"
    assert named <= existing, f"docs/design.md names files that do not exist: {sorted(named - existing)}"


def test_every_path_in_the_readme_layout_table_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"^\| `([^`]+)`", table, flags=re.M) + re.findall(
        r"^\| `[^`]+`, `([^`]+)`", table, flags=re.M
    )
    assert len(paths) >= 8
    for path in paths:
        assert (ROOT / path).exists(), f"README layout names {path}, which does not exist"
