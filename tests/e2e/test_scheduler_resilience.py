"""``gpuq scheduler`` under the failures production brings: a SIGKILL mid-run, a second replica
(leader election), and what /metrics reports after a run. Every outcome is asserted from the API
objects (bindings, quota status, Events, the Lease) or the scheduler's own /metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpuq_k8s.common.kube.status import call
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import (
    Cluster,
    SchedulerFactory,
    eventually,
    metric_value,
    node_of,
    scheduled_condition,
)
from tests.testing.builders import MakeElasticQuota
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = fixtures.run_scheduler

ELASTIC = BASE_TIER + "  - name: capacity-scheduling\n"


def eq_path(namespace: str) -> str:
    return f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/elasticquotas"


async def settled(cluster: Cluster, total: int) -> dict[str, Any] | None:
    """All ``total`` pods either bound or pending with a PodScheduled=False message."""
    pods = await cluster.pods()
    if len(pods) != total:
        return None
    bound = {n: node_of(p) for n, p in pods.items() if node_of(p)}
    pending = {n for n, p in pods.items() if not node_of(p)}
    for name in pending:
        condition = scheduled_condition(pods[name])
        if not condition or condition.get("status") != "False":
            return None
    return {"bound": bound, "pending": pending}


async def test_restart_after_sigkill_neither_double_counts_nor_exceeds_quota(
    cluster: Cluster, run_scheduler: SchedulerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """design.md "Data flow": usage is re-derived from bound pods at start. 300 one-core pods against an
    ElasticQuota of max 150 cores: the scheduler is SIGKILLed as soon as the first binds land, then
    restarted. Exactly 150 end up bound (fewer would mean the restart double-counted, more that it
    forgot), and status.used says 150."""
    name = f"gpuq-{cluster.test_id}"
    await cluster.node("n", {"cpu": "400", "memory": "640Gi", "pods": "1000"})
    await cluster.create(
        MakeElasticQuota("quota", cluster.namespace).min(cpu="150").max(cpu="150").obj(),
        eq_path(cluster.namespace),
    )
    total = 300
    await asyncio.gather(*(cluster.pod(f"p-{i:03d}", {"cpu": "1"}, scheduler=name) for i in range(total)))
    first = run_scheduler(name, ELASTIC, "--bind-concurrency", "1")

    async def some_bound() -> int:
        return sum(1 for p in (await cluster.pods()).values() if node_of(p))

    at_kill = await eventually(some_bound, 30, "a first bind", first.log)
    first.kill()
    with capsys.disabled():
        print(f" [SIGKILL with {at_kill} of 150 bound]", end="")
    assert at_kill < 150, f"the kill came after the run ({at_kill} bound): nothing was tested"
    second = run_scheduler(name, ELASTIC)
    await second.wait_ready()
    state = await eventually(lambda: settled(cluster, total), 40, "every pod bound or pending", second.log)
    assert len(state["bound"]) == 150, f"bound {len(state['bound'])} (first run had bound {at_kill})"

    async def used() -> Any:
        quota = await cluster.get(f"{eq_path(cluster.namespace)}/quota")
        return (quota.get("status") or {}).get("used") == {"cpu": "150"} or None

    await eventually(used, 30, "status.used cpu 150", second.log)
    assert second.terminate() == 0, second.log()


async def lease_holder(cluster: Cluster, lease: str) -> str:
    reply = await call(
        cluster.api, "GET", f"/apis/coordination.k8s.io/v1/namespaces/{cluster.namespace}/leases/{lease}"
    )
    return str((reply.body.get("spec") or {}).get("holderIdentity") or "") if reply.ok else ""


async def scheduled_by(cluster: Cluster) -> dict[str, list[tuple[str, int]]]:
    """Pod name -> [(reportingInstance, series count)] of its Scheduled events."""
    listing = await cluster.get(f"/apis/events.k8s.io/v1/namespaces/{cluster.namespace}/events")
    out: dict[str, list[tuple[str, int]]] = {}
    for event in listing.get("items") or []:
        if event.get("reason") == "Scheduled":
            count = int((event.get("series") or {}).get("count") or 1)
            out.setdefault(event["regarding"]["name"], []).append((event["reportingInstance"], count))
    return out


async def test_leader_election_standby_takes_over_and_nothing_binds_twice(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    """Two replicas with --leader-elect: only the Lease holder binds; when it is SIGKILLed (no
    release), the standby takes the Lease after the lease duration and binds the remaining pods.
    Every pod has exactly one Scheduled event, from the replica that bound it."""
    name = f"gpuq-{cluster.test_id}"
    lease = f"lease-{cluster.test_id}"
    await cluster.node("n", {"cpu": "64", "memory": "64Gi", "pods": "110"})
    election = [
        "--leader-elect",
        "--leader-elect-resource-namespace",
        cluster.namespace,
        "--leader-elect-resource-name",
        lease,
        "--leader-elect-lease-duration",
        "3",
        "--leader-elect-renew-deadline",
        "2",
        "--leader-elect-retry-period",
        "0.5",
    ]
    a = run_scheduler(name, None, *election, "--leader-elect-identity", "replica-a")
    await eventually(lambda: _holder_is(cluster, lease, "replica-a"), 30, "replica-a leads", a.log)
    b = run_scheduler(name, None, *election, "--leader-elect-identity", "replica-b")
    await b.wait_ready()
    first = {f"first-{i}" for i in range(5)}
    for pod in sorted(first):
        await cluster.pod(pod, {"cpu": "1"}, scheduler=name)

    async def events_of(names: set[str]) -> dict[str, list[tuple[str, int]]] | None:
        seen = await scheduled_by(cluster)
        return seen if names <= set(seen) else None

    seen = await eventually(lambda: events_of(first), 30, "the leader binds the first pods", a.log)
    assert {seen[p][0][0] for p in first} == {"replica-a"}
    # replica-a found the Lease free and took it before its first lists: nothing to list again.
    assert "caches listed after taking the Lease: no re-list" in a.log(400), a.log()
    assert "re-listed" not in a.log(400), a.log()
    standby = b.metrics()
    assert metric_value(standby, "gpuq_scheduler_schedule_attempts_total", {"result": "scheduled"}) == 0, (
        standby
    )
    # The state gauges are the leader's alone: a standby's would count every pending pod as queued.
    assert "gpuq_scheduler_pending_pods{" not in standby and "gpuq_queue_pending_pods{" not in standby
    assert metric_value(a.metrics(), "gpuq_scheduler_pending_pods", {"queue": "active"}) == 0

    a.kill()  # no release: the standby must wait for the lease to expire
    second = {f"second-{i}" for i in range(5)}
    for pod in sorted(second):
        await cluster.pod(pod, {"cpu": "1"}, scheduler=name)
    seen = await eventually(lambda: events_of(first | second), 40, "the standby binds the rest", b.log)
    assert await lease_holder(cluster, lease) == "replica-b"
    # replica-b listed as a standby, before it held the Lease; its watches are live, so on taking it
    # they catch up to the present instead of listing again (test_scheduler_takeover.py).
    assert "caches caught up on taking the Lease without a list" in b.log(400), b.log()
    assert "re-listed" not in b.log(400), b.log()
    for pod in second:
        assert seen[pod] == [("replica-b", 1)], (pod, seen[pod])
    for pod in first:
        assert seen[pod] == [("replica-a", 1)], (pod, seen[pod])
    pods = await cluster.pods()
    assert all(node_of(p) for p in pods.values())
    text = b.metrics()
    assert metric_value(text, "gpuq_scheduler_schedule_attempts_total", {"result": "scheduled"}) == 5, text
    assert metric_value(text, "gpuq_scheduler_binds_total", {"result": "conflict"}) in (None, 0.0), text
    # A clean stop releases the Lease for the next replica.
    assert b.terminate() == 0, b.log()
    assert await lease_holder(cluster, lease) == ""


async def _holder_is(cluster: Cluster, lease: str, identity: str) -> bool:
    return await lease_holder(cluster, lease) == identity


async def test_metrics_after_a_run(cluster: Cluster, run_scheduler: SchedulerFactory) -> None:
    """/metrics carries design.md's names with values that match what happened: 4 pods scheduled,
    1 unschedulable (parked), gpuq_elastic_quota_used 4 cores (min and max 4), extension-point timings
    observed."""
    name = f"gpuq-{cluster.test_id}"
    await cluster.node("n", {"cpu": "64", "memory": "64Gi", "pods": "110"})
    await cluster.create(
        MakeElasticQuota("quota", cluster.namespace).min(cpu="4").max(cpu="4").obj(),
        eq_path(cluster.namespace),
    )
    for i in range(5):
        await cluster.pod(f"p-{i}", {"cpu": "1"}, scheduler=name)
    scheduler = run_scheduler(name, ELASTIC)
    await scheduler.wait_ready()
    await eventually(lambda: settled(cluster, 5), 30, "4 bound and 1 pending", scheduler.log)

    async def final() -> str | None:
        text = scheduler.metrics()
        return text if metric_value(text, "gpuq_elastic_quota_used", {"resource": "cpu"}) == 4 else None

    text = await eventually(final, 30, "gpuq_elastic_quota_used cpu 4", scheduler.log)
    ns = cluster.namespace
    assert metric_value(text, "gpuq_elastic_quota_used", {"namespace": ns, "resource": "cpu"}) == 4
    assert metric_value(text, "gpuq_elastic_quota_min", {"namespace": ns, "resource": "cpu"}) == 4
    assert metric_value(text, "gpuq_elastic_quota_max", {"namespace": ns, "resource": "cpu"}) == 4
    assert metric_value(text, "gpuq_scheduler_schedule_attempts_total", {"result": "scheduled"}) == 4
    assert (
        metric_value(text, "gpuq_scheduler_schedule_attempts_total", {"result": "unschedulable"}) or 0
    ) >= 1
    assert metric_value(text, "gpuq_scheduler_schedule_attempts_total", {"result": "error"}) == 0
    attempts = metric_value(text, "gpuq_scheduler_scheduling_attempt_duration_seconds_count")
    assert attempts is not None and attempts >= 5
    assert metric_value(text, "gpuq_scheduler_pending_pods", {"queue": "unschedulable"}) == 1
    assert metric_value(text, "gpuq_scheduler_pending_pods", {"queue": "active"}) == 0
    for point in ("PreFilter", "Filter", "Score", "Reserve"):
        count = metric_value(
            text,
            "gpuq_scheduler_framework_extension_point_duration_seconds_count",
            {"extension_point": point},
        )
        assert count is not None and count >= 1, point
    for family in (
        "volcano_queue_card_deserved",
        "volcano_queue_card_allocated",
        "volcano_queue_card_request",
        "volcano_queue_card_capacity",
        "gpuq_gpu_quota_usage_ratio",
    ):
        assert f"# TYPE {family} gauge" in text, family
    code, body = scheduler.get("/livez")
    assert (code, body) == (200, "ok")
    assert scheduler.get("/readyz")[0] == 200
    assert scheduler.terminate() == 0, scheduler.log()
