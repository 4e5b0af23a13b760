"""The guaranteed pool (common/model/elastic/guarantee.py, the capacity-scheduling plugin, the webhook):
the sum of every ElasticQuota's min against what the nodes have allocatable. capacity-scheduling.md
calls a sum of min above the cluster's capacity a misconfiguration; gpuq admits it and says so: a
Warning event and a condition on each ElasticQuota involved, an admission warning, a metric."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.elastic import guarantee
from gpuq_k8s.scheduler.kube.quota_status import QuotaStatus
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.webhook.admission import review
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import GPU, MakeElasticQuota, MakeNode
from tests.testing.scheduler import make_scheduler
from tests.testing.simulate_text import simulate

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _node(name: str, gpus: int = 8) -> MakeNode:
    return MakeNode(name).alloc(cpu="96", memory="1Ti", pods="110").gpus(gpus)


def test_overcommitted_names_the_resource_the_figures_and_the_quotas_involved() -> None:
    mins = {"a": {GPU: 10_000}, "b": {GPU: 10_000, "cpu": 10_000}, "c": {"cpu": 10_000}}
    capacity = {GPU: 16_000, "cpu": 192_000}
    (over,) = guarantee.overcommitted(mins, capacity)
    assert (over.resource, over.total_min, over.capacity, over.quotas) == (GPU, 20_000, 16_000, ("a", "b"))
    assert over.message == (
        "the sum of min over all ElasticQuotas for nvidia.com/gpu is 20, more than the 16 the cluster's "
        "nodes have allocatable"
    )
    assert guarantee.over_capacity(mins, capacity) == {"cpu": 0, GPU: 4000}
    assert guarantee.condition_of("c", [over]) is None  # its min asks no GPU: not involved
    status, reason, message = guarantee.condition_of("a", [over]) or ("", "", "")
    assert (status, reason) == ("True", "SumOfMinExceedsCapacity")
    assert message.startswith("The sum of min") and message.endswith("min is no longer a guarantee")
    # A resource no node has: any min of it is over the capacity (0).
    assert [o.resource for o in guarantee.overcommitted({"a": {"example.com/fpga": 1}}, {})] == [
        "example.com/fpga"
    ]


def test_admission_warns_only_about_a_min_the_object_raises() -> None:
    others = [{GPU: 10_000}]
    capacity = {GPU: 16_000}
    raised = guarantee.admission_warnings("ElasticQuota/b/eq", {GPU: 10_000}, {}, others, capacity)
    assert raised == [
        "ElasticQuota/b/eq: spec.min[nvidia.com/gpu]: the sum of min over all ElasticQuotas for "
        "nvidia.com/gpu is 20, more than the 16 the cluster's nodes have allocatable: min is no longer "
        "a guarantee"
    ]
    # An update that leaves the min as it was (already over) is not what made the sum exceed.
    assert (
        guarantee.admission_warnings("ElasticQuota/b/eq", {GPU: 10_000}, {GPU: 10_000}, others, capacity)
        == []
    )
    assert guarantee.admission_warnings("ElasticQuota/b/eq", {GPU: 6_000}, {}, others, capacity) == []


def _quota(namespace: str, gpus: int) -> dict[str, Any]:
    return MakeElasticQuota("eq", namespace).min({GPU: gpus}).obj()


def test_webhook_warns_on_the_create_that_makes_the_sum_exceed() -> None:
    view = StaticView([_node("n1").obj(), _node("n2").obj(), _quota("team-a", 10)])
    fits = review(_quota("team-b", 6), "CREATE", view)
    assert fits.allowed and fits.warnings == ()
    over = review(_quota("team-b", 10), "CREATE", view)
    assert over.allowed
    (warning,) = over.warnings
    assert warning.startswith("ElasticQuota/team-b/eq: spec.min[nvidia.com/gpu]: the sum of min")
    assert "is 20, more than the 16" in warning
    # An UPDATE that raises it past the capacity warns too; one that only changes max does not.
    raised = review(_quota("team-b", 12), "UPDATE", view, old=_quota("team-b", 6))
    assert raised.allowed and len(raised.warnings) == 1
    same_min = MakeElasticQuota("eq", "team-b").min({GPU: 10}).max({GPU: 12}).obj()
    assert review(same_min, "UPDATE", view, old=_quota("team-b", 10)).warnings == ()


class _Backend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def patch_status(self, kind: Any, namespace: str, name: str, status: Any) -> None:
        self.patches.append((kind.kind, namespace, dict(status)))
        super().patch_status(kind, namespace, name, status)


def _condition(backend: _Backend, namespace: str) -> dict[str, str] | None:
    written = [p[2] for p in backend.patches if p[0] == "ElasticQuota" and p[1] == namespace]
    if not written or "conditions" not in written[-1]:
        return None
    (condition,) = written[-1]["conditions"]
    assert condition["type"] == "GuaranteeOvercommitted"
    return dict(condition)


def test_scheduler_sets_the_condition_and_one_event_and_clears_it_when_nodes_come() -> None:
    sched, backend = make_scheduler("capacity-scheduling", backend=_Backend())
    sched.set_node(_node("n1").info())
    sched.set_node(_node("n2").info())
    for namespace in ("team-a", "team-b"):
        sched.put_object(_quota(namespace, 10))
    sched.put_object(MakeElasticQuota("eq", "team-c").min(cpu="1").obj())
    sched.wall_clock = lambda: NOW
    sched.sync_status()
    events = [e for e in backend.events if e.reason == "GuaranteeOvercommitted"]
    assert sorted(e.obj for e in events) == ["ElasticQuota/team-a/eq", "ElasticQuota/team-b/eq"]
    assert all(e.type == "Warning" and "is 20, more than the 16" in e.message for e in events)
    for namespace in ("team-a", "team-b"):
        condition = _condition(backend, namespace)
        assert condition is not None and condition["status"] == "True"
        assert condition["reason"] == "SumOfMinExceedsCapacity"
        assert condition["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert _condition(backend, "team-c") is None  # not involved: no condition
    metrics = QuotaStatus.of(sched).snapshot().elastic_min_over_capacity
    assert metrics == {("cpu",): 0.0, (GPU,): 4.0}

    sched.sync_status()  # nothing changed: no new event
    assert len([e for e in backend.events if e.reason == "GuaranteeOvercommitted"]) == 2

    sched.set_node(_node("n3").info())  # 24 GPUs now: the sum of min fits again
    sched.sync_status()
    for namespace in ("team-a", "team-b"):
        condition = _condition(backend, namespace)
        assert condition is not None and condition["status"] == "False"
        assert condition["reason"] == "SumOfMinWithinCapacity"
    assert len([e for e in backend.events if e.reason == "GuaranteeOvercommitted"]) == 2
    assert QuotaStatus.of(sched).snapshot().elastic_min_over_capacity == {("cpu",): 0.0, (GPU,): 0.0}


def test_a_condition_written_before_a_restart_is_cleared_not_repeated() -> None:
    """After a restart the plugin reads the condition from the object: the sum fitting now is
    written as False (no event), instead of leaving a stale True."""
    sched, backend = make_scheduler("capacity-scheduling", backend=_Backend())
    sched.set_node(_node("n1").info())
    stale = _quota("team-a", 4)
    stale["status"] = {
        "conditions": [
            {
                "type": "GuaranteeOvercommitted",
                "status": "True",
                "reason": "SumOfMinExceedsCapacity",
                "message": "old",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        ]
    }
    sched.put_object(stale)
    sched.sync_status()
    condition = _condition(backend, "team-a")
    assert condition is not None and condition["status"] == "False"
    assert not [e for e in backend.events if e.reason == "GuaranteeOvercommitted"]
    obj = sched.objects.get(kinds.ELASTIC_QUOTA, "team-a", "eq")
    assert obj is not None and obj["status"]["conditions"][0]["status"] == "False"


def test_the_crd_keeps_the_condition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """deploy/crds declares status.conditions (the apiserver would prune an undeclared field): an
    ElasticQuota holding the condition is valid input, as the CRD schema check of ``gpuq simulate``
    (the same files) says, and the simulated report shows the condition it computes."""
    held = _quota("team-a", 20)
    held["status"] = {
        "conditions": [
            {
                "type": "GuaranteeOvercommitted",
                "status": "True",
                "reason": "SumOfMinExceedsCapacity",
                "message": "earlier",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        ]
    }
    out = simulate(tmp_path, capsys, yaml.safe_dump_all([_node("n1").obj(), held]))
    (row,) = out["elasticQuotas"]
    (condition,) = row["conditions"]
    assert condition["status"] == "True" and "is 20, more than the 8" in condition["message"]
    # Still involved: the time of the transition is the one the object held.
    assert condition["lastTransitionTime"] == "2025-01-01T00:00:00Z"
