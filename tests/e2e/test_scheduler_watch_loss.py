"""Watch loss: kube-apiserver restarted and etcd compacted under a running ``gpuq scheduler``.

Runs on a control plane of its own (restarting the shared one would cut every other test's
connections). The scheduler's watches break; its informers re-list and deliver the diff, so a pod
deleted while they were down stops counting against the ElasticQuota and new pods are scheduled. A
watcher that resumes from the pre-outage resourceVersion is answered 410 Gone, which is asserted
directly on the informer class the scheduler uses (in the scheduler itself the broken connection
already sends the informer back to a list, so it never asks with the stale version).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.errors import Gone
from gpuq_k8s.common.kube.informer import Informer
from gpuq_k8s.common.model import kinds
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerProcess, eventually, node_of
from tests.e2e.controlplane.harness import ControlPlane, ControlPlaneError, free_ports
from tests.testing.builders import MakeElasticQuota
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

NAME = "gpuq-watch-loss"


@pytest.fixture(scope="module")
def own_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane()
    try:
        plane.start()
        plane.apply_crds()
    except ControlPlaneError as error:
        plane.stop()
        pytest.fail(f"e2e control plane unavailable: {error}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest_asyncio.fixture
async def own_cluster(own_plane: ControlPlane) -> AsyncIterator[Cluster]:
    api = await new_api_client(str(own_plane.kubeconfig))
    helper = Cluster(api, "wl", "watch-loss")
    await helper.request("POST", "/api/v1/namespaces", {"metadata": {"name": helper.namespace}})
    await helper.request(
        "POST", f"/api/v1/namespaces/{helper.namespace}/serviceaccounts", {"metadata": {"name": "default"}}
    )
    yield helper
    await api.close()


def start_scheduler(plane: ControlPlane, tmp_path: Path) -> SchedulerProcess:
    (port,) = free_ports(1)
    config = tmp_path / "config.yaml"
    config.write_text(BASE_TIER + "  - name: capacity-scheduling\n")
    argv = [
        *fixtures.python_module("gpuq_k8s.cli"),
        "scheduler",
        "--kubeconfig",
        str(plane.kubeconfig),
        "--scheduler-name",
        NAME,
        "--metrics-port",
        str(port),
        "--bind-address",
        "127.0.0.1",
        "--config",
        str(config),
        "--flush-interval",
        "0.2",
    ]
    return SchedulerProcess(argv, tmp_path / "scheduler.log", port).start()


async def bound(cluster: Cluster) -> set[str]:
    return {n for n, p in (await cluster.pods()).items() if node_of(p)}


async def test_scheduler_recovers_from_compaction_and_apiserver_restart(
    own_plane: ControlPlane, own_cluster: Cluster, tmp_path: Path
) -> None:
    cluster = own_cluster
    ns = cluster.namespace
    await cluster.node("n", {"cpu": "64", "memory": "64Gi", "pods": "110"})
    path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/elasticquotas"
    await cluster.create(MakeElasticQuota("quota", ns).min(cpu="3").max(cpu="3").obj(), path)
    for i in range(3):
        await cluster.pod(f"before-{i}", {"cpu": "1"}, scheduler=NAME)
    scheduler = start_scheduler(own_plane, tmp_path)
    try:
        await scheduler.wait_ready()
        await eventually(lambda: _has(cluster, 3), 30, "3 pods bound", scheduler.log)

        # The watch goes down: apiserver restarted, history compacted. Meanwhile a bound pod is
        # deleted (after the restart, before the scheduler's watch is back: it only learns of it
        # through the re-list's diff) and a new pod arrives that fits only once that pod is gone.
        listing = await cluster.get(f"/api/v1/namespaces/{ns}/pods")
        old_version = str(listing["metadata"]["resourceVersion"])
        await asyncio.to_thread(fixtures.restart_apiserver, own_plane)
        await cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/before-0")
        revision = await asyncio.to_thread(fixtures.compact_etcd, own_plane)
        await cluster.pod("after-0", {"cpu": "1"}, scheduler=NAME)
        assert revision > int(old_version)
        # What a watcher resuming from before the outage is told: 410 Gone (the informer the
        # scheduler uses classifies it and re-lists).
        stale = Informer(cluster.api, kinds.POD)
        stale._resource_version = old_version
        with pytest.raises(Gone):
            await asyncio.wait_for(stale._watch(), 30)

        names = await eventually(lambda: _bound_set(cluster, {"after-0"}), 60, "after-0 bound", scheduler.log)
        assert names == {"before-1", "before-2", "after-0"}
        # And it keeps scheduling: a fourth pod is over the quota of 3 and stays pending.
        await cluster.pod("after-1", {"cpu": "1"}, scheduler=NAME)

        async def refused() -> bool:
            pod = (await cluster.pods()).get("after-1") or {}
            return any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in (pod.get("status") or {}).get("conditions") or ()
            )

        await eventually(refused, 30, "after-1 refused (quota 3 full)", scheduler.log)
        log = scheduler.log(400)
        assert re.search(r"re-listing|retrying in", log), log
    finally:
        code = scheduler.terminate()
    assert code == 0, scheduler.log()


async def _has(cluster: Cluster, count: int) -> bool:
    return len(await bound(cluster)) == count


async def _bound_set(cluster: Cluster, must: set[str]) -> set[str] | None:
    names = await bound(cluster)
    return names if must <= names else None
