"""The chaos soak (issue 11): pod creates and deletes across the five quota kinds of
:mod:`tests.e2e.chaos.workload`, with a seeded random schedule of faults, on a control plane of its own
(etcd + kube-apiserver of the e2e harness) and two ``gpuq scheduler`` replicas with leader election.

Faults (:data:`FAULTS`):

- ``kill``: SIGKILL of a replica (the leader three times in four), started again at once;
- ``watch-stall``: the replicas' watches held silent by :class:`~tests.e2e.chaos.proxy.StallProxy`
  for 5-15 s while the steps go on (binds still pass);
- ``apiserver-restart``: kube-apiserver restarted on the same etcd (its watches drained, as in a
  production shutdown); before the replicas reach it again (the proxy holds their new connections),
  etcd moves on and is compacted, so their watches, resumed from before, are answered 410 Gone;
- ``leader-switch``: SIGTERM of the leader (it releases the Lease, the standby takes over), restarted;
- ``node-add`` / ``node-remove``: a fake Node (Ready, the not-ready taint cleared) added, or one
  deleted with its pods still bound; as the pod garbage collector would, those pods are deleted
  :data:`GC_DELAY` seconds later (the steps go on meanwhile: the orphans still count).

After every step the checker reads the API (pods, nodes) and checks invariants 1 and 4 of
:mod:`tests.e2e.chaos.invariants`; every ``settle_every`` operations and at the end the faults are
healed and invariants 3 and 2 are checked: every pod that fits is bound within ``settle_timeout``,
then every quota status equals the recount within one flush interval (plus :data:`STATUS_SLACK`
for the write and this poll on a loaded machine).
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.status import MERGE_PATCH
from gpuq_k8s.scheduler.kube.feed import REPLAY_ORDER
from tests.e2e.chaos import invariants as inv
from tests.e2e.chaos import workload as w
from tests.e2e.chaos.api import Api
from tests.e2e.chaos.proxy import StallProxy
from tests.e2e.chaos.replicas import LEASE_NAMESPACE, Replicas
from tests.e2e.controlplane.harness import ControlPlane

FAULTS: Final = ("kill", "watch-stall", "apiserver-restart", "leader-switch", "node-add", "node-remove")
GRACEFUL: Final = ("--shutdown-watch-termination-grace-period=5s",)
GC_DELAY: Final = 5.0  # seconds from a node's deletion to its pods' (the pod GC's quarantine, shortened)
STATUS_SLACK: Final = 5.0
MAX_LIVE_PODS: Final = 40
MIN_LIVE_PODS: Final = 8
QUOTA_PATHS: Final = {
    f"Queue/{w.CARD_QUEUE}": f"/apis/scheduling.volcano.sh/v1beta1/queues/{w.CARD_QUEUE}",
    f"Queue/{w.CAP_QUEUE}": f"/apis/scheduling.volcano.sh/v1beta1/queues/{w.CAP_QUEUE}",
    f"ElasticQuota/{w.NAMESPACES['eq']}/{w.EQ_NAME}": (
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{w.NAMESPACES['eq']}/elasticquotas/{w.EQ_NAME}"
    ),
    f"GPUResourceQuota/{w.NAMESPACES['gq']}/{w.GQ_NAME}": (
        f"/apis/tensor-fusion.ai/v1/namespaces/{w.NAMESPACES['gq']}/gpuresourcequotas/{w.GQ_NAME}"
    ),
}
RELIST_LINE: Final = "expired, re-listing"  # common/kube/informer.py, on 410 Gone
ATTEMPT_FAILED: Final = "scheduling attempt failed"  # scheduler/kube/loop.py, an attempt that raised


@dataclass(frozen=True)
class Options:
    seed: int = 1
    operations: int = 2000  # pod creates + deletes
    fault_every: int = 40  # operations between faults, on average
    settle_every: int = 250
    settle_timeout: float = 120.0
    flush_interval: float = 0.5
    progress: Callable[[str], None] = lambda line: None


@dataclass
class Figures:
    faults: Counter[str] = field(default_factory=Counter)
    created: int = 0
    deleted: int = 0
    gc_deleted: int = 0
    step_checks: int = 0
    settle_checks: int = 0
    violations: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    max_status_lag: float = 0.0
    max_settle_seconds: float = 0.0
    bound_seen: int = 0
    held_chunks: int = 0
    relists_after_gone: int = 0
    replica_exits: Counter[int] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        faults = ", ".join(f"{kind} {self.faults[kind]}" for kind in FAULTS)
        exits = ", ".join(f"{code}: {n}" for code, n in sorted(self.replica_exits.items()))
        return [
            f"faults injected: {sum(self.faults.values())} ({faults})",
            f"pods: {self.created} created, {self.deleted} deleted ({self.gc_deleted} of them by the "
            f"pod-GC stand-in), {self.created + self.deleted} operations, {self.bound_seen} seen bound",
            f"checks: {self.step_checks} after steps (limits, double binds), {self.settle_checks} "
            "settle checks (every schedulable pod bound, status = recount)",
            f"violations: {len(self.violations)}",
            f"slowest settle {self.max_settle_seconds:.1f}s, slowest status convergence after it "
            f"{self.max_status_lag:.1f}s",
            f"watch chunks held by stalls: {self.held_chunks}; re-lists after 410 Gone: "
            f"{self.relists_after_gone}; replica exits by code: {exits or 'none'}",
            f"wall time: {self.wall_seconds:.0f}s",
        ]


class Soak:
    def __init__(self, options: Options, workdir: Path | None = None) -> None:
        self.o = options
        self.rng = random.Random(options.seed)
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gpuq-chaos-"))
        self.f = Figures()
        self.ledger = inv.BindLedger()
        self.live: dict[str, tuple[str, str]] = {}  # pod key -> (namespace, name)
        self.deleted_names: list[tuple[str, str]] = []
        self.extra_nodes: list[str] = []
        self.nodes: dict[str, bool] = {}  # name -> GPU node
        self.gc_due: list[tuple[float, str]] = []  # (when, removed node)
        self.bound: set[str] = set()  # pod keys bound at the last check
        self.overspent: set[str] = set()  # "quota: resource" over its limit at the last check
        self.serial = 0
        self.step = 0

    # -- the run ----------------------------------------------------------------------------------
    async def run(self) -> Figures:
        began = time.monotonic()
        # Watches drained (ended cleanly) when the apiserver stops, as in a production shutdown: the
        # informers then resume them from their resourceVersion, which the compaction made 410 Gone.
        plane = ControlPlane(workdir=self.workdir / "plane", keep_workdir=True, apiserver_args=GRACEFUL)
        await asyncio.to_thread(plane.start)
        proxy: StallProxy | None = None
        replicas: Replicas | None = None
        self.api = Api(await new_api_client(str(plane.kubeconfig)))
        try:
            await asyncio.to_thread(plane.apply_crds)
            self.plane = plane
            await self._setup()
            proxy = self.proxy = StallProxy(plane.apiserver_port)
            port = await proxy.start()
            kubeconfig = self.workdir / "proxied-kubeconfig"
            kubeconfig.write_text(
                plane.kubeconfig.read_text().replace(plane.server, f"https://127.0.0.1:{port}")
            )
            replicas = self.replicas = Replicas(kubeconfig, self.workdir, self.o.flush_interval)
            replicas.start_all()
            await self._steps()
            await self._settle("final")
            self.f.violations += await replicas.stop_all()
        finally:
            if replicas is not None:
                await replicas.stop_all()  # after a failure; a no-op after the clean stop above
                self.f.replica_exits = replicas.exits
                self.f.relists_after_gone = replicas.log_count(RELIST_LINE)
                attempts_failed = replicas.log_count(ATTEMPT_FAILED)
                if attempts_failed:
                    self.f.violations.append(f"{attempts_failed} scheduling attempt(s) raised (see the logs)")
            if proxy is not None:
                self.f.held_chunks = proxy.held_chunks
                await proxy.stop()
            await self.api.client.close()
            await asyncio.to_thread(plane.stop)
        self.f.wall_seconds = time.monotonic() - began
        return self.f

    async def _setup(self) -> None:
        for ns in (*w.NAMESPACES.values(), LEASE_NAMESPACE):
            await self.api.write("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
            await self.api.write(
                "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "default"}}
            )
        for path, obj in w.quota_objects():
            await self.api.write("POST", path, obj)
        for gpu in (True, True, False, False):
            await self._add_node(gpu)

    def _fault_plan(self) -> dict[int, str]:
        """Operation index -> fault: every kind at least once, at seeded random points."""
        count = max(len(FAULTS), self.o.operations // self.o.fault_every)
        kinds = list(FAULTS)
        self.rng.shuffle(kinds)
        kinds += self.rng.choices(FAULTS, k=count - len(FAULTS))
        points = sorted(self.rng.sample(range(5, max(self.o.operations - 5, count + 6)), count))
        return dict(zip(points, kinds, strict=True))

    async def _steps(self) -> None:
        plan = self._fault_plan()
        operations = 0
        while operations < self.o.operations:
            self.step += 1
            self.f.violations += self.replicas.revive()
            fault = plan.pop(operations, None)
            if fault is not None:
                await self._fault(fault)
            else:
                await self._operation()
                operations += 1
                if operations % self.o.settle_every == 0 and operations < self.o.operations:
                    await self._settle(f"after {operations} operations")
            await self._collect_garbage()
            await self._check_step()
            if self.step % 100 == 0:
                self.o.progress(
                    f"step {self.step}: {operations} operations, {len(self.live)} live pods, "
                    f"{sum(self.f.faults.values())} faults, {len(self.f.violations)} violations"
                )

    # -- operations -------------------------------------------------------------------------------
    async def _operation(self) -> None:
        live = len(self.live)
        create = live < MIN_LIVE_PODS or (live < MAX_LIVE_PODS and self.rng.random() < 0.55)
        if create:
            await self._create()
        else:
            bound = sorted(self.bound & set(self.live))
            # Mostly bound pods: their room and quota go to the pending ones.
            pool = bound if bound and self.rng.random() < 0.6 else sorted(self.live)
            await self._delete(self.rng.choice(pool))

    async def _create(self) -> None:
        if self.deleted_names and self.rng.random() < 0.15:  # a name used before: a new pod
            ns, name = self.deleted_names.pop(self.rng.randrange(len(self.deleted_names)))
            kind = next(c for c in w.POD_CLASSES if c.namespace == ns)
        else:
            kind = self.rng.choice(w.POD_CLASSES)
            self.serial += 1
            name = f"{kind.name}-{self.serial}"
        body = kind.body(name, self.rng)
        reply = await self.api.write("POST", f"/api/v1/namespaces/{kind.namespace}/pods", body)
        key = f"{kind.namespace}/{name}"
        self.live[key] = (kind.namespace, name)
        self.f.created += 1
        problem = self.ledger.created(key, str(reply.body["metadata"]["uid"]))
        if problem:
            self.f.violations.append(problem)

    async def _delete(self, key: str, by_gc: bool = False) -> None:
        ns, name = self.live.pop(key)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        await self.api.write("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", body, ok=(404,))
        self.deleted_names.append((ns, name))
        self.f.deleted += 1
        self.f.gc_deleted += by_gc

    async def _collect_garbage(self) -> None:
        """The pod garbage collector's part: pods bound to a deleted node are deleted later."""
        now = time.monotonic()
        due = [node for when, node in self.gc_due if when <= now]
        if not due:
            return
        self.gc_due = [(step, node) for step, node in self.gc_due if node not in due]
        pods, _ = await self._snapshot()
        for pod in pods:
            if pod.node in due and pod.key in self.live:
                await self._delete(pod.key, by_gc=True)

    # -- faults -----------------------------------------------------------------------------------
    async def _fault(self, kind: str) -> None:
        self.o.progress(f"step {self.step}: fault {kind}")
        if kind == "kill":
            leader = await self.replicas.leader(self.api.client)
            slot = leader if leader and self.rng.random() < 0.75 else self.rng.choice(("a", "b"))
            await self.replicas.kill(slot)
        elif kind == "watch-stall":
            self.proxy.stall(self.rng.uniform(5.0, 15.0))
        elif kind == "apiserver-restart":
            await self._restart_apiserver()
        elif kind == "leader-switch":
            leader = await self.api.wait_for(lambda: self.replicas.leader(self.api.client), 30.0)
            await self.replicas.stop(leader or self.rng.choice(("a", "b")))
        elif kind == "node-add" or len(self._removable()) == 0:
            await self._add_node(self.rng.random() < 0.5)
            kind = "node-add"
        else:
            name = self.rng.choice(self._removable())
            await self.api.write("DELETE", f"/api/v1/nodes/{name}", ok=(404,))
            del self.nodes[name]
            self.gc_due.append((time.monotonic() + GC_DELAY, name))
        self.f.faults[kind] += 1

    async def _restart_apiserver(self) -> None:
        """Restart kube-apiserver (it drains the watches), and before the replicas get back to it,
        move etcd on and compact it: their watches, resumed from before, are answered 410 Gone."""
        self.proxy.close_gate()
        try:
            await asyncio.to_thread(self.plane.restart_apiserver)
            path = f"/api/v1/namespaces/{LEASE_NAMESPACE}/configmaps"
            for _ in range(3):
                await self.api.write("POST", path, {"metadata": {"name": "chaos-moved-on"}})
                await self.api.write("DELETE", f"{path}/chaos-moved-on")
            # Consistent lists of what the replicas watch: they wait (429) until the new apiserver's
            # watch caches are initialized and past those writes. A compaction while a cache is
            # still starting can leave it stuck behind etcd for minutes (seen with 1.36).
            for kind in REPLAY_ORDER:
                await self.api.read(f"{kind.path}?limit=1")
            await self.api.retrying(lambda: asyncio.to_thread(self.plane.compact_etcd))
        finally:
            self.proxy.open_gate()

    def _removable(self) -> list[str]:
        """Nodes whose removal leaves at least one GPU and one CPU node."""
        gpus = sum(self.nodes.values())
        cpus = len(self.nodes) - gpus
        return sorted(n for n, gpu in self.nodes.items() if (gpus if gpu else cpus) > 1)

    async def _add_node(self, gpu: bool) -> None:
        self.serial += 1
        name = f"{'gpu' if gpu else 'cpu'}-{self.serial}"
        obj, allocatable = w.node_object(name, gpu)
        await self.api.write("POST", "/api/v1/nodes", obj)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node"}
        ready |= {"lastHeartbeatTime": now, "lastTransitionTime": now}
        status = {"capacity": allocatable, "allocatable": allocatable, "conditions": [ready]}
        await self.api.write("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, MERGE_PATCH)
        # TaintNodesByCondition added node.kubernetes.io/not-ready at creation; no node lifecycle
        # controller runs here to take it off once the node is Ready.
        await self.api.write("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, MERGE_PATCH)
        self.nodes[name] = gpu

    # -- checks -----------------------------------------------------------------------------------
    async def _snapshot(self) -> tuple[list[inv.PodView], dict[str, inv.NodeView]]:
        pods = await self.api.read("/api/v1/pods")
        nodes = await self.api.read("/api/v1/nodes")
        ours = set(w.NAMESPACES.values())
        views = [inv.pod_view(p) for p in pods.get("items") or () if p["metadata"]["namespace"] in ours]
        node_views = {v.name: v for v in map(inv.node_view, nodes.get("items") or ())}
        return [v for v in views if v is not None], node_views

    async def _check_step(self) -> None:
        pods, nodes = await self._snapshot()
        over = inv.over_limits(inv.recount(pods, nodes))
        # An overspent quota stays so for several steps: one violation per episode, with its first figures.
        ongoing = {message.split(" recount ")[0]: message for message in over}
        new = [m for k, m in ongoing.items() if k not in self.overspent]
        found = self.ledger.observe(pods) + new
        self.overspent = set(ongoing)
        for quota in sorted({message.split(":")[0] for message in new}):
            await self._explain(quota, pods)
        self.f.step_checks += 1
        self.f.bound_seen = len(self.ledger.node_of)
        self.bound = {p.key for p in pods if p.node}
        self._violations(found)

    async def _explain(self, quota: str, pods: list[inv.PodView]) -> None:
        """Progress lines on an overspent quota: its bound pods, who bound each and when."""
        charged = [p for p in pods if p.node and quota in inv.charges(p)] if "/" in quota else []
        if quota.startswith("crossquota/"):
            charged = [p for p in pods if p.node == quota.split("/", 1)[1] and not p.uses_gpu]
        for namespace in sorted({p.namespace for p in charged}):
            events = await self.api.read(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
            by_uid: dict[str, list[str]] = {}
            for event in events.get("items") or ():
                if event.get("reason") == "Scheduled":
                    uid = str((event.get("regarding") or {}).get("uid"))
                    by_uid.setdefault(uid, []).append(
                        f"{event.get('reportingInstance')}@{event.get('eventTime')}"
                    )
            for pod in charged:
                if pod.namespace == namespace:
                    self.o.progress(f"  {quota}: {pod.key} on {pod.node}, Scheduled by {by_uid.get(pod.uid)}")

    def _violations(self, found: list[str]) -> None:
        for message in found:
            line = f"step {self.step}: {message}"
            self.o.progress(f"VIOLATION {line}")
            self.f.violations.append(line)

    async def _settle(self, when: str) -> None:
        """Heal every fault, then invariants 3 and 2."""
        self.o.progress(f"step {self.step}: settling ({when})")
        while self.proxy.stalled:  # a stall runs its course (at most 15 s)
            await asyncio.sleep(0.2)
        await self._collect_garbage_now()
        self.f.violations += self.replicas.revive()
        leader = await self.api.wait_for(lambda: self.replicas.leader(self.api.client), 60.0)
        if leader is None:
            self._violations([f"settle ({when}): no ready replica holds the Lease after 60s"])
        began = time.monotonic()

        async def nothing_stuck() -> tuple[list[inv.PodView], dict[str, inv.NodeView], list[str]]:
            pods, nodes = await self._snapshot()
            usage = inv.recount(pods, nodes)
            fits = {p.key: inv.placeable(p, usage, nodes) for p in pods if not p.node}
            return pods, nodes, [f"{key} fits on {node}" for key, node in sorted(fits.items()) if node]

        pods, nodes, stuck = await nothing_stuck()
        while stuck and time.monotonic() - began < self.o.settle_timeout:
            await asyncio.sleep(0.5)
            pods, nodes, stuck = await nothing_stuck()
        self.f.settle_checks += 1
        if stuck:
            self._violations([f"settle ({when}): schedulable pods not bound: {', '.join(stuck[:8])}"])
        settled = time.monotonic()
        self.f.max_settle_seconds = max(self.f.max_settle_seconds, settled - began)
        usage = inv.recount(pods, nodes)
        deadline = settled + self.o.flush_interval + STATUS_SLACK
        while True:
            objects = {quota: await self.api.read_or_none(path) for quota, path in QUOTA_PATHS.items()}
            mismatches = inv.status_mismatches(usage, objects)
            if not mismatches or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        self.f.settle_checks += 1
        self.f.max_status_lag = max(self.f.max_status_lag, time.monotonic() - settled)
        self._violations([f"settle ({when}): {m}" for m in mismatches])
        bound = sum(1 for p in pods if p.node)
        self.o.progress(
            f"settled in {settled - began:.1f}s: {bound} pods bound, {len(pods) - bound} pending that fit "
            f"nowhere; status converged in {time.monotonic() - settled:.1f}s"
        )

    async def _collect_garbage_now(self) -> None:
        self.gc_due = [(0.0, node) for _, node in self.gc_due]
        await self._collect_garbage()
