"""The chaos soak's invariant checker: a recount of every quota from the pods the API shows bound,
independent of gpuq's code (only the quantity parser is shared), and the four invariants of issue 11.

1. No quota's recount exceeds its limit (:func:`over_limits`), checked after every step; nor does
   any shared GPU's: the tensor-fusion pods on one device (their ``tensor-fusion.ai/gpu-ids``) never
   ask more TFLOPS or VRAM than the card has (design.md Semantics 19).
2. After things settle, every status gpuq writes equals the recount (:func:`status_mismatches`):
   Queue ``status.allocated``, ElasticQuota ``status.used``, GPUResourceQuota ``status.used``.
3. Every schedulable pod ends up bound (:func:`placeable` names the pending pods that fit somewhere
   as far as node room and every quota go).
4. No pod is bound twice (:class:`BindLedger`): a pod's ``spec.nodeName`` never changes, and a pod
   recreated under the same name is a new pod (new uid).

A pod counts when it is bound (``spec.nodeName``) and not terminal, on whatever node, including a
node deleted under it: such a pod still exists until the pod garbage collector deletes it
(design.md Semantics 4: ``used`` is the sum of bound, non-terminal pods).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpuq_k8s.common.model.quantity import parse_quantity
from gpuq_k8s.common.model.wire import Obj
from tests.e2e.chaos import workload as w

TF = "tensor-fusion.ai/"
GPU_IDS = f"{TF}gpu-ids"
# One shared device of the chaos GPU nodes: the A100's 312 TFLOPS (NVIDIA's dense FP16 figure, as
# gpuq's built-in table has it) and the nodes' memory label (MiB).
DEVICE_CAPACITY = {"tflops": Fraction(312), "vram": parse_quantity(f"{w.GPU_LABELS[f'{w.GPU}.memory']}Mi")}
Amounts = defaultdict[str, Fraction]
ZERO = Fraction(0)


def q(value: Any) -> Fraction:
    return parse_quantity(value)


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str
    node: str
    requests: Mapping[str, Fraction]
    annotations: Mapping[str, str]
    selector: Mapping[str, str]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def uses_gpu(self) -> bool:
        return self.requests.get(w.GPU, ZERO) > 0

    @property
    def queue(self) -> str:
        return self.annotations.get(w.QUEUE_ANNOTATION, "")

    @property
    def shares_gpu(self) -> bool:
        """A tensor-fusion pod asking no GPU resource: it shares devices (Semantics 19)."""
        return bool(self.gpu_request) and not self.uses_gpu

    @property
    def share(self) -> dict[str, Fraction]:
        """What it takes of each device it shares."""
        a = self.annotations
        return {"tflops": q(a[f"{TF}tflops-request"]), "vram": q(a[f"{TF}vram-request"])}

    @property
    def gpu_ids(self) -> tuple[str, ...]:
        raw = self.annotations.get(GPU_IDS, "")
        return tuple(raw.split(",")) if raw else ()

    @property
    def gpu_request(self) -> dict[str, Fraction]:
        """GPUResourceQuota usage of this pod (one worker), empty when it has no tensor-fusion request."""
        if not any(key.startswith(TF) for key in self.annotations):
            return {}
        a = self.annotations
        return {
            "requests.tflops": q(a[f"{TF}tflops-request"]),
            "requests.vram": q(a[f"{TF}vram-request"]),
            "limits.tflops": q(a[f"{TF}tflops-limit"]),
            "limits.vram": q(a[f"{TF}vram-limit"]),
            "workers": Fraction(1),
        }


def pod_view(obj: Obj) -> PodView | None:
    """The pod as the checker sees it; None for a terminal or deleting pod (it holds nothing)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
        return None
    requests: Amounts = defaultdict(Fraction)
    for container in spec.get("containers") or ():
        for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            requests[resource] += q(amount)
    return PodView(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        node=str(spec.get("nodeName") or ""),
        requests=dict(requests),
        annotations=dict(meta.get("annotations") or {}),
        selector=dict(spec.get("nodeSelector") or {}),
    )


@dataclass(frozen=True)
class NodeView:
    name: str
    allocatable: Mapping[str, Fraction]
    labels: Mapping[str, str]

    @property
    def gpu(self) -> bool:
        return self.allocatable.get(w.GPU, ZERO) > 0


def node_view(obj: Obj) -> NodeView:
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    allocatable = {r: q(v) for r, v in (status.get("allocatable") or {}).items()}
    return NodeView(str(meta.get("name")), allocatable, dict(meta.get("labels") or {}))


