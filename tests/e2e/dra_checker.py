"""An independent check of DRA allocations, from what the API holds (issue 26 "Done when").

It shares no code with gpuq's allocator: it reads the ResourceSlices, DeviceClasses, ResourceClaims
and Pods as JSON and evaluates selectors with ``cel-python`` (celpy), a different CEL implementation
from the ``cel-expr-python`` gpuq uses. :func:`violations` returns one line per broken rule:

* every allocated device is published, and a device is allocated to several claims (or several
  times) only when it allows multiple allocations, every result a share, the shares' consumed
  capacity within the device's capacity, and each share at least what its request asked;
* a pool's shared counters are never over-consumed by its allocated devices (each counted once);
* every allocated device satisfies its DeviceClass's selectors and its request's (or subrequest's);
* an ``ExactCount`` request got exactly its count;
* every pod the claim is reserved for exists and is bound to a node the allocation's node selector
  admits, and every bound pod's claims are allocated and reserved for it.

:func:`quota_violations` recounts the quotas over the allocated devices (Queue card quotas,
GPUResourceQuota VRAM).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import celpy
import celpy.adapter
import celpy.celtypes

_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "m": 0.001,
}
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")

Obj = Mapping[str, Any]


def quantity(text: object) -> float:
    """A Kubernetes quantity as a number (the forms the workload uses)."""
    found = _QUANTITY.match(str(text))
    if found is None or found.group(2) not in _UNITS:
        raise ValueError(f"not a quantity: {text!r}")
    return float(found.group(1)) * _UNITS[found.group(2)]


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _device_env(driver: str, device: Obj) -> Any:
    """The CEL ``device`` variable, with attributes and capacities as plain values (the workload's
    selectors compare strings and booleans only)."""
    attributes: dict[str, dict[str, Any]] = {}
    for key, value in (device.get("attributes") or {}).items():
        domain, _, short = key.rpartition("/")
        plain = next(iter(value.values()))
        attributes.setdefault(domain or driver, {})[short] = plain
    capacity: dict[str, dict[str, Any]] = {}
    for key, value in (device.get("capacity") or {}).items():
        domain, _, short = key.rpartition("/")
        capacity.setdefault(domain or driver, {})[short] = str(value["value"])
    return celpy.adapter.json_to_cel({"driver": driver, "attributes": attributes, "capacity": capacity})


def _selects(env: celpy.Environment, selectors: Iterable[Obj], driver: str, device: Obj) -> bool:
    for selector in selectors:
        expression = selector["cel"]["expression"]
        program = env.program(env.compile(expression))
        result = program.evaluate({"device": _device_env(driver, device)})
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            return False
    return True


def _request(claim: Obj, name: str) -> Obj | None:
    """The ``exactly`` body of request ``name`` (``req`` or ``req/sub``)."""
    base, _, sub = name.partition("/")
    for request in claim["spec"]["devices"]["requests"]:
        if request["name"] != base:
            continue
        if not sub:
            exactly: Obj | None = request.get("exactly")
            return exactly
        for candidate in request.get("firstAvailable") or []:
            if candidate["name"] == sub:
                return dict(candidate)
    return None


def _node_admits(allocation: Obj, node: str) -> bool:
    selector = allocation.get("nodeSelector")
    if not selector:
        return True
    for term in selector.get("nodeSelectorTerms") or []:
        fields = term.get("matchFields") or []
        if all(f["key"] == "metadata.name" and f["operator"] == "In" and node in f["values"] for f in fields):
            return True
    return False


def violations(
    slices: Sequence[Obj], classes: Sequence[Obj], claims: Sequence[Obj], pods: Sequence[Obj]
) -> list[str]:
    problems: list[str] = []
    env = celpy.Environment()
    devices: dict[tuple[str, str, str], Obj] = {}
    counters: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for s in slices:
        spec = s["spec"]
        pool = (spec["driver"], spec["pool"]["name"])
        for counter_set in spec.get("sharedCounters") or []:
            counters.setdefault(pool, {})[counter_set["name"]] = {
                k: quantity(v["value"]) for k, v in counter_set["counters"].items()
            }
        for device in spec.get("devices") or []:
            devices[(*pool, device["name"])] = device
    class_by_name = {_name(c): c for c in classes}
    pods_by_key = {f"{p['metadata']['namespace']}/{_name(p)}": p for p in pods}
    uses: dict[tuple[str, str, str], list[tuple[str, Obj]]] = {}
    for claim in claims:
        ref = f"ResourceClaim/{claim['metadata']['namespace']}/{_name(claim)}"
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is None:
            continue
        per_request: dict[str, int] = {}
        for result in allocation["devices"]["results"]:
            did = (result["driver"], result["pool"], result["device"])
            device = devices.get(did)
            if device is None:
                problems.append(f"{ref}: device {'/'.join(did)} is not published")
                continue
            request = _request(claim, result["request"])
            if request is None:
                problems.append(f"{ref}: result for unknown request {result['request']}")
                continue
            base = result["request"].partition("/")[0]
            per_request[base] = per_request.get(base, 0) + 1
            device_class = class_by_name.get(request["deviceClassName"])
            selectors = [
                *(device_class or {}).get("spec", {}).get("selectors", []),
                *request.get("selectors", []),
            ]
            if device_class is None or not _selects(env, selectors, result["driver"], device):
                problems.append(f"{ref}: device {'/'.join(did)} does not satisfy request {result['request']}")
            asked = (request.get("capacity") or {}).get("requests") or {}
            consumed = result.get("consumedCapacity") or {}
            for key, amount in asked.items():
                if quantity(consumed.get(key, "0")) < quantity(amount):
                    problems.append(f"{ref}: {'/'.join(did)} consumed less {key} than asked")
            if not result.get("adminAccess"):
                uses.setdefault(did, []).append((ref, result))
        for request in claim["spec"]["devices"]["requests"]:
            exactly = request.get("exactly")
            if exactly and exactly.get("allocationMode", "ExactCount") == "ExactCount":
                want = int(exactly.get("count", 1))
                if per_request.get(request["name"], 0) != want:
                    problems.append(
                        f"{ref}: request {request['name']} got {per_request.get(request['name'], 0)}"
                    )
        for consumer in (claim.get("status") or {}).get("reservedFor") or []:
            key = f"{claim['metadata']['namespace']}/{consumer['name']}"
            pod = pods_by_key.get(key)
            if pod is None or pod["metadata"].get("uid") != consumer["uid"]:
                continue  # the pod is gone; the controller takes the reservation away
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not _node_admits(allocation, node):
                problems.append(f"{ref}: reserved for Pod/{key} on {node}, allocated for another node")
    for did, holders in uses.items():
        device = devices[did]
        label = "/".join(did)
        if len(holders) > 1 or any(r.get("shareID") for _, r in holders):
            if not device.get("allowMultipleAllocations"):
                problems.append(f"device {label} allocated {len(holders)} times: {[h for h, _ in holders]}")
                continue
            if not all(r.get("shareID") for _, r in holders):
                problems.append(f"device {label} shared, a result without shareID")
            for key, cap in (device.get("capacity") or {}).items():
                used = sum(quantity((r.get("consumedCapacity") or {}).get(key, "0")) for _, r in holders)
                if used > quantity(cap["value"]):
                    problems.append(f"device {label}: {key} over capacity ({used} > {cap['value']})")
    for pool, sets in counters.items():
        counted: dict[tuple[str, str], float] = {}
        for did in uses:
            if did[:2] != pool:
                continue
            for consumption in devices[did].get("consumesCounters") or []:
                for counter, value in consumption["counters"].items():
                    at = (consumption["counterSet"], counter)
                    counted[at] = counted.get(at, 0) + quantity(value["value"])
        for (counter_set, counter), used in counted.items():
            have = sets.get(counter_set, {}).get(counter, 0)
            if used > have:
                problems.append(
                    f"pool {'/'.join(pool)}: counter {counter_set}/{counter} over ({used} > {have})"
                )
    claims_by_key = {f"{c['metadata']['namespace']}/{_name(c)}": c for c in claims}
    for key, pod in pods_by_key.items():
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or pod["metadata"].get("deletionTimestamp"):
            continue
        statuses = {
            s["name"]: s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        for entry in pod["spec"].get("resourceClaims") or []:
            name = entry.get("resourceClaimName") or statuses.get(entry["name"])
            found = claims_by_key.get(f"{pod['metadata']['namespace']}/{name}")
            if found is None or not (found.get("status") or {}).get("allocation"):
                problems.append(f"Pod/{key} bound to {node} with claim {entry['name']} unallocated")
                continue
            reserved = {c["uid"] for c in (found.get("status") or {}).get("reservedFor") or []}
            if pod["metadata"]["uid"] not in reserved:
                problems.append(f"Pod/{key} bound to {node}, claim {name} not reserved for it")
            if not _node_admits(found["status"]["allocation"], node):
                problems.append(f"Pod/{key} bound to {node}, claim {name} allocated for another node")
    return problems


# -- extended resources backed by DRA (DRAExtendedResource) ----------------------------------------
EXTENDED_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def extended_violations(classes: Sequence[Obj], claims: Sequence[Obj], pods: Sequence[Obj]) -> list[str]:
    """Every bound pod asking an extended resource a DeviceClass names (``extendedResourceName``; the
    workload's nodes have none of it allocatable) holds it through its implicit claim: the claim its
    ``status.extendedResourceClaimStatus`` names exists, carries the annotation, is controlled by the
    pod, is allocated for the pod's node, reserved for the pod, with as many devices of that class
    as the pod asks; every request mapping names a request of the claim. (The devices themselves are
    checked with every claim's by :func:`violations`.)"""
    problems: list[str] = []
    served = {
        c["spec"]["extendedResourceName"]: _name(c)
        for c in classes
        if (c.get("spec") or {}).get("extendedResourceName")
    }
    by_key = {f"{c['metadata']['namespace']}/{_name(c)}": c for c in claims}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or pod["metadata"].get("deletionTimestamp"):
            continue
        asked: dict[str, int] = {}
        for container in pod["spec"].get("containers") or []:
            for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
                if resource in served:
                    asked[resource] = asked.get(resource, 0) + int(quantity(amount))
        if not asked:
            continue
        ns, key = pod["metadata"]["namespace"], f"{pod['metadata']['namespace']}/{_name(pod)}"
        status = (pod.get("status") or {}).get("extendedResourceClaimStatus")
        if not status:
            problems.append(
                f"Pod/{key} bound to {node} asking {sorted(asked)} without extendedResourceClaimStatus"
            )
            continue
        claim = by_key.get(f"{ns}/{status.get('resourceClaimName')}")
        if claim is None:
            problems.append(
                f"Pod/{key}: its extended resource claim {status.get('resourceClaimName')} is missing"
            )
            continue
        ref = f"ResourceClaim/{ns}/{_name(claim)}"
        if (claim["metadata"].get("annotations") or {}).get(EXTENDED_ANNOTATION) != "true":
            problems.append(f"{ref}: no {EXTENDED_ANNOTATION} annotation")
        owners = [o for o in claim["metadata"].get("ownerReferences") or [] if o.get("controller")]
        if [o.get("uid") for o in owners] != [pod["metadata"]["uid"]]:
            problems.append(f"{ref}: not controlled by Pod/{key}")
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            problems.append(f"Pod/{key} bound to {node}, its extended resource claim unallocated")
            continue
        if not _node_admits(allocation, node):
            problems.append(f"Pod/{key} bound to {node}, {ref} allocated for another node")
        if pod["metadata"]["uid"] not in {
            c.get("uid") for c in (claim.get("status") or {}).get("reservedFor") or []
        }:
            problems.append(f"Pod/{key} bound to {node}, {ref} not reserved for it")
        requests = {r["name"]: r.get("exactly") or {} for r in claim["spec"]["devices"]["requests"]}
        got: dict[str, int] = {}
        for result in allocation["devices"]["results"]:
            class_name = str(requests.get(result["request"], {}).get("deviceClassName"))
            got[class_name] = got.get(class_name, 0) + 1
        for resource, amount in asked.items():
            if got.get(served[resource], 0) != amount:
                problems.append(
                    f"Pod/{key}: {amount} {resource} asked, {ref} holds {got.get(served[resource], 0)}"
                )
        for mapping in status.get("requestMappings") or []:
            if mapping.get("requestName") not in requests:
                problems.append(f"Pod/{key}: mapping to {mapping.get('requestName')}, not a request of {ref}")
    return problems


QUEUE_NAME = "scheduling.volcano.sh/queue-name"
CARD_QUOTA = "volcano.sh/card.quota"


def card_type(driver: str, device: Obj) -> str | None:
    """The card type a Queue's card quota counts a device under (docs/design.md "Quota over devices",
    restated here): the product name with dashes for spaces, ``<product>/mig-<profile>-mixed`` for a
    MIG partition; None without a product name."""
    attributes = device.get("attributes") or {}

    def text(name: str) -> str | None:
        value = attributes.get(name) or attributes.get(f"{driver}/{name}") or {}
        found = value.get("string")
        return str(found) if found is not None else None

    product = text("productName")
    if not product:
        return None
    product = "-".join(product.split())
    profile = text("profile")
    return f"{product}/mig-{profile}-mixed" if text("type") == "mig" and profile else product


def quota_violations(
    slices: Sequence[Obj],
    claims: Sequence[Obj],
    pods: Sequence[Obj],
    queues: Sequence[Obj],
    gpu_quotas: Sequence[Obj],
) -> list[str]:
    """No quota exceeded by the allocated claims, each counted once: per Queue (the queue of the pods a
    claim is reserved for) and card type, the cards of its devices (a share: its consumed memory over
    the device's) within the Queue's ``volcano.sh/card.quota``; per namespace, the VRAM of its claims'
    devices (a share: what it consumed) within its GPUResourceQuota's ``total.requests.vram``. Admin
    access is not counted."""
    devices: dict[tuple[str, str, str], Obj] = {}
    for s in slices:
        for device in s["spec"].get("devices") or []:
            devices[(s["spec"]["driver"], s["spec"]["pool"]["name"], device["name"])] = device
    queue_of = {
        (p["metadata"]["namespace"], _name(p)): (p["metadata"].get("annotations") or {}).get(QUEUE_NAME)
        for p in pods
    }
    cards: dict[tuple[str, str], float] = {}
    vram: dict[str, float] = {}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is None:
            continue
        namespace = claim["metadata"]["namespace"]
        consumers = [c["name"] for c in (claim.get("status") or {}).get("reservedFor") or []]
        queue = next((q for c in consumers if (q := queue_of.get((namespace, c)))), None)
        for result in allocation["devices"]["results"]:
            device = devices.get((result["driver"], result["pool"], result["device"]))
            if device is None or result.get("adminAccess"):
                continue
            memory = quantity(((device.get("capacity") or {}).get("memory") or {}).get("value", "0"))
            used = (
                quantity((result.get("consumedCapacity") or {}).get("memory", "0"))
                if result.get("shareID")
                else memory
            )
            vram[namespace] = vram.get(namespace, 0) + used
            kind = card_type(result["driver"], device)
            if queue and kind:
                share = used / memory if result.get("shareID") and memory else 1.0
                cards[(queue, kind)] = cards.get((queue, kind), 0) + share
    problems = []
    for q in queues:
        quota = json.loads((q["metadata"].get("annotations") or {}).get(CARD_QUOTA) or "{}")
        for (queue, kind), count in sorted(cards.items()):
            if queue == _name(q) and count > quota.get(kind, 0) + 1e-9:
                problems.append(f"Queue/{queue}: {kind} {count} cards allocated, quota {quota.get(kind, 0)}")
    for g in gpu_quotas:
        limit = ((g["spec"].get("total") or {}).get("requests") or {}).get("vram")
        used = vram.get(g["metadata"]["namespace"], 0)
        if limit is not None and used > quantity(limit):
            problems.append(f"GPUResourceQuota/{g['metadata']['namespace']}: vram {used} over {limit}")
    return problems


# -- tensor-fusion pods and the GPUResourceQuota --------------------------------------------------------
TF_TFLOPS = "tensor-fusion.ai/tflops-request"
TF_VRAM = "tensor-fusion.ai/vram-request"
TF_GPU_COUNT = "tensor-fusion.ai/gpu-count"
TF_GPU_IDS = "tensor-fusion.ai/gpu-ids"
GPU_RESOURCE = "nvidia.com/gpu"


def _annotations(obj: Obj) -> Mapping[str, str]:
    return obj["metadata"].get("annotations") or {}


def _bound(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _tf_share(pod: Obj) -> tuple[float, float, int] | None:
    """(TFLOPS, VRAM bytes) per GPU and the GPU count a tensor-fusion pod asks; None for another pod."""
    annotations = _annotations(pod)
    if TF_TFLOPS not in annotations and TF_VRAM not in annotations:
        return None
    return (
        quantity(annotations.get(TF_TFLOPS, "0")),
        quantity(annotations.get(TF_VRAM, "0")),
        int(annotations.get(TF_GPU_COUNT, "1")),
    )


def gpu_share_violations(nodes: Sequence[Obj], pods: Sequence[Obj]) -> list[str]:
    """No GPU over-shared by tensor-fusion pods (design.md Semantics 19, restated): every bound pod with
    tensor-fusion's requests names ``gpu-count`` distinct GPUs of its own node in
    ``tensor-fusion.ai/gpu-ids`` (``<node>-gpu-<i>``, ``i`` below the node's ``nvidia.com/gpu``), and per
    GPU the pods' TFLOPS and VRAM requests add up to at most the card's (the node's
    ``nvidia.com/gpu.tflops`` label, and ``nvidia.com/gpu.memory`` in MiB)."""
    by_name = {_name(n): n for n in nodes}
    used: dict[str, list[float]] = {}
    problems: list[str] = []
    for pod in pods:
        share, node = _tf_share(pod), _bound(pod)
        if share is None or not node:
            continue
        ref = f"Pod/{pod['metadata']['namespace']}/{_name(pod)}"
        ids = [i for i in _annotations(pod).get(TF_GPU_IDS, "").split(",") if i]
        if len(ids) != share[2] or len(set(ids)) != len(ids):
            problems.append(f"{ref}: gpu-ids {ids}, {share[2]} distinct GPU(s) asked")
        count = int(
            quantity(
                ((by_name.get(node) or {}).get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, 0)
            )
        )
        for gpu in ids:
            head, _, index = gpu.rpartition("-gpu-")
            if head != node or not index.isdigit() or int(index) >= count:
                problems.append(f"{ref}: {gpu} is not a GPU of its node {node} ({count} GPU(s))")
                continue
            total = used.setdefault(gpu, [0.0, 0.0])
            total[0] += share[0]
            total[1] += share[1]
    for gpu, (tflops, vram) in sorted(used.items()):
        labels = by_name[gpu.rpartition("-gpu-")[0]]["metadata"].get("labels") or {}
        capacity = (
            quantity(labels[f"{GPU_RESOURCE}.tflops"]),
            quantity(labels[f"{GPU_RESOURCE}.memory"]) * 2**20,
        )
        for what, asked, limit in (("TFLOPS", tflops, capacity[0]), ("VRAM", vram, capacity[1])):
            if asked > limit + 1e-9:
                problems.append(f"{gpu}: {what} {asked} shared, the card has {limit}")
    return problems


def gpu_quota_violations(
    slices: Sequence[Obj],
    claims: Sequence[Obj],
    pods: Sequence[Obj],
    gpu_quotas: Sequence[Obj],
    device_tflops: Mapping[str, float],
) -> list[str]:
    """No GPUResourceQuota exceeded (docs/design.md "Quota over devices", restated): per namespace,
    ``total.requests.tflops`` and ``.vram`` and ``total.maxWorkers`` over

    * the bound tensor-fusion pods: their requests times their GPU count, one worker each;
    * the allocated claims, each once whatever number of pods share it: a device's VRAM its ``memory``
      capacity (a share: what it consumed), its TFLOPS ``device_tflops`` of its product name (a share:
      that fraction; a product not listed: not charged, as gpuq never guesses), admin access not counted;
    * one worker per bound pod with claims (workers are pods: a claim shared by two pods, two workers)."""
    devices: dict[tuple[str, str, str], Obj] = {}
    for s in slices:
        for device in s["spec"].get("devices") or []:
            devices[(s["spec"]["driver"], s["spec"]["pool"]["name"], device["name"])] = device
    used: dict[str, list[float]] = {}  # namespace -> [tflops, vram, workers]
    for pod in pods:
        if not _bound(pod):
            continue
        share = _tf_share(pod)
        if share is None and not (pod.get("spec") or {}).get("resourceClaims"):
            continue
        total = used.setdefault(pod["metadata"]["namespace"], [0.0, 0.0, 0.0])
        total[2] += 1
        if share is not None:
            total[0] += share[0] * share[2]
            total[1] += share[1] * share[2]
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        total = used.setdefault(claim["metadata"]["namespace"], [0.0, 0.0, 0.0])
        for result in (allocation or {}).get("devices", {}).get("results") or []:
            device = devices.get((result["driver"], result["pool"], result["device"]))
            if device is None or result.get("adminAccess"):
                continue
            memory = quantity(((device.get("capacity") or {}).get("memory") or {}).get("value", "0"))
            consumed = (result.get("consumedCapacity") or {}).get("memory")
            fraction = quantity(consumed) / memory if result.get("shareID") and consumed and memory else 1.0
            product = ((device.get("attributes") or {}).get("productName") or {}).get("string", "")
            total[0] += device_tflops.get(product, 0.0) * fraction
            total[1] += memory * fraction
    problems = []
    for g in gpu_quotas:
        namespace = g["metadata"]["namespace"]
        spec = g["spec"].get("total") or {}
        tflops, vram, workers = used.get(namespace, [0.0, 0.0, 0.0])
        limits = (
            ("tflops", tflops, (spec.get("requests") or {}).get("tflops")),
            ("vram", vram, (spec.get("requests") or {}).get("vram")),
            ("maxWorkers", workers, spec.get("maxWorkers")),
        )
        for what, asked, limit in limits:
            if limit is not None and asked > quantity(limit) + 1e-6:
                problems.append(f"GPUResourceQuota/{namespace}: {what} {asked} over {limit}")
    return problems
