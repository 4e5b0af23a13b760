"""A day in the life (issue 28): a seeded simulated day of GPU work on a cluster whose pods live.

On a :class:`~tests.e2e.living.cluster.LivingCluster` of its own (kube-apiserver, etcd 3.6,
kube-controller-manager's controllers, kwok with :data:`~tests.e2e.day.load.NODES` nodes), two
``gpuq scheduler`` replicas with leader election reach the apiserver through the chaos soak's
:class:`~tests.e2e.chaos.proxy.StallProxy`. The tenants, quotas and workloads are
:mod:`tests.e2e.day.load`'s: training Jobs (gangs and single pods), inference Deployments scaled
with the daylight, notebooks whose sessions end with a 30 s grace period, ETL Jobs of CPU pods on
the GPU nodes; they arrive in bursts, at the seeded times of the day's activity curve.

Each step (about a second) creates what arrives, scales the Deployments, ends notebook sessions,
injects the faults due (the chaos soak's kinds that matter here: ``kill``, a SIGKILL of a replica,
the leader three times in four; ``leader-switch``, a SIGTERM of the leader; ``watch-stall``, the
replicas' watches held silent 5-15 s), then reads the API and runs :class:`~tests.e2e.day.checks.Checker`
(every invariant) and samples the figures: GPUs allocated over the cluster's, pods waiting per
queue, each pod's wait from its creation to its bind (the PodScheduled condition's time), the pods
preempted, the Jobs completed. At the end of the day nothing new arrives; the run settles (every
job that fits is placed, within :data:`SETTLE_TIMEOUT`) and stops the replicas.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.status import MERGE_PATCH
from tests.e2e.chaos.api import Api
from tests.e2e.chaos.proxy import StallProxy
from tests.e2e.chaos.replicas import Replicas
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.day import checks as ck
from tests.e2e.day import load as ld
from tests.e2e.living.cluster import LivingCluster, add_node, wait_ready

FAULTS: Final = ("kill", "leader-switch", "watch-stall")
STEP: Final = 1.0  # default seconds between steps (a step takes what it takes on a loaded machine)
SETTLE_TIMEOUT: Final = 180.0
# Steps between two comparisons of the leader's state with its caches (SIGUSR2: its cache debugger).
CACHE_CHECK_EVERY: Final = 120
SERVICES: Final = 10
# kube-scheduler's leader election defaults (duration, renew deadline, retry period): the chaos
# soak's 5 s Lease is lost over and over on a loaded 2-core machine, and every loss between the binds
# of a gang leaves it partly placed.
LEASE: Final = ("15", "10", "2")
# Parked pods are retried this often without an event (the day's --max-unschedulable-seconds).
MAX_UNSCHEDULABLE: Final = "30"


@dataclass(frozen=True)
class Options:
    seed: int = 1
    jobs: int = 2200  # jobs arriving over the day (training, ETL, notebook sessions)
    minutes: float = 30.0  # real minutes the simulated day takes
    nodes: int = 120
    fault_every: float = 40.0  # real seconds between faults, on average
    shortest: float = 4.0  # real seconds: the shortest job or session (kwok and the scheduler need some)
    step: float = STEP  # real seconds between steps (each reads the API and checks every invariant)
    flush_interval: float = 0.5
    progress: Callable[[str], None] = lambda line: None


@dataclass
class Figures:
    """What the run measured; :meth:`data` is what the page and the JSON are drawn from."""

    seed: int = 0
    nodes: int = 0
    gpus: int = 0
    submitted: Counter[str] = field(default_factory=Counter)
    completed: Counter[str] = field(default_factory=Counter)
    waits: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    preempted: set[str] = field(default_factory=set)
    faults: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    cache_checks: int = 0  # the leader's state compared with its caches (scheduler/cache_debugger.py)
    violations: list[str] = field(default_factory=list)
    hours: list[float] = field(default_factory=list)
    utilisation: list[float] = field(default_factory=list)
    depth: defaultdict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    scale_changes: int = 0
    leader_changes: int = 0
    gangs_repaired: int = 0  # gangs left partly placed by a fault, completed in time
    longest_repair: float = 0.0
    wall_seconds: float = 0.0
    settle_seconds: float = 0.0

    def percentile(self, queue: str, q: float) -> float:
        values = sorted(self.waits[queue])
        if not values:
            return 0.0
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]

    def data(self) -> dict[str, Any]:
        queues = sorted(set(self.waits) | set(self.depth))
        return {
            "seed": self.seed,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "jobsSubmitted": dict(sorted(self.submitted.items())),
            "jobsCompleted": dict(sorted(self.completed.items())),
            "jobsCompletedTotal": sum(self.completed.values()),
            "waits": {
                q: {
                    "pods": len(self.waits[q]),
                    "p50": self.percentile(q, 0.50),
                    "p99": self.percentile(q, 0.99),
                }
                for q in queues
            },
            "gpuUtilisation": {
                "mean": statistics.fmean(self.utilisation) if self.utilisation else 0.0,
                "peak": max(self.utilisation, default=0.0),
            },
            "preemptions": len(self.preempted),
            "faults": {kind: self.faults[kind] for kind in FAULTS},
            "checks": self.checks,
            "cacheChecks": self.cache_checks,
            "violations": list(self.violations),
            "scaleChanges": self.scale_changes,
            "leaderChanges": self.leader_changes,
            "gangsRepaired": {"count": self.gangs_repaired, "longestSeconds": round(self.longest_repair, 1)},
            "wallSeconds": round(self.wall_seconds, 1),
            "settleSeconds": round(self.settle_seconds, 1),
            "series": {
                "hour": [round(h, 3) for h in self.hours],
                "utilisation": [round(u, 4) for u in self.utilisation],
                "depth": {q: list(v) for q, v in sorted(self.depth.items())},
            },
        }

    def lines(self) -> list[str]:
        d = self.data()
        waits = "; ".join(
            f"{q} p50 {w['p50']:.0f}s p99 {w['p99']:.0f}s ({w['pods']} pods)" for q, w in d["waits"].items()
        )
        faults = ", ".join(f"{k} {v}" for k, v in d["faults"].items())
        done, submitted = d["jobsCompleted"], dict(self.submitted)
        return [
            f"seed {self.seed}: {self.nodes} nodes, {self.gpus} GPUs; wall time {self.wall_seconds:.0f}s",
            f"jobs completed: {d['jobsCompletedTotal']} {done} of {submitted} submitted",
            f"waits from creation to bind per queue: {waits}",
            f"GPU utilisation (allocated / total): mean {d['gpuUtilisation']['mean']:.1%}, peak "
            f"{d['gpuUtilisation']['peak']:.1%}",
            f"preemptions: {d['preemptions']}; faults: {faults}; leader changes: {self.leader_changes}; "
            f"Deployment scalings: {self.scale_changes}",
            f"gangs left partly placed by a fault and completed: {self.gangs_repaired} "
            f"(longest {self.longest_repair:.0f}s)",
            f"checks: {self.checks}; leader state compared with its caches: {self.cache_checks}; "
            f"violations: {len(self.violations)}; "
            f"settled in {self.settle_seconds:.0f}s",
        ]


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw (Knuth's method; the means here are small)."""
    limit, product, count = math.exp(-mean), rng.random(), 0
    while product > limit:
        count += 1
        product *= rng.random()
    return count