LIMITS: dict[str, dict[str, Fraction]] = {
    f"Queue/{w.CARD_QUEUE}": {w.CARD: Fraction(w.CARD_QUOTA)},
    f"Queue/{w.CAP_QUEUE}": {"cpu": q(w.CAP_CPU), "memory": q(w.CAP_MEMORY)},
    f"ElasticQuota/{w.NAMESPACES['eq']}/{w.EQ_NAME}": {"cpu": q(w.EQ_CPU), "memory": q(w.EQ_MEMORY)},
    f"GPUResourceQuota/{w.NAMESPACES['gq']}/{w.GQ_NAME}": {
        "requests.tflops": q(w.GQ_TFLOPS),
        "requests.vram": q(w.GQ_VRAM),
        "limits.tflops": q(w.GQ_TFLOPS),
        "limits.vram": q(w.GQ_VRAM),
        "workers": Fraction(w.GQ_WORKERS),
    },
}
CROSS_LIMIT = {"cpu": q(w.CROSS_CPU)}


def charges(pod: PodView) -> dict[str, dict[str, Fraction]]:
    """What ``pod`` counts against each namespace- or queue-wide quota (crossquota is per node)."""
    out: dict[str, dict[str, Fraction]] = {}
    if pod.queue == w.CARD_QUEUE and pod.uses_gpu:
        out[f"Queue/{w.CARD_QUEUE}"] = {w.CARD: pod.requests[w.GPU]}
    if pod.queue == w.CAP_QUEUE:
        out[f"Queue/{w.CAP_QUEUE}"] = {r: pod.requests.get(r, ZERO) for r in ("cpu", "memory")}
    if pod.namespace == w.NAMESPACES["eq"]:
        out[f"ElasticQuota/{w.NAMESPACES['eq']}/{w.EQ_NAME}"] = dict(pod.requests)
    if pod.namespace == w.NAMESPACES["gq"] and pod.gpu_request:
        out[f"GPUResourceQuota/{w.NAMESPACES['gq']}/{w.GQ_NAME}"] = pod.gpu_request
    return out


def cross_charge(pod: PodView) -> dict[str, Fraction]:
    """What ``pod`` counts against a GPU node's cross quota when it lands there."""
    return {} if pod.uses_gpu else {"cpu": pod.requests.get("cpu", ZERO)}


@dataclass
class Usage:
    """The recount: per quota (``Kind/ns/name``, or ``crossquota/<node>``) per resource."""

    quotas: defaultdict[str, Amounts] = field(default_factory=lambda: defaultdict(_amounts))
    on_node: defaultdict[str, Amounts] = field(default_factory=lambda: defaultdict(_amounts))
    pods_on_node: Counter[str] = field(default_factory=Counter)
    # per shared device (``<node>-gpu-<i>``): what the tensor-fusion pods on it take
    devices: defaultdict[str, Amounts] = field(default_factory=lambda: defaultdict(_amounts))


def _amounts() -> Amounts:
    return defaultdict(Fraction)


def _add(target: Amounts, amounts: Mapping[str, Fraction]) -> None:
    for resource, amount in amounts.items():
        target[resource] += amount


def recount(pods: Iterable[PodView], nodes: Mapping[str, NodeView]) -> Usage:
    usage = Usage()
    for pod in pods:
        if not pod.node:
            continue
        for quota, amounts in charges(pod).items():
            _add(usage.quotas[quota], amounts)
        _add(usage.on_node[pod.node], pod.requests)
        usage.pods_on_node[pod.node] += 1
        if pod.shares_gpu:
            for device in pod.gpu_ids:
                _add(usage.devices[device], pod.share)
        node = nodes.get(pod.node)
        if node is not None and node.gpu:
            _add(usage.quotas[f"crossquota/{pod.node}"], cross_charge(pod))
    return usage


def _limit_of(quota: str) -> Mapping[str, Fraction]:
    return CROSS_LIMIT if quota.startswith("crossquota/") else LIMITS[quota]


def over_limits(usage: Usage) -> list[str]:
    """Invariant 1: one message per quota resource whose recount exceeds its limit."""
    out = []
    for quota, used in sorted(usage.quotas.items()):
        for resource, limit in _limit_of(quota).items():
            if used[resource] > limit:
                out.append(f"{quota}: {resource} recount {float(used[resource]):g} > limit {float(limit):g}")
    for device, used in sorted(usage.devices.items()):
        for resource, capacity in DEVICE_CAPACITY.items():
            if used[resource] > capacity:
                recounted, most = float(used[resource]), float(capacity)
                out.append(f"GPU {device}: {resource} recount {recounted:g} > capacity {most:g}")
    return out


