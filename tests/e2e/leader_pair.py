"""Two ``gpuq scheduler`` replicas with leader election, each through its own e2e proxy: the setup the
leader-election fault tests share (split brain, takeover, stop with binds unanswered).

:func:`leader_pair` makes, in the test's namespace, a node of 64 cpu and an ElasticQuota of ``min`` =
``max`` = ``max_cpu`` cpu; it gives the replicas' Lease flags, a starter per replica (replica A on
``proxy_a``, B on ``proxy_b``; a proxy not given is started here and stopped on exit), and recounts
the cpu bound in the namespace from the API every 0.2 s while the block runs (:class:`BoundRecount`:
what the tests assert the quota's ``max`` against). On exit every replica started is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from gpuq_k8s.common.kube.status import call
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import Cluster, SchedulerFactory, SchedulerProcess, eventually, node_of
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.proxy import ApiProxy
from tests.testing.builders import MakeElasticQuota
from tests.testing.config import BASE_TIER

# The configuration both replicas run: the base tier and capacity-scheduling (the ElasticQuota).
ELASTIC = BASE_TIER + "  - name: capacity-scheduling\n"


@dataclass(frozen=True)
class LeaseTimes:
    """The replicas' ``--leader-elect-lease-duration``, ``-renew-deadline`` and ``-retry-period`` (s)."""

    lease_duration: str
    renew_deadline: str
    retry_period: str

    def flags(self) -> tuple[str, ...]:
        return (
            *("--leader-elect-lease-duration", self.lease_duration),
            *("--leader-elect-renew-deadline", self.renew_deadline),
            *("--leader-elect-retry-period", self.retry_period),
        )


@dataclass
class BoundRecount:
    """The most pods bound at once in the namespace (1 cpu each in these tests), polled from the API."""

    cluster: Cluster
    worst: int = 0
    polls: int = 0

    async def run(self) -> None:
        while True:
            pods = await self.cluster.pods()
            self.worst = max(self.worst, sum(1 for p in pods.values() if node_of(p)))
            self.polls += 1
            await asyncio.sleep(0.2)


@dataclass
class LeaderPair:
    """Replica A and B's scheduler name, Lease, proxies and starters (see :func:`leader_pair`)."""

    cluster: Cluster
    name: str  # the scheduler name both replicas serve
    lease: str  # the Lease's name, in the test's namespace
    election: tuple[str, ...]  # the leader-election flags both replicas run with
    proxy_a: ApiProxy
    proxy_b: ApiProxy
    start_a: SchedulerFactory
    start_b: SchedulerFactory
    recount: BoundRecount
    started: list[SchedulerProcess] = field(default_factory=list)

    @property
    def lease_path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.cluster.namespace}/leases/{self.lease}"

    async def lease_spec(self) -> dict[str, object]:
        """The Lease's spec; empty until the first leader made it."""
        reply = await call(self.cluster.api, "GET", self.lease_path)
        return dict(reply.body.get("spec") or {}) if reply.ok else {}

    async def held_by(self, identity: str) -> dict[str, object] | None:
        """The Lease's spec when ``identity`` holds it, else None (an ``eventually`` probe)."""
        spec = await self.lease_spec()
        return spec if spec.get("holderIdentity") == identity else None

    def replica_a(self, *extra: str) -> SchedulerProcess:
        """Start replica A (identity ``replica-a``), through ``proxy_a``."""
        return self.start_a(
            self.name, ELASTIC, *self.election, "--leader-elect-identity", "replica-a", *extra
        )

    def replica_b(self, *extra: str) -> SchedulerProcess:
        """Start replica B (identity ``replica-b``), through ``proxy_b``."""
        return self.start_b(
            self.name, ELASTIC, *self.election, "--leader-elect-identity", "replica-b", *extra
        )

    async def a_leads_then_b_stands_by(self, *a_extra: str) -> tuple[SchedulerProcess, SchedulerProcess]:
        """Start A, wait until it holds the Lease, then start B and wait until it is ready (a standby)."""
        a = self.replica_a(*a_extra)
        await eventually(lambda: self.held_by("replica-a"), 30, "replica-a leads", a.log)
        b = self.replica_b()
        await b.wait_ready(60)
        return a, b


@contextlib.asynccontextmanager
async def leader_pair(
    cluster: Cluster,
    control_plane: ControlPlane,
    tmp_path: Path,
    *,
    max_cpu: int,
    times: LeaseTimes,
    proxy_a: ApiProxy | None = None,
    proxy_b: ApiProxy | None = None,
) -> AsyncIterator[LeaderPair]:
    """The two replicas' setup (module docstring); the replicas are started by the test."""
    ns = cluster.namespace
    lease = f"lease-{cluster.test_id}"
    await cluster.node("n", {"cpu": "64", "memory": "64Gi", "pods": "110"})
    await cluster.create(
        MakeElasticQuota("quota", ns).min(cpu=str(max_cpu)).max(cpu=str(max_cpu)).obj(),
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/elasticquotas",
    )
    election = (
        *("--leader-elect", "--leader-elect-resource-namespace", ns, "--leader-elect-resource-name", lease),
        *times.flags(),
    )
    a = proxy_a if proxy_a is not None else await ApiProxy(control_plane).start()
    b = proxy_b if proxy_b is not None else await ApiProxy(control_plane).start()
    mine = ([a] if proxy_a is None else []) + ([b] if proxy_b is None else [])
    started: list[SchedulerProcess] = []
    pair = LeaderPair(
        cluster,
        f"gpuq-{cluster.test_id}",
        lease,
        election,
        a,
        b,
        fixtures.scheduler_starter(a.kubeconfig(tmp_path / "a.kubeconfig"), tmp_path, started),
        fixtures.scheduler_starter(b.kubeconfig(tmp_path / "b.kubeconfig"), tmp_path, started),
        BoundRecount(cluster),
        started,
    )
    poller = asyncio.create_task(pair.recount.run())
    try:
        yield pair
    finally:
        poller.cancel()
        for process in started:
            process.terminate()
        for proxy in mine:
            await proxy.stop()