class Day:
    def __init__(self, options: Options, workdir: Path | None = None) -> None:
        self.o = options
        self.rng = random.Random(options.seed)
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gpuq-day-"))
        self.sizes = ld.Sizes(options.nodes)
        self.scale = ld.Scale(ld.DAY / (options.minutes * 60.0), options.shortest)
        self.f = Figures(seed=options.seed, nodes=options.nodes, gpus=self.sizes.gpus)
        self.checker = ck.Checker(ck.Limits.of(self.sizes))
        self.serial = 0
        self.sessions: dict[str, float] = {}  # notebook pod -> when its session ends (monotonic)
        self.replicas_wanted: dict[str, int] = {}
        self.waited: set[str] = set()  # pod uids whose wait is recorded
        self.jobs_done: set[str] = set()
        self.notebooks_ran: set[str] = set()
        self.holder = ""  # the Lease's holder at the last step

    # -- the run ----------------------------------------------------------------------------------
    async def run(self) -> Figures:
        began = time.monotonic()
        living = LivingCluster(ControlPlane(workdir=self.workdir / "plane", keep_workdir=True))
        await asyncio.to_thread(living.start)
        proxy: StallProxy | None = None
        replicas: Replicas | None = None
        self.api = Api(await new_api_client(str(living.plane.kubeconfig)))
        try:
            await self._setup()
            proxy = self.proxy = StallProxy(living.plane.apiserver_port)
            port = await proxy.start()
            kubeconfig = self.workdir / "proxied-kubeconfig"
            server = living.plane.server
            kubeconfig.write_text(
                living.plane.kubeconfig.read_text().replace(server, f"https://127.0.0.1:{port}")
            )
            replicas = self.replicas = Replicas(
                kubeconfig,
                self.workdir,
                self.o.flush_interval,
                config=ld.CONFIG,
                scheduler=ld.SCHEDULER,
                lease_namespace=ld.LEASE_NAMESPACE,
                extra_args=("--max-unschedulable-seconds", MAX_UNSCHEDULABLE),
                lease=LEASE,
            )
            replicas.start_all()
            await self._day()
            await self._settle()
            self.f.violations += await replicas.stop_all()
        finally:
            if replicas is not None:
                await replicas.stop_all()
                raised = replicas.log_count("scheduling attempt failed")
                if raised:
                    self.f.violations.append(f"{raised} scheduling attempt(s) raised (see the logs)")
            if proxy is not None:
                await proxy.stop()
            await self.api.client.close()
            await asyncio.to_thread(living.stop)
        self.f.wall_seconds = time.monotonic() - began
        return self.f

    async def _setup(self) -> None:
        for ns in (*ld.NAMESPACES, ld.LEASE_NAMESPACE):
            await self.api.write("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        for path, obj in ld.quota_objects(self.sizes):
            await self.api.write("POST", path, obj)
        nodes = ld.node_objects(self.sizes)
        for name, allocatable, labels in nodes:
            await add_node(self.api.client, name, allocatable, labels)
        await wait_ready(self.api.client, [name for name, _, _ in nodes], timeout=120)
        for ns in ld.NAMESPACES:  # the serviceaccount controller's default ServiceAccount
            path = f"/api/v1/namespaces/{ns}/serviceaccounts/default"
            await self.api.wait_for(lambda p=path: self.api.read_or_none(p), 60)  # type: ignore[misc]
        for index in range(SERVICES):
            wanted = ld.serving_replicas(0.0, 2 + index % 5, self.rng)
            self.replicas_wanted[f"svc-{index}"] = wanted
            body = ld.deployment(index, wanted, 1 + index % 2)
            await self.api.write("POST", f"/apis/apps/v1/namespaces/{ld.SERVE}/deployments", body)
        self.o.progress(f"set up: {len(nodes)} nodes, {self.sizes.gpus} GPUs, {SERVICES} services")

    def _fault_plan(self, seconds: float) -> list[tuple[float, str]]:
        """(seconds into the day, fault): every kind at least once, at seeded random times."""
        count = max(len(FAULTS), int(seconds / self.o.fault_every))
        kinds = list(FAULTS)
        self.rng.shuffle(kinds)
        kinds += self.rng.choices(FAULTS, k=count - len(FAULTS))
        times = sorted(self.rng.uniform(0.1 * seconds, 0.9 * seconds) for _ in range(count))
        return list(zip(times, kinds, strict=True))

    async def _day(self) -> None:
        length = self.o.minutes * 60.0
        plan = self._fault_plan(length)
        start = time.monotonic()
        last = start
        step = 0
        while (now := time.monotonic()) - start < length:
            elapsed = now - start
            hour = 24.0 * elapsed / length
            await self._arrivals(hour, (now - last) / length)
            last = now
            if step % 10 == 0:
                await self._scale_services(hour)
            await self._end_sessions(now)
            while plan and plan[0][0] <= elapsed:
                await self._fault(plan.pop(0)[1])
            self.f.violations += self.replicas.revive()
            await self._observe(hour)
            if step % CACHE_CHECK_EVERY == CACHE_CHECK_EVERY // 2:
                await self._check_cache(hour)
            step += 1
            if step % 60 == 0:
                d = self.f.data()
                self.o.progress(
                    f"hour {hour:4.1f}: {d['jobsCompletedTotal']} jobs completed, utilisation "
                    f"{self.f.utilisation[-1]:.0%}, {d['preemptions']} preemptions, "
                    f"{sum(self.f.faults.values())} faults, {len(self.f.violations)} violations"
                )
            await asyncio.sleep(max(0.0, self.o.step - (time.monotonic() - now)))

    # -- load ---------------------------------------------------------------------------------------
    async def _arrivals(self, hour: float, fraction: float) -> None:
        """What arrives in this step: ``fraction`` of the day's length, at the hour's activity."""
        for kind, share in ld.JOB_MIX.items():
            for _ in range(poisson(self.rng, self.o.jobs * share * fraction * ld.activity(hour))):
                self.serial += 1
                await self._submit(kind)

    async def _submit(self, kind: str) -> None:
        if kind == "training":
            job = ld.training_job(self.serial, self.rng, self.scale)
            for path, obj in job.objects():
                await self.api.write("POST", path, obj)
        elif kind == "etl":
            path, obj = ld.etl_job(self.serial, self.rng, self.scale)
            await self.api.write("POST", path, obj)
        else:
            pod = ld.notebook_pod(self.serial, self.rng)
            await self.api.write("POST", f"/api/v1/namespaces/{ld.NOTEBOOKS}/pods", pod)
            session = self.scale.seconds(self.rng.uniform(30, 180))
            self.sessions[pod["metadata"]["name"]] = time.monotonic() + session
        self.f.submitted[kind] += 1

    async def _scale_services(self, hour: float) -> None:
        for index in range(SERVICES):
            name = f"svc-{index}"
            wanted = ld.serving_replicas(hour, 2 + index % 5, self.rng)
            if wanted != self.replicas_wanted[name]:
                self.replicas_wanted[name] = wanted
                path = f"/apis/apps/v1/namespaces/{ld.SERVE}/deployments/{name}"
                await self.api.write("PATCH", path, {"spec": {"replicas": wanted}}, MERGE_PATCH)
                self.f.scale_changes += 1

    async def _end_sessions(self, now: float) -> None:
        """Notebook sessions that are over: deleted with their 30 s grace period (they hold their
        GPU and quota while they terminate)."""
        for name, ends in sorted(self.sessions.items()):
            if ends <= now:
                del self.sessions[name]
                path = f"/api/v1/namespaces/{ld.NOTEBOOKS}/pods/{name}"
                await self.api.write("DELETE", path, ok=(404,))
                if name in self.notebooks_ran:
                    self.f.completed["notebook"] += 1

    # -- faults -------------------------------------------------------------------------------------
    async def _fault(self, kind: str) -> None:
        self.o.progress(f"fault: {kind}")
        duration = 0.0
        if kind == "kill":
            leader = await self.replicas.leader(self.api.client)
            slot = leader if leader and self.rng.random() < 0.75 else self.rng.choice(("a", "b"))
            await self.replicas.kill(slot)
        elif kind == "leader-switch":
            leader = await self.api.wait_for(lambda: self.replicas.leader(self.api.client), 30.0)
            await self.replicas.stop(leader or self.rng.choice(("a", "b")))
        else:
            duration = self.rng.uniform(5.0, 15.0)
            self.proxy.stall(duration)
        self.f.faults[kind] += 1
        self.checker.fault(time.time(), duration)

    # -- observation --------------------------------------------------------------------------------
    async def _snapshot(self) -> tuple[list[ck.Pod], dict[str, ck.Node], dict[str, int]]:
        # One list of every pod: one resourceVersion, a consistent snapshot (lists per namespace,
        # read one after the other, mix moments: a pod finished in one, its room taken in the next).
        ours = set(ld.NAMESPACES)
        listing = await self.api.read("/api/v1/pods")
        pods = [ck.pod_of(p) for p in listing.get("items") or () if p["metadata"]["namespace"] in ours]
        nodes = {
            n.name: n for n in map(ck.node_of, (await self.api.read("/api/v1/nodes")).get("items") or ())
        }
        groups: dict[str, int] = {}
        for ns in (ld.TEAM_A, ld.TEAM_B):
            listing = await self.api.read(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups")
            for pg in listing.get("items") or ():
                groups[f"{ns}/{pg['metadata']['name']}"] = int((pg.get("spec") or {}).get("minMember") or 1)
        return pods, nodes, groups

    async def _check_cache(self, hour: float) -> None:
        """An invariant of its own: the leader's state is what its informers' caches say (its cache
        debugger, SIGUSR2, finds no mismatch). A mismatch is state lost or kept by the scheduler, the
        cause of a wait the other checks only see later, if at all."""
        slot = await self.replicas.leader(self.api.client)
        if slot is None:
            return
        lines = await self.replicas.cache_comparison(slot)
        if not lines:
            return
        self.f.cache_checks += 1
        mismatches = [
            line.removeprefix("cache mismatch: ") for line in lines if line.startswith("cache mismatch")
        ]
        if mismatches:
            identity = self.replicas.identities.get(slot, slot)
            line = f"hour {hour:.2f}: cache of {identity}: {len(mismatches)} mismatch(es): {mismatches[:5]}"
            self.o.progress(f"VIOLATION {line}")
            self.f.violations.append(line)

    async def _cache_comparison(self, key: str) -> None:
        """The leader's own view of a pod that waits though it fits: its cache debugger (SIGUSR2)
        compares its state with its informers' caches and dumps it; printed are the mismatches, the
        summary, and what the dump says of ``key`` (its queue pool, attempts, time parked, message)."""
        slot = await self.replicas.leader(self.api.client)
        if slot is None:
            self.o.progress("  (no ready leader to ask for its cache comparison)")
            return
        lines = await self.replicas.cache_comparison(slot)
        identity = self.replicas.identities.get(slot, slot)
        if not lines:
            self.o.progress(f"  {identity}: no cache comparison logged within 5 s")
            return
        mismatches = [line for line in lines if line.startswith("cache mismatch")]
        for line in mismatches[:30]:
            self.o.progress(f"  {identity}: {line}")
        if len(mismatches) > 30:
            self.o.progress(f"  {identity}: ... {len(mismatches) - 30} more mismatch(es)")
        waiting = [line for line in lines if line.startswith("cache dump: waiting in Permit")]
        for line in waiting[:10]:  # who holds room reserved and not bound
            self.o.progress(f"  {identity}: {line.removeprefix('cache dump: ')}")
        for line in lines:
            if line.startswith("cache comparison"):
                self.o.progress(f"  {identity}: {line}")
            elif line.startswith("cache dump: ") and key in line and not line.startswith("cache dump: node "):
                where, _, entries = line.partition(": ")[2].partition(": ")
                mine = [e for e in entries.split("; ") if key in e] or [entries]
                self.o.progress(f"  {identity}: {where}: {mine[0]}")

    async def _observe(self, hour: float) -> None:
        holder = await self.replicas.holder(self.api.client)
        if holder and holder != self.holder:
            if self.holder:
                self.f.leader_changes += 1
                self.checker.fault(time.time())  # a leader change, planned or not
            self.holder = holder
        pods, nodes, groups = await self._snapshot()
        found = self.checker.check(time.time(), pods, nodes, groups)
        self.f.checks += 1
        self.f.gangs_repaired, self.f.longest_repair = self.checker.repaired, self.checker.longest_repair
        for message in found:
            line = f"hour {hour:.2f}: {message}"
            self.o.progress(f"VIOLATION {line}")
            self.f.violations.append(line)
            if "fits now" in message:  # the scheduler's reason, and what the recount charged its queue
                unit = message.split(":")[0]
                for pod in pods:
                    if pod.key == unit or (pod.waiting and pod.group == unit):
                        self.o.progress(
                            f"  {pod.key}: {pod.unschedulable or '(no PodScheduled=False reason)'}"
                        )
                        held: Counter[str] = Counter()
                        for other in pods:
                            if other.holds and other.queue == pod.queue:
                                held[other.node[:8]] += int(other.gpus)
                        self.o.progress(
                            f"  Queue {pod.queue} GPUs held by the recount, per card: {dict(held)}"
                        )
                        await self._cache_comparison(pod.key)
                        break
            if message.startswith("Node/"):  # who holds it: the pods the recount charged there
                node = message.split(":")[0].removeprefix("Node/")
                for pod in sorted(
                    (p for p in pods if p.holds and p.node == node), key=lambda p: p.bound_at or 0
                ):
                    self.o.progress(
                        f"  on {node}: {pod.key} uid {pod.uid[:8]} phase {pod.phase} "
                        f"gpus {float(pod.gpus):g} "
                        f"deleting {pod.deleting} created {pod.created:.0f} bound {pod.bound_at or 0:.0f} "
                        f"preempted {pod.preempted}"
                    )
        allocated = sum(p.gpus for p in pods if p.holds)
        self.f.hours.append(hour)
        self.f.utilisation.append(float(allocated) / self.sizes.gpus)
        depth: Counter[str] = Counter(p.queue for p in pods if p.waiting)
        for queue in (ld.TRAINING, ld.INFERENCE, ld.INTERACTIVE, ld.NO_QUEUE):
            self.f.depth[queue].append(depth[queue])
        for pod in pods:
            if pod.preempted:
                self.f.preempted.add(pod.uid)
            if pod.node and pod.namespace == ld.NOTEBOOKS:
                self.notebooks_ran.add(pod.name)
            if pod.bound_at is not None and pod.uid not in self.waited and pod.created:
                self.waited.add(pod.uid)
                self.f.waits[pod.queue].append(max(0.0, pod.bound_at - pod.created))
        for ns, kind in ((ld.TEAM_A, "training"), (ld.TEAM_B, "training"), (ld.ETL, "etl")):
            listing = await self.api.read(f"/apis/batch/v1/namespaces/{ns}/jobs")
            for job in listing.get("items") or ():
                key = f"{ns}/{job['metadata']['name']}"
                status, spec = job.get("status") or {}, job.get("spec") or {}
                if key not in self.jobs_done and status.get("succeeded", 0) >= spec.get("completions", 1):
                    self.jobs_done.add(key)
                    self.f.completed[kind] += 1

    async def _settle(self) -> None:
        """The day is over: nothing new arrives, the faults are healed; every job that fits must be
        placed within SETTLE_TIMEOUT (and invariants keep being checked)."""
        self.o.progress("end of the day: settling")
        self.proxy.release()
        self.f.violations += self.replicas.revive()
        leader = await self.api.wait_for(lambda: self.replicas.leader(self.api.client), 60.0)
        if leader is None:
            self.f.violations.append("settle: no ready replica holds the Lease after 60s")
        began = time.monotonic()
        await self._check_cache(24.0)
        stuck: list[str] = []
        while time.monotonic() - began < SETTLE_TIMEOUT:
            await self._observe(24.0)
            pods, nodes, groups = await self._snapshot()
            stuck = self._fitting(pods, nodes, groups)
            if not stuck:
                break
            await asyncio.sleep(1.0)
        self.f.settle_seconds = time.monotonic() - began
        if stuck:
            self.f.violations.append(
                f"settle: jobs that fit not placed after {SETTLE_TIMEOUT:.0f}s: {stuck[:8]}"
            )

    def _fitting(self, pods: list[ck.Pod], nodes: dict[str, ck.Node], groups: dict[str, int]) -> list[str]:
        return self.checker.fitting_units(pods, nodes, groups)
