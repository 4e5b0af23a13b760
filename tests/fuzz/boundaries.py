"""The fuzzed boundaries, their strategies and the check that makes an answer clean.

* ``feed``: arbitrary Nodes, Pods, Queues, PodGroups, ElasticQuotas and GPUResourceQuotas (hostile
  annotations, quantities, labels and bodies) applied by ``Feed.apply`` to a real
  :class:`~scheduler.cycle.Scheduler` on the memory backend with every plugin enabled, then the
  enqueue action, scheduling attempts, a status sync, the scrape-time gauges, and the deletes. Clean:
  no exception escapes, no error of gpuq's own had to be contained (``InternalError``), and every event
  and condition message is bounded.
* ``review``: AdmissionReview bodies (hostile objects and old objects, hostile envelopes, mangled
  bytes) through the webhook's review path, ``parse_review`` -> ``Admission.validate`` /
  ``Admission.mutate`` -> ``response_body``, over a cluster view that holds hostile objects too.
  Clean: a ``MalformedReview`` (the server's HTTP 400) or a :class:`~webhook.review.Decision` (allowed,
  or a denial), every message bounded.
* ``quantity``, ``json_text``, ``quote``: the three primitive readers alone, cheaply.

The values mix what real objects hold with what Python's own limits trip on: integers of 5,000
digits (``int``'s 4,300-digit limit), ``1e999999``, JSON nested 100,000 deep, 200 KiB strings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from hypothesis import strategies as st

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.json_text import load_json_text
from gpuq_k8s.common.model.limits import MAX_QUOTED_CHARS
from gpuq_k8s.common.model.quantity import parse_quantity, to_units
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.kube.feed import Feed
from gpuq_k8s.scheduler.kube.quota_status import QuotaStatus
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.options import admission_options
from gpuq_k8s.webhook.review import MalformedReview, parse_review, response_body
from gpuq_k8s.webhook.view import StaticView

Obj = dict[str, Any]

HUGE: Final = "1" + "0" * 5000  # past Python's 4,300-digit limit on int <-> str
BIG_INT: Final = 10**4000  # an int JSON parsers still build (pydantic's does)
# No denial, event, condition or refusal is longer than this, whatever the input (values are quoted
# at most MAX_QUOTED_CHARS long; the rest of a message is gpuq's own words and bounded names).
MAX_MESSAGE: Final = 4096
_HUGE_MARK: Final = "@@huge@@"  # json.dumps cannot write HUGE: the review text gets it spliced in

# Every plugin on, so every reader of every object runs.
CONFIG: Final = SchedulerConfig.from_yaml(
    """\
actions: "enqueue, allocate, backfill, preempt, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
- plugins:
  - name: capacity-card
  - name: gpu-quota
  - name: capacity-scheduling
  - name: crossquota
    arguments: {gpu-resource-names: "nvidia.com/gpu", quota-resources: "cpu,memory"}
  - name: resource-strategy-fit
