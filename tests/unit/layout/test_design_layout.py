"""docs/design.md's layout and the README's layout table match the tree (issue: a reader finds any rule in
one obvious file, so the map of files must not drift from the files)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.api import read_configuration
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract

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


# No module under tests/ imports a test module (``tests.unit...test_*``, ``tests.e2e.test_*``, any
# ``test_*``): what tests share lives in the harness (tests/testing/), a conftest.py or an e2e helper
# module, so a test module can move, be renamed or be split without breaking another, and pytest never
# collects a test twice.
DYNAMIC_IMPORTS = frozenset({"import_module", "__import__"})


def _package_of(path: Path) -> str:
    return ".".join(path.resolve().relative_to(ROOT).parent.parts)


def _test_module_imports(source: str, package: str = "") -> list[str]:
    """The modules (or names) ``source`` imports from a test module, relative imports resolved against
    ``package`` and ``importlib.import_module("...")`` / ``__import__("...")`` with a literal included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parent = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in DYNAMIC_IMPORTS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        else:
            continue
        found += [name for name in names if any(part.startswith("test_") for part in name.split("."))]
    return found


def test_no_module_under_tests_imports_a_test_module() -> None:
    files = [path for path in (ROOT / "tests").rglob("*.py") if "controlplane/build" not in path.as_posix()]
    assert len(files) > 150
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in files
        if (found := _test_module_imports(path.read_text(), _package_of(path)))
    }
    assert not offenders, f"move what these share into tests/testing/ (or a conftest.py): {offenders}"


@pytest.mark.parametrize(
    ("source", "package", "expected"),
    [
        ("from tests.unit.webhook.test_webhook_server import ServerThread", "tests.unit.webhook", 2),
        ("from tests.e2e import test_scheduler_features as features", "tests.e2e", 1),
        ("import tests.e2e.test_deploy", "tests.e2e", 1),
        ("from test_kube_writes import Response", "", 2),
        ("from .test_capacity_card import POD", "tests.unit.common.model", 2),
        ("from .. import test_config", "tests.unit.common.model", 1),
        ("importlib.import_module('tests.unit.test_volcano_config')", "", 1),
        (
            "from tests.testing.builders import MakePod\nimport pytest\nfrom .helpers import x",
            "tests.unit",
            0,
        ),
    ],
)
def test_the_check_catches_every_way_of_importing_a_test_module(
    source: str, package: str, expected: int
) -> None:
    assert len(_test_module_imports(source, package)) == expected, _test_module_imports(source, package)


def test_every_folder_of_tests_is_a_package() -> None:
    """An ``__init__.py`` in every folder: test modules import as ``tests.unit.<folder>.test_x``, so two
    folders may hold test files of the same name (pytest's rootdir-based import) and mypy checks them all."""
    folders = {
        path.parent for path in (ROOT / "tests").rglob("*.py") if "controlplane/build" not in path.as_posix()
    }
    assert len(folders) > 15
    missing = sorted(
        str(folder.relative_to(ROOT)) for folder in folders if not (folder / "__init__.py").exists()
    )
    assert not missing, f"add an __init__.py to {missing}"


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


# --- no import cycles (issue 22) ------------------------------------------------------------------
# pyproject's "No import cycles" contract (import-linter's acyclic_siblings), run here on the graph
# lint-imports checks, on that graph with a planted cycle, and on a small package with one cycle of
# each kind of import, so the check is shown to fail where it must. What counts as an import: every
# one, at module level, under ``if TYPE_CHECKING:`` and inside a function (a deferred import hides a
# cycle from the interpreter, not from a reader or mypy).


def _importlinter_config() -> dict[str, Any]:
    """pyproject's import-linter settings, read as lint-imports reads them (strings for flags)."""
    return read_configuration(str(ROOT / "pyproject.toml"))


def _acyclic_contract(ancestors: list[str] | None = None) -> AcyclicSiblingsContract:
    contracts = _importlinter_config()["contracts_options"]
    (options,) = [c for c in contracts if c["type"] == AcyclicSiblingsContract.type_name]
    fields = {k: v for k, v in options.items() if k not in {"name", "type"}}
    if ancestors is not None:
        fields["ancestors"] = ancestors
    return AcyclicSiblingsContract(name=options["name"], session_options={}, contract_options=fields)


