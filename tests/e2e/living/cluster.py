"""A cluster whose pods live: the e2e control plane plus the controllers of a real cluster and kwok.

:class:`LivingCluster` starts, on a control plane of its own (etcd + kube-apiserver of the harness,
the CRDs of deploy/crds applied):

- kube-controller-manager with the controllers Jobs, Deployments and Volcano-style workloads need
  (:data:`CONTROLLERS`: job, replicaset, deployment, garbage collector, resourceclaim, namespace,
  serviceaccount, ttl-after-finished, pod GC), at ``--kube-api-qps=1000 --kube-api-burst=1000``;
- kwok (built by build.sh) with the stages of ``stages.yaml``: nodes annotated
  ``kwok.x-k8s.io/node=fake`` turn Ready and heartbeat; pods bound to them run; a pod annotated
  ``gpuq.e2e/complete-after: "<duration>"`` succeeds that long after it started running
  (``gpuq.e2e/fail-after``: fails); a pod deleted with a grace period stays Terminating for it and
  is then removed.

What kwok does not do, :func:`add_node` does: a new Node gets the ``node.kubernetes.io/not-ready``
taint from the TaintNodesByCondition admission plugin, and only the node lifecycle controller (not
run: kwok's heartbeats are not a kubelet's leases) would take it off; :func:`add_node` clears it.
Extended resources (``nvidia.com/gpu``) must be requested with a limit equal to the request, as the
apiserver requires (:func:`gpu_pod`).

A control plane of its own, not the session's: the garbage collector and the namespace controller
would otherwise act on every other test's objects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from kubernetes_asyncio.client.api_client import ApiClient

from gpuq_k8s.common.kube.status import MERGE_PATCH, Reply, call
from tests.e2e.controlplane.harness import BUILD_COMMAND, ControlPlane, ControlPlaneError
from tests.testing.builders import MakeNode, MakePod

HERE = Path(__file__).resolve().parent
STAGES: Final = HERE / "stages.yaml"
KWOK_NODE: Final = ("kwok.x-k8s.io/node", "fake")
COMPLETE_AFTER: Final = "gpuq.e2e/complete-after"
FAIL_AFTER: Final = "gpuq.e2e/fail-after"
CONTROLLERS: Final = (
    "job-controller",
    "replicaset-controller",
    "deployment-controller",
    "garbage-collector-controller",
    "resourceclaim-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
)
CONTROLLER_ARGS: Final = (
    "--kube-api-qps=1000",
    "--kube-api-burst=1000",
    "--concurrent-job-syncs=20",
    "--concurrent-replicaset-syncs=20",
    "--concurrent-deployment-syncs=10",
    "--concurrent-gc-syncs=20",
)
NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"


class LivingCluster:
    """``with LivingCluster() as living: ...``: the control plane, its controllers and kwok."""

    def __init__(self, plane: ControlPlane | None = None) -> None:
        self.plane = plane if plane is not None else ControlPlane()

    def start(self) -> None:
        kwok = self.plane.binaries.kwok
        if not kwok.is_file():
            raise ControlPlaneError(f"kwok missing at {kwok}: build it with {BUILD_COMMAND}")
        plane = self.plane
        plane.start()
        try:
            plane.apply_crds()
            plane.start_controller_manager(CONTROLLERS, extra_args=CONTROLLER_ARGS)
            plane.start_process(
                "kwok",
                [str(kwok), f"--kubeconfig={plane.kubeconfig}", f"--config={STAGES}", "--cidr=10.0.0.0/16"],
                # Its one line before nodes appear (wait_ready then waits for the node stages).
                '"msg":"Watch nodes"',
                timeout=60.0,
            )
        except BaseException:
            plane.keep_workdir = True
            plane.stop()
            raise

    def stop(self) -> None:
        self.plane.stop()

    def __enter__(self) -> LivingCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


async def request(
    api: ApiClient, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> Reply:
    reply = await call(api, method, path, body, content_type=content_type)
    if not reply.ok:
        raise AssertionError(f"{method} {path}: {reply.status} {reply.message}")
    return reply


async def add_node(
    api: ApiClient,
    name: str,
    allocatable: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
) -> None:
    """A kwok node with ``allocatable`` (also its capacity), its not-ready taint cleared (see the
    module doc). kwok makes it Ready; :func:`wait_ready` waits for that."""
    node = MakeNode(name).labels(dict(labels or {})).annotations({KWOK_NODE[0]: KWOK_NODE[1]}).obj()
    node["status"] = {"allocatable": dict(allocatable), "capacity": dict(allocatable)}
    await request(api, "POST", "/api/v1/nodes", node)
    await request(api, "PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, MERGE_PATCH)


async def wait_ready(api: ApiClient, names: Sequence[str], timeout: float = 60.0) -> None:
    """Until every node of ``names`` is Ready (kwok's node-ready stage) and untainted."""
    deadline = time.monotonic() + timeout
    waiting = set(names)
    while waiting:
        listing = (await request(api, "GET", "/api/v1/nodes")).body
        for node in listing.get("items") or ():
            conditions = (node.get("status") or {}).get("conditions") or ()
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            if ready and not (node.get("spec") or {}).get("taints"):
                waiting.discard(node["metadata"]["name"])
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"nodes not Ready within {timeout}s: {sorted(waiting)}")
        await asyncio.sleep(0.2)


def gpu_pod(
    name: str,
    namespace: str,
    *,
    scheduler: str,
    gpus: int = 0,
    cpu: str = "100m",
    memory: str = "128Mi",
    gpu_resource: str = "nvidia.com/gpu",
    annotations: Mapping[str, str] | None = None,
    grace: int = 0,
    priority_class: str = "",
) -> dict[str, Any]:
    """A pod of gpuq's scheduler asking ``gpus`` cards (request = limit, as extended resources must)."""
    requests: dict[str, str | int | float] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str | int | float] = {}
    if gpus:
        requests[gpu_resource] = limits[gpu_resource] = str(gpus)
    pod = (
        MakePod(name, namespace)
        .image("registry.k8s.io/pause:3.10")
        .scheduler(scheduler)
        .req(requests)
        .lim(limits)
        .spec(automountServiceAccountToken=False, terminationGracePeriodSeconds=grace)
    )
    if priority_class:
        pod.spec(priorityClassName=priority_class)
    if annotations:
        pod.annotations(dict(annotations))
    made: dict[str, Any] = pod.obj()
    return made
