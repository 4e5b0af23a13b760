"""The scheduler's cold start in-process: informers, decoding and the feed, no apiserver.

    python tests/bench/bench_start.py [--nodes 5000] [--pods 50000] [--repeats 3] [--profile FILE]

What ``gpuq scheduler`` does between its first list request and its first decision (scheduler/
service.py): an informer per kind (the pod informer with its msgspec decoder, every kind listed by a
streaming list, WatchList), the feed's streamed start (``Feed.load``: bound pods counted page by page,
``Scheduler.add_bound_pods``), the default configuration's plugins, the service's per-change handler,
with the garbage collector off and the heap frozen as at a start (scheduler/kube/heap.py). A fake API
client answers each streaming list with the bytes kube-apiserver sends (one ADDED event a line, then the
initial-events-end bookmark): ``--nodes`` Ready nodes (half with 8 GPUs) and ``--pods`` bound pods as
the side-by-side bench creates them (tests/bench/bench_cluster.py), every field the apiserver adds
included (managedFields, default tolerations, status). The bytes are made before the clock starts.

Prints the start's wall and CPU time (min over ``--repeats``) and, for the pods alone, decoding and
feeding a pod; ``--profile FILE`` runs one start under cProfile and writes its stats. The apiserver's
own share (encoding, the network) is what ``tests/bench/bench_side_by_side.py --existing`` adds.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.kube.informer import INITIAL_EVENTS_END, Informer, InformerSet
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER, PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.kube import heap
from gpuq_k8s.scheduler.kube.feed import REPLAY_ORDER, Feed
from gpuq_k8s.scheduler.kube.pod_cache import PodDecoder
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.service import _transform

NAMESPACE = "bench"
SCHEDULER = "gpuq-bench"
TEST_LABEL = "gpuq.test/id"
TEST_ID = "t0000"
CREATED = "2026-11-27T01:00:00Z"


def managed_fields(fields: dict[str, Any]) -> list[dict[str, Any]]:
    """The one managedFields entry the apiserver records for the bench client's create of ``fields``."""
    return [
        {
            "manager": "python",
            "operation": "Update",
            "apiVersion": "v1",
            "time": CREATED,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
    ]


def node_json(i: int) -> dict[str, Any]:
    """A fake Ready node as kube-apiserver returns it (tests/e2e/cluster_fixtures.py ``Cluster.node``)."""
    name = f"{TEST_ID}-n{i:05d}"
    labels = {TEST_LABEL: TEST_ID}
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if i % 2:
        labels |= {"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/gpu.memory": "81920"}
        allocatable["nvidia.com/gpu"] = "8"
    fields: dict[str, Any] = {"f:metadata": {"f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}}}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0001-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": CREATED,
            "labels": labels,
            "managedFields": managed_fields(fields),
        },
        "spec": {},
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": CREATED,
                    "lastTransitionTime": CREATED,
                    "reason": "KubeletReady",
                    "message": "fake node",
                }
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeletVersion": "",
                "kubeProxyVersion": "",
                "operatingSystem": "",
                "architecture": "",
            },
        },
    }


