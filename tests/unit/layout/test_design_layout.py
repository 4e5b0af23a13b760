"""docs/design.md's layout and the README's layout table match the tree (issue: a reader finds any rule in
one obvious file, so the map of files must not drift from the files)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
PACKAGES = ("common", "scheduler", "webhook", "certs", "gpuq_k8s")


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


# The code lives in the top-level directories; it is imported only as ``gpuq_k8s.<package>`` (the one
# import package, docs/design.md "Layout"), never by the bare directory names a source checkout also
# happens to make importable: two names for one module would be two copies of its classes.
BARE_ROOTS = frozenset({"common", "scheduler", "webhook", "certs", "gpuq"})


def _python_files() -> list[Path]:
    roots = [ROOT / name for name in (*PACKAGES[:-1], "tests", "deploy")] + [ROOT / "gpuq_k8s"]
    files = {
        path.resolve()
        for root in roots
        for path in root.rglob("*.py")
        if "controlplane/build" not in path.as_posix()
    }
    return sorted(files)


def _bare_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
            else []
        )
        found += [name for name in names if name.split(".")[0] in BARE_ROOTS]
    return found


def test_every_import_goes_through_the_namespace() -> None:
    files = _python_files()
    assert len(files) > 200
    offenders = {
        str(path.relative_to(ROOT)): bare for path in files if (bare := _bare_imports(path.read_text()))
    }
    assert not offenders, f"import these as gpuq_k8s.<package>: {offenders}"
    assert _bare_imports("from common.model import quantity\nimport scheduler.cycle") == [
        "common.model",
        "scheduler.cycle",
    ]


def test_the_namespace_links_to_the_top_level_directories() -> None:
    for name in PACKAGES[:-1]:
        link = ROOT / "gpuq_k8s" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), link


def test_every_command_line_module_is_in_the_top_layer() -> None:
    """pyproject's layers contract names the modules of gpuq_k8s/ one by one: a new one must join it."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    layers = pyproject.split("layers = [", 1)[1].split("]", 1)[0]
    top = {name.strip() for name in layers.splitlines()[1].strip(' ",').split(":")}
    modules = {f"gpuq_k8s.{p.stem}" for p in (ROOT / "gpuq_k8s").glob("*.py") if p.stem != "__init__"}
    assert modules == top
