"""examples/quota-semantics (issue 25): ``gpuq simulate`` and ``gpuq simulate --admission`` show each
corrected case as the example's header says."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.outlook import NEVER, WAIT
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import simulate_explained

EXAMPLE = str(REPO_ROOT / "examples" / "quota-semantics")


def _pods(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{p['namespace']}/{p['name']}": p for p in out["pods"]}


@pytest.mark.parametrize("admission", [False, True])
def test_every_case_of_the_example(capsys: pytest.CaptureFixture[str], admission: bool) -> None:
    out = simulate_explained(capsys, "-f", EXAMPLE, *(("--admission",) if admission else ()))
    pods = _pods(out)
    rejected_or_pending = "Rejected" if admission else "Pending"

    # A card type no node offers, with quota: waits for its node; beyond the quota: never.
    wait = pods["team-a/h100-wait"]
    assert (wait["phase"], wait["outlook"]) == ("Pending", WAIT)
    assert "waits for a node offering NVIDIA-H100" in wait["reason"]
    too_many = pods["team-a/h100-too-many"]
    assert (too_many["phase"], too_many["outlook"]) == (rejected_or_pending, NEVER)
    # The default weights keep the card preference; crossquota's default names cover MIG.
    assert pods["team-a/prefers-a100"]["node"] == "a100-1"
    assert pods["team-a/mig-notebook"]["node"] == "mig-1"
    # The gang that fits gets the node the one that does not fit held; minTaskMember holds the job.
    assert {pods[f"gangs/small-{i}"]["node"] for i in (0, 1)} == {"gang-node"}
    assert all(pods[f"gangs/big-{i}"]["phase"] == "Pending" for i in range(3))
    assert all(pods[f"gangs/job-{n}"]["phase"] == "Pending" for n in ("master-0", "master-1", "worker-0"))
    assert "task master has 1 of its minTaskMember 2" in pods["gangs/job-worker-0"]["reason"]
    # Refusals no usage change can cure: never.
    for key in ("tf/too-small", "tf/bad-count", "train/huge"):
        assert (pods[key]["phase"], pods[key]["outlook"]) == (rejected_or_pending, NEVER), key
    assert "waits until usage drops" not in str(out.get("admissionWarnings"))
    for i in range(3):
        wide = pods[f"train/wide-{i}"]
        assert (wide["phase"], wide["outlook"]) == ("Pending", NEVER)
        assert "ElasticQuota/train/eq (max) by PodGroup train/wide" in wide["reason"]
    # GPUResourceQuota totals of 0, nothing used: 100% available, as tensor-fusion reports it.
    idle = next(q for q in out["gpuResourceQuotas"] if q["namespace"] == "idle")
    assert set(idle["status"]["availablePercent"].values()) == {"100.00"}
    # The sum of ElasticQuota min over the nodes' allocatable: events and conditions on both quotas.
    overcommitted = sorted(e["object"] for e in out["events"] if e["reason"] == "GuaranteeOvercommitted")
    assert overcommitted == ["ElasticQuota/infer/eq", "ElasticQuota/train/eq"]
    for quota in out["elasticQuotas"]:
        (condition,) = quota["conditions"]
        assert (condition["type"], condition["status"]) == ("GuaranteeOvercommitted", "True")
    if admission:
        warned = {w["object"] for w in out["admissionWarnings"]}
        assert {"ElasticQuota/infer/eq", "Pod/team-a/h100-wait"} <= warned
        assert "ElasticQuota/train/eq" not in warned  # its min alone fits: infer's takes the sum past
        assert out["rejected"] == []