def _project_graph() -> grimp.ImportGraph:
    session = _importlinter_config()["session_options"]
    return grimp.build_graph(
        *session["root_packages"],
        include_external_packages=session.get("include_external_packages") == "True",
        exclude_type_checking_imports=session.get("exclude_type_checking_imports") == "True",
        cache_dir=None,
    )


def _cycles(contract: AcyclicSiblingsContract, graph: grimp.ImportGraph) -> dict[str, set[tuple[str, str]]]:
    check = contract.check(graph, verbose=False)
    breakers: dict[str, set[tuple[str, str]]] = check.metadata["cycle_breakers_by_package"]
    assert check.kept == (not breakers)
    return breakers


def test_every_source_module_is_in_the_import_graph() -> None:
    """A directory without ``__init__.py`` (a namespace package) is invisible to grimp, so to every
    import contract: each module of the tree must be a node of the graph lint-imports checks."""
    graph = _project_graph()
    expected = {
        "gpuq_k8s." + ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in PACKAGES[:-1]
        for path in (ROOT / package).rglob("*.py")
    } | {f"gpuq_k8s.{p.stem}" for p in (ROOT / "gpuq_k8s").glob("*.py") if p.stem != "__init__"}
    assert len(expected) > 150
    assert expected <= graph.modules, sorted(expected - graph.modules)


def test_the_project_has_no_import_cycle() -> None:
    assert _cycles(_acyclic_contract(), _project_graph()) == {}


@pytest.mark.parametrize(
    ("importer", "imported", "package"),
    [
        # errors importing the quota errors again (the first circle, between two modules)
        ("gpuq_k8s.common.model.errors", "gpuq_k8s.common.model.quota_exceeded", "gpuq_k8s.common.model"),
        # the framework importing the tracker again (the second: a subpackage and a module of scheduler)
        ("gpuq_k8s.scheduler.framework.runtime", "gpuq_k8s.scheduler.groups", "gpuq_k8s.scheduler"),
        # the model importing the kube layer: a cycle of the packages common.model and common.kube
        # only (no module of common.kube imports pods.py), refused as well
        ("gpuq_k8s.common.model.pods", "gpuq_k8s.common.kube.client", "gpuq_k8s.common"),
    ],
)
def test_a_planted_cycle_breaks_the_contract(importer: str, imported: str, package: str) -> None:
    graph = _project_graph()
    depth = package.count(".") + 2
    downstream, upstream = (".".join(m.split(".")[:depth]) for m in (importer, imported))
    assert graph.chain_exists(importer=upstream, imported=downstream, as_packages=True), "no cycle planted"
    assert _cycles(_acyclic_contract(), graph) == {}
    graph.add_import(importer=importer, imported=imported)
    breakers = _cycles(_acyclic_contract(), graph)
    assert list(breakers) == [package], breakers


SYNTHETIC = {
    "__init__.py": "",
    # a module-level cycle
    "a.py": "from synthetic_cycles import b\n",
    "b.py": "from synthetic_cycles import a\n",
    # a cycle closed only under TYPE_CHECKING (an annotation-only import)
    "c.py": "from synthetic_cycles import d\n",
    "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from synthetic_cycles import c\n",
    # a cycle closed only inside a function (a deferred import)
    "e.py": "from synthetic_cycles import f\n",
    "f.py": "def late() -> None:\n    from synthetic_cycles import e  # noqa: F401\n",
    # no cycle: g -> h only
    "g.py": "from synthetic_cycles import h\n",
    "h.py": "X = 1\n",
}


def test_each_kind_of_import_closes_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "synthetic_cycles"
    package.mkdir()
    for name, text in SYNTHETIC.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("synthetic_cycles", cache_dir=None)
    breakers = _cycles(_acyclic_contract(["synthetic_cycles"]), graph)
    assert list(breakers) == ["synthetic_cycles"]
    closed = {frozenset(edge) for edge in breakers["synthetic_cycles"]}
    assert closed == {
        frozenset({"synthetic_cycles.a", "synthetic_cycles.b"}),
        frozenset({"synthetic_cycles.c", "synthetic_cycles.d"}),
        frozenset({"synthetic_cycles.e", "synthetic_cycles.f"}),
    }