def pod_json(i: int, nodes: int) -> dict[str, Any]:
    """A bound pod as kube-apiserver returns it after ``bench_cluster.populate``'s create (its
    defaults, managedFields and the status the apiserver sets; no kubelet runs)."""
    name = f"e{i:05d}"
    node = f"{TEST_ID}-n{i % nodes:05d}"
    resources = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    tolerations = [
        {
            "key": f"node.kubernetes.io/{taint}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
        for taint in ("not-ready", "unreachable")
    ]
    fields: dict[str, Any] = {
        "f:spec": {
            "f:automountServiceAccountToken": {},
            "f:containers": {
                'k:{"name":"main"}': {
                    ".": {},
                    "f:image": {},
                    "f:imagePullPolicy": {},
                    "f:name": {},
                    "f:resources": {".": {}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                    "f:terminationMessagePath": {},
                    "f:terminationMessagePolicy": {},
                }
            },
            "f:dnsPolicy": {},
            "f:enableServiceLinks": {},
            "f:nodeName": {},
            "f:nodeSelector": {},
            "f:restartPolicy": {},
            "f:schedulerName": {},
            "f:securityContext": {},
            "f:terminationGracePeriodSeconds": {},
        }
    }
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"00000000-0000-0000-0002-{i:012d}",
            "resourceVersion": str(100000 + i),
            "creationTimestamp": CREATED,
            "managedFields": managed_fields(fields),
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": resources,
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "dnsPolicy": "ClusterFirst",
            "nodeSelector": {TEST_LABEL: TEST_ID},
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "automountServiceAccountToken": False,
            "nodeName": node,
            "securityContext": {},
            "schedulerName": SCHEDULER,
            "tolerations": tolerations,
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def stream(objects: Sequence[dict[str, Any]], version: str) -> bytes:
    """A streaming list's bytes: one ADDED event a line, then the initial-events-end bookmark."""
    lines = [orjson.dumps({"type": "ADDED", "object": obj}) for obj in objects]
    bookmark = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": version, "annotations": {INITIAL_EVENTS_END: "true"}},
    }
    lines.append(orjson.dumps({"type": "BOOKMARK", "object": bookmark}))
    return b"\n".join(lines) + b"\n"


class _Content:
    """What the informer reads of a response body (``readany``): the streamed bytes in chunks of
    ``chunk`` bytes, each one event-loop step apart; a watch after the list hears nothing."""

    def __init__(self, body: bytes, chunk: int = 1 << 18) -> None:
        self._chunks = [body[i : i + chunk] for i in range(0, len(body), chunk)] if body else []
        self._forever = not body

    async def readany(self) -> bytes:
        if self._forever:
            await asyncio.Event().wait()
        if not self._chunks:
            return b""
        await asyncio.sleep(0)
        return self._chunks.pop(0)


class _Response:
    status = 200

    def __init__(self, body: bytes) -> None:
        self.content = _Content(body)

    def close(self) -> None:
        pass

    def release(self) -> None:
        pass


class FakeApi:
    """Answers each kind's streaming list with its bytes (an empty list for the kinds not given) and
    every later watch with silence."""

    def __init__(self, bodies: dict[str, bytes]) -> None:
        self.bodies = bodies

    async def call_api(self, path: str, method: str, *, query_params: list[tuple[str, str]], **_: Any) -> Any:
        params = dict(query_params)
        if params.get("sendInitialEvents") == "true":
            return _Response(self.bodies.get(path) or stream((), "1"))
        return _Response(b"")


def podgroup_json(name: str, members: int) -> dict[str, Any]:
    """A Volcano PodGroup found Running (its pods then move it to Pending and back as they are counted)."""
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "resourceVersion": "4"},
        "spec": {"minMember": members},
        "status": {"phase": "Running", "running": members},
    }