"""
)
OPTIONS: Final = admission_options(CONFIG)

# --------------------------------------------------------------------------------------- strategies
_BIG_TEXTS: Final = (
    "[" * 100_000,
    "[" * 40 + "]" * 40,
    '{"a": ' * 33 + "1" + "}" * 33,
    '{"NVIDIA-A100": ' + "[" * 33 + "1" + "]" * 33 + "}",
    "x" * 200_000,
    '{"' + "A" * 200_000 + '": 1}',
    "A|" * 50_000 + "A",
    '{"cpu": 1e400}',
    '{"NVIDIA-A100": ' + HUGE + "}",
    '{"NVIDIA-A100": 1, "NVIDIA-A100": 2}',
)
# Raw JSON text of one value inside an annotation's JSON.
_JSON_ATOMS = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.sampled_from(
        [
            HUGE, "-" + HUGE, "1e999999", "-1e999999", "1e-999999", "0." + "0" * 5000 + "1", "1.5", "0",
            "-1", "4", "NaN", "Infinity", "-Infinity", "true", "null", '"4"', "[]", "{}", "1" * 64,
            "1" * 65, "9" * 19, "9" * 20, "1000000001",
        ]
    ),
    st.floats().map(json.dumps),
)  # fmt: skip
_CARD_NAMES = st.one_of(
    st.sampled_from(
        [
            "NVIDIA-A100", "NVIDIA-H100", "NVIDIA-A100|NVIDIA-H100", "NVIDIA-A100/mps-80g*1/8",
            "NVIDIA-A100/mig-1g.10gb-mixed", "A" * 300, "A|A", "", " A", "A" * 253,
            ("B" * 100 + "|") * 11 + "C",
        ]
    ),
    st.text(max_size=6),
)  # fmt: skip
_CARD_JSON = st.lists(st.tuples(_CARD_NAMES, _JSON_ATOMS), max_size=3).map(
    lambda pairs: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in pairs) + "}"
)
_QUANTITY_TEXT = st.one_of(
    st.builds(
        "{}{}{}{}".format,
        st.sampled_from(["", "", "-", "+"]),
        st.integers(0, 10**7).map(str),
        st.sampled_from(["", "", ".5", ".", ".000001"]),
        st.sampled_from(
            ["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "Ei", "n", "u", "e3", "e-3", "e30", "e31"]
        ),
    ),
    st.sampled_from(
        [
            HUGE, HUGE + "Gi", "-" + HUGE, "0." + "0" * 5000 + "1", "1e999999", "1e-999999", "1e" + HUGE,
            "1e0" + "0" * 5000 + "3", "nan", "Infinity", " 4 ", "1" * 64, "1" * 65, "9" * 30, "", " ",
            "1e", ".", "0x10", "²",
        ]
    ),
    st.text(max_size=6),
)  # fmt: skip
ANNOTATION_TEXT = st.one_of(
    _CARD_JSON, _QUANTITY_TEXT, _JSON_ATOMS, _CARD_NAMES, st.text(max_size=12), st.sampled_from(_BIG_TEXTS)
)
# A field of a body: a quantity as text or a number, or nothing sensible at all.
QUANTITY: st.SearchStrategy[Any] = st.one_of(
    _QUANTITY_TEXT,
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.sampled_from([BIG_INT, -BIG_INT, None, True, [], {}, _HUGE_MARK]),
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=6),
    st.sampled_from([BIG_INT, _HUGE_MARK, "1e999999", "x" * 200_000]),
)
JSON_VALUES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)
_RESOURCES = st.sampled_from(
    ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/gpu.shared", "pods", "ephemeral-storage", "example.com/x"]
)
_AMOUNTS = st.dictionaries(_RESOURCES, QUANTITY, max_size=2)
_NAMES = st.sampled_from(["team-a", "pg", "default", "missing", "q", "x" * 300])
_POD_ANNOTATIONS = st.dictionaries(
    st.sampled_from(
        [
            ann.CARD_NAME, ann.GROUP_NAME, ann.QUEUE_NAME, ann.PREEMPTABLE, ann.CROSSQUOTA_SCORING_STRATEGY,
            ann.RESOURCE_STRATEGY_SCORING_TYPE, ann.RESOURCE_STRATEGY_WEIGHT, *ann.TENSOR_FUSION_ANNOTATIONS,
        ]
    ),
    st.one_of(ANNOTATION_TEXT, _NAMES),
    max_size=4,
)  # fmt: skip
_NODE_LABELS = st.dictionaries(
    st.sampled_from(
        [
            "nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory",
            "nvidia.com/gpu.replicas", "nvidia.com/gpu.tflops", "nvidia.com/mig-1g.10gb.product",
            "kubernetes.io/hostname",
        ]
    ),
    st.one_of(
        st.sampled_from(["NVIDIA-A100", "8", "81920", "0", "-1", "x y", "9" * 63, "²", "1" * 65, HUGE]),
        st.text(max_size=4),
    ),
    max_size=4,
)  # fmt: skip
_NODE_ANNOTATIONS = st.dictionaries(
    st.sampled_from(
        [
            f"{ann.CROSSQUOTA_PREFIX}cpu",
            f"{ann.CROSSQUOTA_PREFIX}memory",
            f"{ann.CROSSQUOTA_PERCENTAGE_PREFIX}cpu",
        ]
    ),
    ANNOTATION_TEXT,
    max_size=2,
)


def _meta(kind: str, name: str, namespace: str | None, annotations: Mapping[str, Any]) -> Obj:
    meta: Obj = {"name": name, "uid": f"{kind}-{namespace}-{name}", "resourceVersion": "1"}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


# Strategies are built once, here: one built inside a draw is validated again on every draw.
_MAYBE_AMOUNTS = st.one_of(st.none(), _AMOUNTS)
_POD_NODES = st.sampled_from([None, None, None, "gpu", "ghost"])
_PRIORITIES = st.one_of(st.none(), st.integers(-(2**40), 2**40))
_CARD_QUOTAS = st.one_of(st.just({}), ANNOTATION_TEXT.map(lambda text: {ann.CARD_QUOTA: text}))
_CARD_REQUESTS = st.one_of(st.just({}), ANNOTATION_TEXT.map(lambda text: {ann.CARD_REQUEST: text}))
_QUEUE_SPECS = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "capability": _AMOUNTS,
            "deserved": _AMOUNTS,
            "guarantee": st.fixed_dictionaries({"resource": _AMOUNTS}),
            "weight": st.one_of(st.integers(-(2**40), 2**40), QUANTITY),
            "reclaimable": st.one_of(st.booleans(), JSON_VALUES),
        },
    ),
    JSON_VALUES,
)
_QUEUE_STATUSES = st.one_of(
    st.fixed_dictionaries({"state": st.sampled_from(["Open", "Closed", "x"])}), JSON_VALUES
)
_POD_GROUP_SPECS = st.one_of(
    st.fixed_dictionaries(
        {
            "queue": _NAMES,
            "minMember": st.one_of(st.integers(-5, 5), st.sampled_from([BIG_INT, 2**40, "1", None])),
        },
        optional={"minResources": _AMOUNTS, "priorityClassName": st.text(max_size=4)},
    ),
    JSON_VALUES,
)
_ELASTIC_SPECS = st.one_of(
    st.fixed_dictionaries({}, optional={"min": _AMOUNTS, "max": _AMOUNTS}), JSON_VALUES
)
_TFLOPS_VRAM = st.fixed_dictionaries({}, optional={"tflops": QUANTITY, "vram": QUANTITY})
_GPU_TOTALS = st.fixed_dictionaries(
    {},
    optional={
        "requests": _TFLOPS_VRAM,
        "limits": _TFLOPS_VRAM,
        "maxWorkers": QUANTITY,
        "alertThresholdPercent": QUANTITY,
        "requests.tflops": QUANTITY,
        "requests.vram": QUANTITY,
        "workers": QUANTITY,
    },
)
_GPU_SINGLES = st.fixed_dictionaries(
    {},
    optional={
        "maxRequests": _TFLOPS_VRAM,
        "maxLimits": _TFLOPS_VRAM,
        "maxGPUCount": QUANTITY,
        "defaultRequests": _TFLOPS_VRAM,
        "max": st.fixed_dictionaries(
            {}, optional={"tflops": QUANTITY, "vram": QUANTITY, "workers": QUANTITY}
        ),
        "min": _TFLOPS_VRAM,
    },
)
_GPU_SPECS = st.one_of(
    st.fixed_dictionaries({}, optional={"total": _GPU_TOTALS, "single": _GPU_SINGLES}), JSON_VALUES
)


@st.composite
def pods(draw: st.DrawFn, name: str = "p") -> Obj:
    resources: Obj = {"requests": draw(_AMOUNTS)}
    limits = draw(_MAYBE_AMOUNTS)
    if limits is not None:
        resources["limits"] = limits
    spec: Obj = {"schedulerName": "gpuq-scheduler", "containers": [{"name": "c", "resources": resources}]}
    node = draw(_POD_NODES)
    if node is not None:
        spec["nodeName"] = node
    priority = draw(_PRIORITIES)
    if priority is not None:
        spec["priority"] = priority
    meta = _meta("Pod", name, "ns", draw(_POD_ANNOTATIONS))
    phase = "Running" if node else "Pending"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


@st.composite
def nodes(draw: st.DrawFn, name: str = "fuzzed") -> Obj:
    meta = _meta("Node", name, None, draw(_NODE_ANNOTATIONS))
    meta["labels"] = draw(_NODE_LABELS)
    status = {"allocatable": draw(_AMOUNTS)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {}, "status": status}


def _volcano(kind: str, namespace: str | None, meta: tuple[str, Obj], spec: Any, status: Any) -> Obj:
    name, annotations = meta
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": kind,
        "metadata": _meta(kind, name, namespace, annotations),
        "spec": spec,
        "status": status,
    }


_QUEUES = st.builds(
    lambda name, annotations, spec, status: _volcano("Queue", None, (name, annotations), spec, status),
    st.sampled_from(["team-a", "q", "default"]),
    _CARD_QUOTAS,
    _QUEUE_SPECS,
    _QUEUE_STATUSES,
)
_POD_GROUPS = st.builds(
    lambda annotations, spec: _volcano("PodGroup", "ns", ("pg", annotations), spec, {"phase": "Pending"}),
    _CARD_REQUESTS,
    _POD_GROUP_SPECS,
)
_ELASTIC_QUOTAS = _ELASTIC_SPECS.map(
    lambda spec: {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": _meta("ElasticQuota", "eq", "ns", {}),
        "spec": spec,
    }
)
_GPU_RESOURCE_QUOTAS = _GPU_SPECS.map(
    lambda spec: {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUResourceQuota",
        "metadata": _meta("GPUResourceQuota", "q", "ns", {}),
        "spec": spec,
    }
)
_PODS = pods()
_BOUND_PODS = pods("bound")
_NODES = nodes()


CLUSTER_OBJECTS = st.lists(
    st.one_of(_NODES, _BOUND_PODS, _QUEUES, _POD_GROUPS, _ELASTIC_QUOTAS, _GPU_RESOURCE_QUOTAS), max_size=3
)
FEED_CASES = st.tuples(CLUSTER_OBJECTS, st.lists(_PODS, min_size=1, max_size=2))

# Healthy objects beside the fuzzed ones: a GPU node, an open queue with card quota, a pod that fits.
HEALTHY: Final[tuple[Obj, ...]] = (
    {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/gpu.memory": "81920"},
        },
        "spec": {},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}},
    },
    {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "team-a", "annotations": {ann.CARD_QUOTA: '{"NVIDIA-A100": 4}'}},
        "spec": {"capability": {"cpu": "100", "memory": "500Gi"}},
        "status": {"state": "Open"},
    },
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "healthy", "namespace": "ns", "uid": "healthy"},
        "spec": {
            "schedulerName": "gpuq-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Pending"},
    },
)


# --------------------------------------------------------------------------------------- the checks
def _key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def _bounded(text: str, what: str) -> None:
    assert len(text) <= MAX_MESSAGE, f"{what} of {len(text)} characters: {text[:300]!r}"


def check_feed(case: tuple[list[Obj], list[Obj]]) -> None:
    """The ``feed`` boundary (see the module doc)."""
    cluster, pending = case
    backend = MemoryBackend()
    scheduler = Scheduler(CONFIG, default_registry(), backend, clock=lambda: 0.0)
    backend.objects = scheduler.objects
    contained: list[str] = []
    scheduler.contain.counted = contained.append
    feed = Feed(scheduler)
    feed.ready = True
    objects = [*HEALTHY, *cluster, *pending]
    stored: dict[tuple[str, str, str], Obj] = {}
    for obj in objects:
        # An object of a name already stored (a hostile version of a healthy one) is an update.
        key = (str(obj["kind"]), *_key(obj))
        old = stored.get(key)
        feed.apply(Change("add" if old is None else "update", key[1:], obj, old))
        stored[key] = obj
    scheduler.run_enqueue()
    for _ in range(6):
        if scheduler.schedule_one() is None:
            break
    scheduler.sync_status()
    QuotaStatus.of(scheduler).snapshot()
    for (_, namespace, name), obj in stored.items():
        feed.apply(Change("delete", (namespace, name), obj))
    assert not contained, f"errors of gpuq's own contained on objects of kind {contained} (see the log)"
    for event in backend.events:
        _bounded(event.message, f"event {event.reason} on {event.obj}")
    for pod, condition in backend.conditions.items():
        _bounded(condition.message, f"condition of {pod}")


# The review boundary: the reviewed object's kind, and bodies.
_KINDS: Final = (
    ("", "v1", "Pod", _PODS),
    ("scheduling.volcano.sh", "v1beta1", "Queue", _QUEUES),
    ("scheduling.volcano.sh", "v1beta1", "PodGroup", _POD_GROUPS),
    ("scheduling.x-k8s.io", "v1alpha1", "ElasticQuota", _ELASTIC_QUOTAS),
    ("tensor-fusion.ai", "v1", "GPUResourceQuota", _GPU_RESOURCE_QUOTAS),
    ("apps", "v1", "Deployment", JSON_VALUES),
)


def _one_in(draw: st.DrawFn, n: int) -> bool:
    """True about once in ``n`` draws. Hypothesis favours the first and last of a range, so the odd
    one out is one in the middle."""
    return draw(_ODDS[n]) == n // 2


_ODDS: Final = {n: st.sampled_from(range(n)) for n in (8, 10, 12)}
_RARE_OPERATIONS = st.sampled_from(["DELETE", "CONNECT", "PATCH"])
_OPERATIONS = st.sampled_from(["CREATE", "UPDATE"])
_RARE_VERSIONS = st.sampled_from(["admission.k8s.io/v1beta1", "v1"])
_MANGLES = st.sampled_from(["truncate", "bytes", "invalid utf-8"])
_KIND_CASES = st.sampled_from(_KINDS)
_OLD_OBJECTS = {kind: st.one_of(st.none(), objects) for _, _, kind, objects in _KINDS}
_SHORT_BYTES = st.binary(max_size=64)


@st.composite
def review_bodies(draw: st.DrawFn) -> bytes:
    group, version, kind, objects = draw(_KIND_CASES)
    obj = draw(JSON_VALUES if _one_in(draw, 8) else objects)
    old = draw(_OLD_OBJECTS[kind])
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    request: Obj = {
        "uid": "" if _one_in(draw, 10) else "u-1",
        "kind": {"group": group, "version": version, "kind": kind},
        "name": str(meta.get("name")) if isinstance(meta, dict) else "",
        "namespace": str(meta.get("namespace") or "") if isinstance(meta, dict) else "",
        "operation": draw(_RARE_OPERATIONS) if _one_in(draw, 8) else draw(_OPERATIONS),
        "object": obj,
        "dryRun": draw(st.booleans()),
    }
    if old is not None:
        request["oldObject"] = old
    review = {
        "apiVersion": draw(_RARE_VERSIONS) if _one_in(draw, 8) else "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": draw(JSON_VALUES) if _one_in(draw, 10) else request,
    }
    # A number past 4,300 digits makes the whole body unreadable JSON (a clean 400): now and then.
    huge = HUGE if _one_in(draw, 8) else '"1"'
    body = json.dumps(review).replace(json.dumps(_HUGE_MARK), huge).encode()
    mangle = draw(_MANGLES) if _one_in(draw, 12) else ""
    if mangle == "truncate":
        body = body[: draw(st.integers(0, max(len(body) - 1, 0)))]
    elif mangle == "bytes":
        body = draw(_SHORT_BYTES)
    elif mangle == "invalid utf-8":
        body = body.replace(b'"u-1"', b'"\xff\xfe"')
    return body


REVIEW_CASES = st.tuples(review_bodies(), CLUSTER_OBJECTS)


def check_review(case: tuple[bytes, list[Obj]]) -> None:
    """The ``review`` boundary (see the module doc)."""
    body, cluster = case
    admission = Admission(StaticView([*HEALTHY, *cluster]), OPTIONS)
    try:
        review = parse_review(body)
    except MalformedReview as err:
        reason = str(err)
        assert reason and "\n" not in reason
        _bounded(reason, "malformed-review reason")
        return
    for decide in (admission.validate, admission.mutate):
        decision = decide(review.request)
        _bounded(decision.message, "decision message")
        for warning in decision.warnings:
            _bounded(warning, "warning")
        response_body(review, decision)


QUANTITY_CASES = st.tuples(_RESOURCES, QUANTITY)


def check_quantity(case: tuple[str, Any]) -> None:
    """A quantity (text or number) is an amount or an InvalidQuantity naming it, bounded."""
    resource, value = case
    try:
        to_units(resource, value)
        parse_quantity(value)
    except InvalidValue as err:
        _bounded(str(err), "quantity error")


def check_json_text(text: str) -> None:
    try:
        load_json_text(text, "field", "a JSON value")
    except InvalidValue as err:
        assert str(err).startswith("field: invalid value ")
        _bounded(str(err), "JSON text error")


def check_quote(value: Any) -> None:
    quoted = quote(value)
    assert quoted and len(quoted) <= MAX_QUOTED_CHARS + 60, quoted[:300]


QUOTE_CASES = st.one_of(
    JSON_VALUES, ANNOTATION_TEXT, st.sampled_from([BIG_INT, 10**5000, -(10**6000)]), st.binary()
)


@dataclass(frozen=True)
class Boundary:
    name: str
    cases: st.SearchStrategy[Any]
    check: Callable[[Any], None]


BOUNDARIES: Final = (
    Boundary("feed", FEED_CASES, check_feed),
    Boundary("review", REVIEW_CASES, check_review),
    Boundary("quantity", QUANTITY_CASES, check_quantity),
    Boundary("json_text", ANNOTATION_TEXT, check_json_text),
    Boundary("quote", QUOTE_CASES, check_quote),
)
