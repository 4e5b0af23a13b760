"""The distribution as a user installs it: a wheel built from this checkout, installed into a fresh
virtual environment outside the checkout, runs ``gpuq simulate`` and ``kubectl-gpuq --help``, and puts
nothing in site-packages but the one import package ``gpuq_k8s`` (no top-level ``common``,
``scheduler``, ``webhook``, ``certs`` nor ``gpuq``, names other distributions use; design.md "Layout").

The dependencies come from the package index through pip's cache (warm after the suite's own
install). That ``gpuq-k8s`` is free on PyPI (``pip download --no-deps gpuq-k8s`` finds nothing) is a
check of the index's present state, not of this code: docs/install.md "The package name" records it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testing.paths import REPO_ROOT

pytestmark = pytest.mark.e2e

FOREIGN_TOP_LEVEL = ("common", "scheduler", "webhook", "certs", "gpuq")
# What the wheel is built from: the project file, the readme it embeds, the import package and the
# top-level directories its links point to.
SOURCES = ("pyproject.toml", "README.md", "gpuq_k8s", "common", "scheduler", "webhook", "certs")


def _run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # A clean environment: no PYTHONPATH, no active virtual environment leaking into the new one.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the wheel, the fresh venv's bin directory)."""
    root = tmp_path_factory.mktemp("wheel")
    # The build runs on a copy of what the wheel is made of (the links of gpuq_k8s/ kept as links):
    # setuptools leaves a build/ directory in the tree it builds, whose stale files a later build of the
    # checkout would pack.
    source = root / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    dist = root / "dist"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)], root
    )
    assert built.returncode == 0, built.stderr
    [wheel] = dist.glob("gpuq_k8s-*.whl")
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], root)
    assert made.returncode == 0, made.stderr
    bin_dir = venv / "bin"
    pip = _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)], root, timeout=900)
    assert pip.returncode == 0, pip.stderr
    yield wheel, bin_dir


def test_the_wheel_holds_one_import_package_with_its_data(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"gpuq_k8s", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    # The links of the checkout are stored as the directories they point to, data files included.
    for needed in (
        "gpuq_k8s/common/model/kinds.py",
        "gpuq_k8s/scheduler/simulate/core_schema.json",
        "gpuq_k8s/scheduler/simulate/crds/scheduling.volcano.sh_queues.yaml",
        "gpuq_k8s/webhook/command.py",
        "gpuq_k8s/certs/__init__.py",
        "gpuq_k8s/py.typed",
    ):
        assert needed in names, needed
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    for script in ("gpuq = gpuq_k8s.cli:main", "kubectl-gpuq = gpuq_k8s.kubectl:main"):
        assert script in text


def test_no_generic_top_level_package_is_importable(installed: tuple[Path, Path], tmp_path: Path) -> None:
    _, bin_dir = installed
    names = list(FOREIGN_TOP_LEVEL)
    probe = (
        "import importlib.util, json;"
        f"print(json.dumps({{n: importlib.util.find_spec(n) is not None for n in {names!r}}}));"
        "import gpuq_k8s.common.model.kinds, gpuq_k8s.scheduler.cycle;"
        "import gpuq_k8s.webhook.command, gpuq_k8s.certs"
    )
    # From a directory outside the checkout: only site-packages is on the path.
    result = _run([str(bin_dir / "python"), "-c", probe], tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == dict.fromkeys(FOREIGN_TOP_LEVEL, False)


def test_simulate_and_the_kubectl_plugin_run_from_the_fresh_venv(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _, bin_dir = installed
    example = REPO_ROOT / "examples" / "heterogeneous-cluster"
    simulated = _run([str(bin_dir / "gpuq"), "simulate", "-f", str(example), "-o", "json"], tmp_path)
    assert simulated.returncode == 0, simulated.stderr
    pods = {p["name"]: p for p in json.loads(simulated.stdout)["pods"]}
    assert pods["finetune-0"]["phase"] == "Bound"
    assert pods["big-train-0"]["outlook"] == "never"
    helped = _run([str(bin_dir / "kubectl-gpuq"), "--help"], tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: kubectl gpuq")
    assert all(command in helped.stdout for command in ("queues", "pending", "explain"))