def bodies(nodes: int, pods: int, gang_size: int = 0) -> dict[str, bytes]:
    """The streamed lists: nodes, pods, and with ``gang_size`` a PodGroup for every so many pods."""
    made = [pod_json(i, nodes) for i in range(pods)]
    out = {kinds.NODE.path: stream([node_json(i) for i in range(nodes)], "2")}
    if gang_size:
        for i, pod in enumerate(made):
            pod["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": f"gang-{i // gang_size}"}
        groups = [
            podgroup_json(f"gang-{g}", min(gang_size, pods - g * gang_size))
            for g in range(-(-pods // gang_size))
        ]
        out[kinds.POD_GROUP.path] = stream(groups, "2")
    out[kinds.POD.path] = stream(made, "3")
    return out


def new_scheduler(backend: MemoryBackend) -> Scheduler:
    """The service's scheduler: the default configuration, every plugin."""
    return Scheduler(SchedulerConfig.default(), default_registry(), backend, clock=time.monotonic)


async def start(api: FakeApi) -> tuple[Scheduler, Feed, InformerSet]:
    """The service's start (scheduler/service.py ``Service.serve``) up to its first decision."""
    backend = MemoryBackend()
    scheduler = new_scheduler(backend)
    backend.objects = scheduler.objects
    feed = Feed(scheduler)
    changed = asyncio.Event()

    def handler(change: Change) -> None:  # the service's, KubeBackend.objects_changed included
        nonlocal changed
        feed.handler(change)
        changed, old = asyncio.Event(), changed
        old.set()

    informers = InformerSet(
        Informer(
            api,
            kind,
            handlers=[handler],
            transform=_transform(kind),
            decoder=PodDecoder() if kind is kinds.POD else None,
            watch_list=True,
            on_page=feed.page if kind is kinds.POD else None,
            deliver_first_list=False,
        )
        for kind in REPLAY_ORDER
    )
    with heap.loading():
        informers.start()
        await feed.load(informers)
    return scheduler, feed, informers


def pending_json(nodes: int) -> dict[str, Any]:
    """A pending pod as the side-by-side bench creates them (a GPU one: capacity-card and the GPU
    quota decide it too)."""
    pod = pod_json(0, nodes)
    pod["metadata"] |= {"name": "p00000", "uid": "00000000-0000-0000-0003-000000000000"}
    pod["spec"].pop("nodeName")
    pod["spec"]["schedulerName"] = GPUQ_SCHEDULER
    gpu = {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}
    pod["spec"]["containers"][0]["resources"] = {"requests": gpu, "limits": {"nvidia.com/gpu": "1"}}
    return pod


def first_decision(scheduler: Scheduler, feed: Feed, nodes: int) -> float:
    """Seconds from a pending pod's arrival to its placement, right after the start (the first
    cycle over the loaded cluster)."""
    pod = pending_json(nodes)
    began = time.perf_counter()
    feed.handler(Change("add", (NAMESPACE, pod["metadata"]["name"]), pod))
    scheduler.run_enqueue()
    attempt = scheduler.schedule_one()
    took = time.perf_counter() - began
    assert attempt is not None and attempt.node, attempt
    return took


def one(api: FakeApi, nodes: int, profile: str = "") -> tuple[float, float, int, float]:
    """One start: (wall seconds, CPU seconds, pods counted), then the first decision's seconds."""
    decision = 0.0

    async def run() -> int:
        nonlocal decision
        scheduler, feed, informers = await start(api)
        decision = first_decision(scheduler, feed, nodes)
        await informers.stop()
        return len(scheduler.cluster.pods)

    profiler = cProfile.Profile() if profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    counted = asyncio.run(run())
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    gc.unfreeze()
    gc.collect()
    return wall, cpu, counted, decision


def parts(api: FakeApi, pods: int) -> tuple[float, float, float]:
    """Decoding the pod stream (PodDecoder.event, the informer's transform), parsing each pod
    (PodInfo.from_dict) and feeding the bound pods by pages of 500 (Feed._feed_page, which parses them
    again) to a scheduler holding the nodes: seconds each."""
    decoder = PodDecoder()
    transform = _transform(kinds.POD)
    lines = api.bodies[kinds.POD.path].split(b"\n")[:pods]
    gc.disable()
    began = time.perf_counter()
    objs = []
    for line in lines:
        obj = decoder.event(line)["object"]
        obj.setdefault("kind", "Pod")
        obj.setdefault("apiVersion", "v1")
        objs.append(transform(obj) if transform is not None else obj)
    decoding = time.perf_counter() - began
    began = time.perf_counter()
    for obj in objs:
        PodInfo.from_dict(obj)
    parsing = time.perf_counter() - began
    scheduler = new_scheduler(MemoryBackend())
    feed = Feed(scheduler)
    for line in api.bodies[kinds.NODE.path].split(b"\n"):
        event = orjson.loads(line) if line else None
        if event is not None and event["type"] == "ADDED":
            node = event["object"]
            feed.apply(Change("add", ("", node["metadata"]["name"]), node))
    feed._others_in = True
    began = time.perf_counter()
    for at in range(0, len(objs), 500):
        feed.page(1, objs[at : at + 500])
    feeding = time.perf_counter() - began
    gc.enable()
    assert len(scheduler.cluster.pods) == pods, len(scheduler.cluster.pods)
    return decoding, parsing, feeding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gang-size", type=int, default=0, help="the pods in PodGroups of this many")
    parser.add_argument("--profile", metavar="FILE", default="", help="profile one start")
    args = parser.parse_args()
    began = time.perf_counter()
    api = FakeApi(bodies(args.nodes, args.pods, args.gang_size))
    size = sum(len(b) for b in api.bodies.values()) / 1e6
    made = time.perf_counter() - began
    print(f"{args.nodes} nodes, {args.pods} bound pods: {size:.0f} MB of JSON made in {made:.1f}s")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.profile:
        wall, cpu, counted, _ = one(api, args.nodes, args.profile)
        print(f"profiled start: {wall:.2f}s wall, {cpu:.2f}s CPU, {counted} bound; stats: {args.profile}")
        return
    starts = [one(api, args.nodes) for _ in range(args.repeats)]
    assert all(counted == args.pods + 1 for _, _, counted, _ in starts), starts  # and the one placed
    split = [parts(api, args.pods) for _ in range(args.repeats)]
    wall = min(s[0] for s in starts)
    cpu = min(s[1] for s in starts)
    decoding = min(s[0] for s in split) / args.pods * 1e6
    parsing = min(s[1] for s in split) / args.pods * 1e6
    feeding = min(s[2] for s in split) / args.pods * 1e6
    what = "start (informers, decoding, feed, a first decision)"
    print(f"{what}: {wall:.2f}s wall, {cpu:.2f}s CPU (min of {args.repeats})")
    print(f"  all: {', '.join(f'{w:.2f}s' for w, _, _, _ in starts)}")
    decision = min(s[3] for s in starts) * 1000
    print(f"then a pending pod's first decision: {decision:.0f} ms (min of {args.repeats})")
    print(
        f"pods alone (min of {args.repeats}): decoding {decoding:.1f} us a pod,"
        f" feeding {feeding:.1f} us a pod (of which PodInfo.from_dict {parsing:.1f} us)"
    )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
