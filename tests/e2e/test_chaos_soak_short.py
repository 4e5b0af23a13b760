"""The chaos soak of issue 11, short: the code of ``python -m tests.e2e.chaos`` (tests/e2e/chaos/) with
300 pod creates and deletes across the five quota kinds and every fault kind at least once (kill -9,
watch stall, apiserver restart with etcd compaction, leader switch, node add, node remove), on a
control plane of its own with two ``gpuq scheduler`` replicas. The invariant checker reads the API
after every step; the soak must end with no violation. The long run (2,000 operations and more) and
its figures are in the README ("Reliability")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.chaos.soak import FAULTS, Options, Soak

pytestmark = pytest.mark.e2e

OPERATIONS = 300


async def test_short_chaos_soak_keeps_every_invariant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines: list[str] = []
    options = Options(seed=11, operations=OPERATIONS, fault_every=25, settle_every=150, progress=lines.append)
    figures = await Soak(options, workdir=tmp_path).run()
    with capsys.disabled():
        print("\n" + "\n".join(f"  {line}" for line in figures.lines()))
    report = "\n".join([*lines, *figures.lines()])
    assert figures.violations == [], report
    assert all(figures.faults[kind] >= 1 for kind in FAULTS), figures.faults
    assert figures.created + figures.deleted >= OPERATIONS
    assert figures.step_checks >= OPERATIONS
    assert figures.settle_checks >= 4  # two settles, each: every schedulable pod bound, status = recount
    # The faults did something: pods were scheduled throughout, and the stall held watch data back.
    assert figures.bound_seen >= 30, report
    assert figures.held_chunks > 0, report
