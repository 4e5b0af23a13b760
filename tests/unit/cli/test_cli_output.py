"""The command line's output: ``--version``, a reader that leaves early (``| head -1``), tables that
are not wrapped when piped, ``--explain`` in table mode, and ``-o html``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuq_k8s.cli import main
from gpuq_k8s.common.kube.metrics import gpuq_version
from tests.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
EXAMPLE = ROOT / "examples" / "heterogeneous-cluster"


def _gpuq(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuq_k8s.cli", *args]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"gpuq {gpuq_version()}\n"


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    """``gpuq simulate -o json | head -1``: one line, exit quietly, nothing on stderr."""
    pipeline = subprocess.run(
        f"{' '.join(_gpuq('simulate', '-f', str(EXAMPLE), '-o', 'json'))} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert pipeline.stdout == "{\n"
    assert pipeline.stderr == ""


def test_piped_tables_do_not_wrap_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "big-train-0" in line)
    # The whole reason on the pod's own line, the outlook in its column.
    assert "│ never " in line
    assert "NVIDIA-H100 limit 4 would have to be at least 8)" in line
    assert "NVIDIA-A100/mig-1g.10gb-mixed" in next(line for line in out.splitlines() if "notebook-0" in line)


def test_explain_in_table_mode_prints_each_pods_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(EXAMPLE)]) == 0
    plain = capsys.readouterr().out
    assert main(["simulate", "-f", str(EXAMPLE), "--explain=all"]) == 0
    explained = capsys.readouterr().out
    assert main(["simulate", "-f", str(EXAMPLE), "--explain"]) == 0
    pending_only = capsys.readouterr().out
    assert "Pod team-a/finetune-0: Bound on a100-2" not in plain
    assert "Pod team-a/finetune-0: Bound on a100-2" in explained
    # --explain alone explains the pods left pending, and only them.
    assert "Pod team-a/finetune-0: Bound" not in pending_only
    assert "Pod team-a/notebook-4: Pending" in pending_only
    # notebook-4's attempt; big-train's pods never had one (their PodGroup waits at enqueue).
    assert pending_only.count("FILTERED") == 1
    block = explained[explained.index("Pod team-a/notebook-4: Pending") :]
    header = next(line for line in block.splitlines() if "FILTERED" in line)
    assert "NODE" in header and "TOTAL" in header
    assert any(line.split("│")[1].strip() == "t4-1" for line in block.splitlines() if line.count("│") > 2)


def test_simulate_needs_files_or_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate"]) == 2
    assert capsys.readouterr().err == (
        "error: simulate: give -f FILE_OR_DIR, --kubeconfig P (the live cluster), or both\n"
    )


def test_explain_without_files_reads_the_cluster_and_says_so_when_it_cannot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.kubeconfig"
    assert main(["explain", "ns/p", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the cluster:")
    assert "\n" not in err.rstrip("\n")
