"""One run of the differential test: a fresh control plane (etcd, kube-apiserver, the CRDs and
kube-controller-manager's PV binder), the workload created, one scheduler started, the three phases
(base pods; gates removed; preemptors) each run until the cluster settles, then the pods' watch
history and the final objects handed to the checker.

``kube-scheduler`` is the v1.36 binary the harness built, one profile named after the workload's
scheduler, client qps/burst 5000 (as the project's benches run it); ``gpuq`` is ``gpuq scheduler``
with its default configuration. The test plays the disruption controller (no kubelet makes a pod
Ready, so the real one would allow no disruption): it writes each PodDisruptionBudget's status.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from tests.e2e.controlplane.harness import ControlPlane, free_ports, kube_scheduler_config
from tests.e2e.differential.api import Api, path_of
from tests.e2e.differential.checker import Cluster, Violation, check
from tests.e2e.differential.workload import SCHEDULER, Workload

Obj = dict[str, Any]
KUBE_SCHEDULER: Final = "kube-scheduler"
GPUQ: Final = "gpuq"
SCHEDULERS: Final = (KUBE_SCHEDULER, GPUQ)
REPO_ROOT: Final = Path(__file__).resolve().parents[3]
DELETED: Final = "(deleted: a preemption victim)"  # the workload deletes no pod itself


@dataclass
class Options:
    quiet: float = 6.0  # seconds without a pod event (and every pending pod answered) = settled
    settle_timeout: float = 240.0
    progress: Callable[[str], None] = lambda line: None


@dataclass
class RunResult:
    scheduler: str
    history: list[tuple[str, Obj]] = field(repr=False)
    pods: dict[str, Obj] = field(repr=False)  # namespace/name -> the final pod
    cluster: Cluster = field(repr=False)
    violations: list[Violation] = field(repr=False)
    binds: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # phase -> wall seconds to settle
    log: str = field(default="", repr=False)

    @property
    def bound(self) -> set[str]:
        return {k for k, p in self.pods.items() if (p.get("spec") or {}).get("nodeName")}

    def reason(self, pod_key: str) -> str:
        """The pod's PodScheduled=False message (what the scheduler said), or why there is none."""
        pod = self.pods.get(pod_key)
        if pod is None:
            return DELETED
        for condition in (pod.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled":
                return str(condition.get("message") or condition.get("reason") or "")
        return "(no PodScheduled condition)"


def scheduler_argv(scheduler: str, plane: ControlPlane, workdir: Path) -> list[str]:
    if scheduler == KUBE_SCHEDULER:
        path = workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(kube_scheduler_config(plane.kubeconfig, SCHEDULER, qps=5000)))
        return [str(plane.binaries.kube_scheduler), f"--config={path}", "--secure-port=0", "-v=2"]
    (port,) = free_ports(1)
    return [
        *(sys.executable, "-m", "gpuq_k8s.cli", "scheduler", "--kubeconfig", str(plane.kubeconfig)),
        *("--scheduler-name", SCHEDULER, "--metrics-port", str(port), "--bind-address", "127.0.0.1"),
        *("--flush-interval", "0.2"),
    ]


class Recorder:
    """The pods' watch history, from before the first pod exists (this test's own client)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.history: list[tuple[str, Obj]] = []
        self.last_event = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        existing, version = await self.api.list("Pod")
        assert not existing, f"pods exist before the run: {[p['metadata']['name'] for p in existing][:5]}"
        self._task = asyncio.create_task(self._watch(version))

    async def _watch(self, version: str) -> None:
        async for kind, obj in self.api.watch("Pod", version):
            self.history.append((kind, obj))
            self.last_event = time.monotonic()

    async def stop(self) -> None:
        """Stop watching; a watch that failed on its own fails the run (its history has a hole)."""
        if self._task is None:
            return
        if self._task.done():
            self._task.result()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def _settle(
    api: Api, recorder: Recorder, process: subprocess.Popen[bytes], options: Options, what: str
) -> float:
    """Wait until no pod event for ``options.quiet`` seconds and every pending, ungated pod carries the
    scheduler's answer (PodScheduled=False); returns the seconds taken."""
    began = time.monotonic()
    deadline = began + options.settle_timeout
    while True:
        await asyncio.sleep(1.0)
        if process.poll() is not None:
            raise RuntimeError(f"the scheduler exited ({process.returncode}) during {what}")
        pods, _ = await api.list("Pod")
        unanswered = [
            p["metadata"]["name"]
            for p in pods
            if not p["spec"].get("nodeName")
            and not p["spec"].get("schedulingGates")
            and not any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in (p.get("status") or {}).get("conditions") or ()
            )
        ]
        terminating = [p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")]
        quiet = time.monotonic() - recorder.last_event >= options.quiet
        if quiet and not unanswered and not terminating:
            return time.monotonic() - began
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{what} did not settle in {options.settle_timeout:.0f}s: unanswered {unanswered[:10]}"
            )


