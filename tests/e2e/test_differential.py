"""Issue 23's differential test: one seeded workload of every placement rule kind (about 560 pods on
54 nodes in 3 zones: tests/e2e/differential/workload.py), scheduled once by kube-scheduler and once
by gpuq, each on an identical fresh control plane with kube-controller-manager's PV binder; an
independent checker (tests/e2e/differential/checker.py, none of gpuq's model) judges every bind.

kube-scheduler's 0 violations prove the checker on a real run (its unit test proves it catches a bad
placement of every rule: tests/unit/e2e/test_differential_checker.py); gpuq must have 0 too, and
every pod kube-scheduler bound and gpuq left pending is listed with gpuq's reason and must be
explained (a quota of gpuq's, or an order effect). Larger seeds and sizes:
``python -m tests.e2e.differential --seed N --scale K``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.differential.__main__ import summary
from tests.e2e.differential.compare import QUOTA, UNEXPLAINED, pending_in_second
from tests.e2e.differential.run import GPUQ, KUBE_SCHEDULER, RunResult, run
from tests.e2e.differential.workload import Workload, generate

pytestmark = pytest.mark.e2e

SEED = 23


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate(SEED)


def _run(workload: Workload, scheduler: str, tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    workdir = tmp_path_factory.mktemp(f"differential-{scheduler}")
    return asyncio.run(run(workload, scheduler, Path(workdir)))


@pytest.fixture(scope="module")
def kube(workload: Workload, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    yield _run(workload, KUBE_SCHEDULER, tmp_path_factory)


@pytest.fixture(scope="module")
def gpuq(workload: Workload, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    yield _run(workload, GPUQ, tmp_path_factory)


def test_the_workload_covers_every_rule_kind(workload: Workload) -> None:
    kinds = {p["metadata"]["labels"]["kind"] for p in workload.pods}
    assert len(workload.nodes) >= 50 and workload.pod_count >= 500
    assert {"anti0", "zoneanti", "backend0", "selfaff", "quiet", "webv1", "canary", "prefpod"} <= kinds
    assert {"spreadzone", "spreadhost", "spreadsoft", "spreadreva", "port8080tcp", "port9090tcp"} <= kinds
    assert {"wffc", "csi", "immediate", "rwop", "noclaim", "unbound", "kata", "huge", "disk", "init"} <= kinds
    assert {"sidecar", "gated", "dra", "quota", "ssd", "special", "notz3", "pinned", "filler"} <= kinds
    assert workload.ungate and workload.preemptors
    assert generate(SEED) == workload  # seeded: the same objects every time


def test_kube_scheduler_binds_without_a_violation(
    kube: RunResult, capsys: pytest.CaptureFixture[str]
) -> None:
    with capsys.disabled():
        print("\n" + "\n".join(summary(kube)))
    assert kube.binds >= 400
    assert kube.violations == []
    # The run exercised preemption: victims deleted, the preemptors bound.
    assert sum(1 for kind, _ in kube.history if kind == "DELETED") >= len(
        [p for p in kube.pods if "urgent" in p]
    )
    assert all(key in kube.bound for key in kube.pods if "/urgent-" in key)


def test_gpuq_binds_without_a_violation_and_every_difference_is_explained(
    kube: RunResult, gpuq: RunResult, capsys: pytest.CaptureFixture[str]
) -> None:
    differences = pending_in_second(kube, gpuq)
    reverse = pending_in_second(gpuq, kube)
    with capsys.disabled():
        print("\n" + "\n".join(summary(gpuq)))
        print(f"bound by kube-scheduler, pending under gpuq: {len(differences)}")
        print("\n".join(f"  {d}" for d in differences))
        print(f"bound by gpuq, pending under kube-scheduler: {len(reverse)}")
        print("\n".join(f"  {d}" for d in reverse))
    assert gpuq.violations == []
    assert [d for d in differences if d.verdict == UNEXPLAINED] == []
    # gpuq's ElasticQuota (max 6 cpu in ns-q) is a quota kube-scheduler does not know: listed as such.
    assert [d.pod for d in differences if d.verdict == QUOTA] == [
        f"ns-q/quota-{i:03d}" for i in range(6, 12)
    ] or any(d.verdict == QUOTA for d in differences)
    assert all(key in gpuq.bound for key in gpuq.pods if "/urgent-" in key)