def _gpu_room(pod: PodView, usage: Usage, node: NodeView) -> bool:
    """Whether ``node``'s GPUs take ``pod``: a shared-GPU pod needs a device with its share left (one
    carrying shares, or one neither shares nor whole-GPU pods hold); a whole-GPU pod needs its cards
    beside the cards held whole and the devices carrying shares (Semantics 19)."""
    count = int(node.allocatable.get(w.GPU, ZERO))
    shared = {
        d: usage.devices[d] for d in (f"{node.name}-gpu-{i}" for i in range(count)) if d in usage.devices
    }
    whole = usage.on_node[node.name][w.GPU]
    if pod.uses_gpu:
        return whole + len(shared) + pod.requests[w.GPU] <= count
    if not pod.shares_gpu:
        return True
    want = pod.share
    if any(all(used[r] + v <= DEVICE_CAPACITY[r] for r, v in want.items()) for used in shared.values()):
        return True
    fresh = count - whole - len(shared) > 0
    return fresh and all(v <= DEVICE_CAPACITY[r] for r, v in want.items())


def placeable(pod: PodView, usage: Usage, nodes: Mapping[str, NodeView]) -> str | None:
    """Invariant 3: the name of a node ``pod`` fits on now, node room and every quota considered
    (None when it fits nowhere: its waiting is legitimate)."""
    for quota, amounts in charges(pod).items():
        limit = LIMITS[quota]
        if any(usage.quotas[quota][r] + v > limit[r] for r, v in amounts.items() if r in limit):
            return None
    for node in sorted(nodes.values(), key=lambda n: n.name):
        if any(node.labels.get(k) != v for k, v in pod.selector.items()):
            continue
        used = usage.on_node[node.name]
        if any(used[r] + v > node.allocatable.get(r, ZERO) for r, v in pod.requests.items() if v > 0):
            continue
        if usage.pods_on_node[node.name] + 1 > node.allocatable.get("pods", ZERO):
            continue
        if pod.shares_gpu and not node.gpu:
            continue  # tensor-fusion pods go where they can share a GPU
        if node.gpu and not _gpu_room(pod, usage, node):
            continue
        if node.gpu:
            cross = usage.quotas[f"crossquota/{node.name}"]
            if any(cross[r] + v > CROSS_LIMIT[r] for r, v in cross_charge(pod).items()):
                continue
        return node.name
    return None


def _flat(value: Any, prefix: str = "") -> dict[str, Fraction]:
    """Nested quantities flattened to ``a.b`` keys, zeros dropped."""
    out: dict[str, Fraction] = {}
    if isinstance(value, Mapping):
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}{key}."))
    elif value is not None:
        amount = q(value)
        if amount:
            out[prefix.rstrip(".")] = amount
    return out


def written_status(quota: str, obj: Obj | None) -> dict[str, Fraction] | None:
    """What gpuq wrote on the quota object (None when the object is missing)."""
    if obj is None:
        return None
    status = obj.get("status") or {}
    return _flat(status.get("allocated") if quota.startswith("Queue/") else status.get("used"))


def status_mismatches(usage: Usage, objects: Mapping[str, Obj | None]) -> list[str]:
    """Invariant 2: one message per quota object whose status differs from the recount."""
    out = []
    for quota in sorted(LIMITS):
        written = written_status(quota, objects.get(quota))
        expected = {r: v for r, v in usage.quotas[quota].items() if v}
        if written != expected:
            out.append(f"{quota}: status {_show(written)} != recount {_show(expected)}")
    return out


def _show(amounts: Mapping[str, Fraction] | None) -> str:
    if amounts is None:
        return "(object missing)"
    return "{" + ", ".join(f"{k}: {float(v):g}" for k, v in sorted(amounts.items())) + "}"


class BindLedger:
    """Invariant 4 over every snapshot: per uid the node it was first seen bound to; per name the
    uids it had."""

    def __init__(self) -> None:
        self.node_of: dict[str, tuple[str, str]] = {}  # uid -> (pod key, node)
        self.uids_of: dict[str, set[str]] = defaultdict(set)

    def observe(self, pods: Iterable[PodView]) -> list[str]:
        out = []
        for pod in pods:
            self.uids_of[pod.key].add(pod.uid)
            if not pod.node:
                if pod.uid in self.node_of:
                    out.append(
                        f"Pod/{pod.key} (uid {pod.uid}) was bound to {self.node_of[pod.uid][1]}, now unbound"
                    )
                continue
            seen = self.node_of.setdefault(pod.uid, (pod.key, pod.node))
            if seen[1] != pod.node:
                out.append(f"Pod/{pod.key} (uid {pod.uid}) bound twice: {seen[1]}, then {pod.node}")
        return out

    def created(self, key: str, uid: str) -> str | None:
        """A create answered ``uid`` for ``key``: a reused name must get a new uid."""
        if uid in self.uids_of[key]:
            return f"Pod/{key} recreated with the uid of an earlier pod ({uid})"
        self.uids_of[key].add(uid)
        return None