async def _nodes(api: Api, workload: Workload) -> None:
    async def one(node: Obj) -> None:
        name = node["metadata"]["name"]
        await api.create(node)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node"}
        ready |= {"lastHeartbeatTime": now, "lastTransitionTime": now}
        status = {**workload.node_status[name], "conditions": [ready]}
        await api.patch(f"/api/v1/nodes/{name}/status", {"status": status})
        # TaintNodesByCondition adds node.kubernetes.io/not-ready at creation; no lifecycle controller
        # takes it off: the node's own taints replace it.
        await api.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": node["spec"].get("taints") or None}})

    await asyncio.gather(*(one(n) for n in workload.nodes))


async def _prepare(api: Api, workload: Workload) -> None:
    for obj in workload.cluster_objects:
        if obj["kind"] == "Namespace":
            await api.create(obj)
            name = obj["metadata"]["name"]
            await api.create({"kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}})
    await asyncio.gather(*(api.create(o) for o in workload.cluster_objects if o["kind"] != "Namespace"))
    await _nodes(api, workload)
    await asyncio.gather(*(api.create(o) for o in workload.namespaced_objects))
    for obj in workload.namespaced_objects:
        if obj["kind"] == "PodDisruptionBudget":
            await api.patch(f"{path_of(obj)}/status", {"status": workload.budget_status})
    # The pre-bound Immediate claims are Bound (kube-controller-manager's PV binder) before any pod.
    wanted = {
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in workload.namespaced_objects
        if o["kind"] == "PersistentVolumeClaim" and o["spec"].get("volumeName")
    }
    deadline = time.monotonic() + 90
    while True:
        claims, _ = await api.list("PersistentVolumeClaim")
        bound = {
            (c["metadata"]["namespace"], c["metadata"]["name"])
            for c in claims
            if (c.get("status") or {}).get("phase") == "Bound"
        }
        if wanted <= bound:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pre-bound claims not Bound by the PV binder: {sorted(wanted - bound)[:5]}")
        await asyncio.sleep(0.5)


async def _final(api: Api) -> tuple[dict[str, Obj], Cluster]:
    async def items(kind: str) -> list[Obj]:
        return (await api.list(kind))[0]

    pods, nodes, namespaces, pvcs, pvs, csinodes, claims = await asyncio.gather(
        items("Pod"),
        items("Node"),
        items("Namespace"),
        items("PersistentVolumeClaim"),
        items("PersistentVolume"),
        items("CSINode"),
        items("ResourceClaim"),
    )
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
    return by_key, Cluster(nodes, namespaces, pvcs, pvs, csinodes, claims)


async def run(workload: Workload, scheduler: str, workdir: Path, options: Options | None = None) -> RunResult:
    """The workload through ``scheduler`` on a fresh control plane kept in ``workdir``."""
    options = options or Options()
    say = options.progress
    workdir.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(workdir=workdir / "plane")
    plane.start()
    process: subprocess.Popen[bytes] | None = None
    log_path = workdir / f"{scheduler}.log"
    try:
        plane.apply_crds()
        plane.start_controller_manager(("persistentvolume-binder",))
        async with Api(plane.kubeconfig) as api:
            began = time.monotonic()
            await _prepare(api, workload)
            recorder = Recorder(api)
            await recorder.start()
            await asyncio.gather(*(api.create(p) for p in workload.pods))
            took = time.monotonic() - began
            say(f"{scheduler}: cluster and {len(workload.pods)} pods created in {took:.0f}s")
            with log_path.open("wb") as output:
                process = subprocess.Popen(
                    scheduler_argv(scheduler, plane, workdir),
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    cwd=REPO_ROOT,
                )
            seconds = {"base": await _settle(api, recorder, process, options, "the base pods")}
            say(f"{scheduler}: base pods settled in {seconds['base']:.0f}s")
            for namespace, name in workload.ungate:
                await api.patch(
                    f"/api/v1/namespaces/{namespace}/pods/{name}", {"spec": {"schedulingGates": None}}
                )
            seconds["ungated"] = await _settle(api, recorder, process, options, "the ungated pods")
            say(f"{scheduler}: {len(workload.ungate)} gates removed, settled in {seconds['ungated']:.0f}s")
            await asyncio.gather(*(api.create(p) for p in workload.preemptors))
            seconds["preemptors"] = await _settle(api, recorder, process, options, "the preemptors")
            say(f"{scheduler}: {len(workload.preemptors)} preemptors settled in {seconds['preemptors']:.0f}s")
            process.terminate()
            process.wait(30)
            pods, cluster = await _final(api)
            await recorder.stop()
        with (workdir / "history.jsonl").open("w") as kept:  # for a look at a failure
            for kind, obj in recorder.history:
                kept.write(json.dumps({"type": kind, "object": obj}) + "\n")
        violations, binds = check(cluster, recorder.history)
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        return RunResult(scheduler, recorder.history, pods, cluster, violations, binds, seconds, log)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        plane.stop()
