"""SIGUSR2 to ``gpuq scheduler``: its cache debugger (scheduler/cache_debugger.py, kube-scheduler's
CacheComparer and CacheDumper on the same signal) compares its state with its informers' caches and
dumps its view to the log, without stopping or disturbing scheduling."""

from __future__ import annotations

import signal

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, eventually, node_of, pending_message
from tests.testing.builders import MakeElasticQuota
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = fixtures.run_scheduler


async def test_sigusr2_compares_the_caches_and_dumps_the_scheduler_view(
    cluster: Cluster, run_scheduler: SchedulerFactory
) -> None:
    name = f"gpuq-{cluster.test_id}"
    ns = cluster.namespace
    node = await cluster.node("n", {"cpu": "4", "memory": "16Gi", "pods": "110"})
    path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/elasticquotas"
    await cluster.create(MakeElasticQuota("quota", ns).min(cpu="2").max(cpu="2").obj(), path)
    await cluster.pod("fits", {"cpu": "2"}, scheduler=name)
    await cluster.pod("over", {"cpu": "1"}, scheduler=name)  # over the quota's max: stays pending
    scheduler = run_scheduler(name, BASE_TIER + "  - name: capacity-scheduling\n")
    await scheduler.wait_ready()

    async def placed() -> bool:
        return bool(node_of((await cluster.pods())["fits"]))

    await eventually(placed, 30, "fits bound", scheduler.log)
    await eventually(lambda: pending_message(cluster, "over", "max"), 30, "over pending", scheduler.log)
    assert scheduler.popen is not None
    scheduler.popen.send_signal(signal.SIGUSR2)

    async def compared() -> str | None:
        log = scheduler.log(200)
        return log if "cache comparison:" in log and "cache dump: queue" in log else None

    log = await eventually(compared, 30, "the comparison and the dump in the log", scheduler.log)
    # The nodes and pods of the whole cluster (other tests' too): counts vary, mismatches do not.
    summary = next(line for line in log.splitlines() if "cache comparison:" in line)
    assert summary.endswith(" 0 unreadable, 0 assumed not yet bound, 0 mismatch(es)"), log
    assert "cache mismatch" not in log, log
    assert f"cache dump: node {node}: 1 pod(s) counted: {ns}/fits" in log, log
    queued = next(line for line in log.splitlines() if "cache dump: queue unschedulable" in line)
    assert f"{ns}/over (" in queued and f"ElasticQuota/{ns}/quota (max)" in queued, queued
    assert scheduler.running, "the signal stopped the scheduler"
    assert scheduler.terminate() == 0, scheduler.log()
