"""Nothing a cluster holds or a client sends takes gpuq down (issue 24; design.md Semantics 17).

Each input that crashed gpuq (Python's ``int`` refuses more than 4,300 digits, and nothing caught
the ``ValueError``) goes through the scheduler's ``Feed.apply`` with a real Scheduler on the memory
backend and through the webhook's review path: the object gets its Warning (scheduler) or a denial
naming the field (webhook), every message is bounded, and everything else goes on. An error of
gpuq's own met on one object is contained to it (a deliberately faulty plugin stands in for a bug).
The naive ``gpuq.io/ca-changed-at`` of a CA rollover is read as UTC.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from gpuq_k8s.certs.authority import create_ca
from gpuq_k8s.certs.renewal import Authorities, RenewalPolicy, next_authorities
from gpuq_k8s.certs.renewer import CHANGED_AT, authorities_from_secret, secret_of_authorities
from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.kube.informer import Informer, InformerSet
from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import ConfigError, InvalidAnnotation, InvalidValue
from gpuq_k8s.common.model.events import FAILED_SCHEDULING, INTERNAL_ERROR, INVALID_ANNOTATION
from gpuq_k8s.common.model.json_text import load_json_text
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.limits import MAX_QUOTED_CHARS
from gpuq_k8s.common.model.quantity import parse_quantity
from gpuq_k8s.common.model.quoting import cut, quote
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.state import ClusterState
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import EnqueuePlugin, GroupInfo, Handle, PreFilterPlugin
from gpuq_k8s.scheduler.framework.registry import PluginSettings
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.kube.feed import Feed
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.metrics import SchedulerMetrics
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.simulate.loader import read
from gpuq_k8s.webhook.admission import Admission, validate
from gpuq_k8s.webhook.endpoints import Endpoints
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.options import admission_options
from gpuq_k8s.webhook.review import parse_review
from gpuq_k8s.webhook.view import StaticView
from tests.fuzz import boundaries as fuzz_boundaries
from tests.testing.builders import (
    MakeElasticQuota,
    MakeGPUResourceQuota,
    MakeNode,
    MakePod,
    MakePodGroup,
    MakeQueue,
)
from tests.testing.config import scheduler_config

HUGE = "1" + "0" * 5000  # past Python's 4,300-digit limit on int <-> str
TINY = "0." + "0" * 5000 + "1"
DEEP = "[" * 100_000
BIG = "x" * 200 * 1024  # a 200 KiB annotation value
# events.k8s.io/v1 refuses a note over 1 KiB; a denial quoting a 200 KiB value must not be 200 KiB.
MAX_MESSAGE = 1024

CONFIG_TEXT = scheduler_config(
    "name: capacity-card",
    "name: gpu-quota",
    "name: capacity-scheduling",
    'name: crossquota\n    arguments: {gpu-resource-names: "nvidia.com/gpu", quota-resources: "cpu,memory"}',
    "name: resource-strategy-fit",
)
CONFIG = SchedulerConfig.from_yaml(CONFIG_TEXT)

GPU_NODE = MakeNode("gpu").product("NVIDIA-A100").alloc(cpu="64", memory="512Gi", pods="110").gpus("8")
TEAM_A = MakeQueue("team-a").capability(cpu="100", memory="500Gi").card_quota('{"NVIDIA-A100": 4}')
HEALTHY = MakePod("healthy").req(cpu="1").priority(0).phase("Pending")
POISON = MakePod("poison").req(cpu="1").priority(0).phase("Pending")
GROUP = MakePodGroup("pg").queue("team-a").min_member(1)


@dataclass
class Harness:
    scheduler: Scheduler
    backend: MemoryBackend
    feed: Feed
    contained: list[str] = field(default_factory=list)

    def apply(self, *objects: Obj) -> None:
        for obj in objects:
            meta = obj["metadata"]
            self.feed.apply(Change("add", (str(meta.get("namespace") or ""), str(meta["name"])), obj))

    def run(self) -> None:
        """What the scheduling loop does: enqueue, then attempts until none is ready."""
        self.scheduler.run_enqueue()
        while self.scheduler.schedule_one() is not None:
            self.scheduler.run_enqueue()

    def warnings(self, ref: str) -> list[tuple[str, str]]:
        return [(e.reason, e.message) for e in self.backend.events if e.obj == ref and e.type == "Warning"]


def harness(config: Any = CONFIG, registry: Any = None) -> Harness:
    backend = MemoryBackend()
    scheduler = Scheduler(config, registry or default_registry(), backend, clock=lambda: 0.0)
    backend.objects = scheduler.objects
    feed = Feed(scheduler)
    feed.ready = True
    made = Harness(scheduler, backend, feed)
    scheduler.contain.counted = made.contained.append
    return made


# (id, the poisoned object, the object its Warning is on, the reason, a text the message names)
POISONED: list[tuple[str, Obj, str, str, str]] = [
    (
        "card.quota 5000 digits",
        TEAM_A.copy().card_quota(f'{{"NVIDIA-A100": {HUGE}}}').obj(),
        "Queue/team-a",
        INVALID_ANNOTATION,
        'volcano.sh/card.quota: invalid value \'{"NVIDIA-A100": 1000',
    ),
    (
        "card.quota 1e999999",
        TEAM_A.copy().card_quota('{"NVIDIA-A100": 1e999999}').obj(),
        "Queue/team-a",
        INVALID_ANNOTATION,
        "volcano.sh/card.quota[NVIDIA-A100]: invalid value inf",
    ),
    (
        "card.quota nested 100000 deep",
        TEAM_A.copy().card_quota(DEEP).obj(),
        "Queue/team-a",
        INVALID_ANNOTATION,
        "(invalid JSON: nested more than 32 deep)",
    ),
    (
        "card.quota of 200 KiB",
        TEAM_A.copy().card_quota(BIG).obj(),
        "Queue/team-a",
        INVALID_ANNOTATION,
        "... (204800 characters)",
    ),
    (
        "card.request 5000 digits",
        GROUP.copy().card_request(f'{{"NVIDIA-A100": {HUGE}}}').obj(),
        "PodGroup/ns/pg",
        INVALID_ANNOTATION,
        "volcano.sh/card.request: invalid value",
    ),
    (
        "pod cpu 5000 digits",
        POISON.copy().req(cpu=HUGE).obj(),
        "Pod/ns/poison",
        FAILED_SCHEDULING,
        "requests[cpu]: invalid value '1000",
    ),
    (
        "pod cpu 5000 decimals",
        POISON.copy().req(cpu=TINY).obj(),
        "Pod/ns/poison",
        FAILED_SCHEDULING,
        "expected a number of at most 64 digits",
    ),
    (
        "pod cpu exponent of 5000 digits",
        POISON.copy().req(cpu="1e" + "9" * 5000).obj(),
        "Pod/ns/poison",
        FAILED_SCHEDULING,
        "expected an exponent within +-30",
    ),
    (
        "pod tflops 5000 digits",
        POISON.copy().gpus(1).annotation(ann.TF_TFLOPS_REQUEST, HUGE).obj(),
        "Pod/ns/poison",
        FAILED_SCHEDULING,
        "tensor-fusion.ai/tflops-request: invalid value '1000",
    ),
    (
        "pod strategy weight 5000 digits",
        POISON.copy().annotation(ann.RESOURCE_STRATEGY_WEIGHT, f'{{"cpu": {HUGE}}}').obj(),
        "Pod/ns/poison",
        INVALID_ANNOTATION,
        "volcano.sh/resource-strategy-weight: invalid value",
    ),
    (
        "pod card.name of 300000 characters",
        POISON.copy().gpus(1).queue("team-a").card("A" * 300_000).obj(),
        "Pod/ns/poison",
        FAILED_SCHEDULING,
        "... (300000 characters)",
    ),
    (
        "node crossquota 5000 digits",
        GPU_NODE.copy().annotation("volcano.sh/crossquota-cpu", HUGE).obj(),
        "Node/gpu",
        INVALID_ANNOTATION,
        "volcano.sh/crossquota-cpu: invalid value '1000",
    ),
    (
        "node allocatable 5000 digits",
        MakeNode("cpu").alloc(cpu=HUGE).obj(),
        "Node/cpu",
        INVALID_ANNOTATION,
        "status.allocatable[cpu]: invalid value '1000",
    ),
]


@pytest.mark.parametrize(
    ("poisoned", "ref", "reason", "names"), [c[1:] for c in POISONED], ids=[c[0] for c in POISONED]
)
def test_a_poisoned_object_gets_its_warning_and_everything_else_is_scheduled(
    poisoned: Obj, ref: str, reason: str, names: str
) -> None:
    """Through ``Feed.apply``, the enqueue action and the scheduling attempts: before issue 24 each
    raised ValueError (the scheduler died at replay or in its loop, on every replica)."""
    run = harness()
    queue = poisoned if poisoned["kind"] == "Queue" else TEAM_A.obj()
    run.apply(GPU_NODE.obj(), queue, poisoned, HEALTHY.obj())
    run.run()
    assert run.backend.bindings.get("ns/healthy") == "gpu"
    warnings = run.warnings(ref)
    assert any(r == reason and names in m for r, m in warnings), warnings
    for event in run.backend.events:
        assert len(event.message) <= MAX_MESSAGE, (event.obj, event.reason, len(event.message))
    for condition in run.backend.conditions.values():
        assert len(condition.message) <= MAX_MESSAGE
    assert run.contained == []  # handled as malformed input (Semantics 3), not as a bug


def test_a_poisoned_podgroup_falls_back_to_a_card_request_of_0() -> None:
    """Semantics 3 for ``card.request`` past the limits: the group is enqueued with no card request
    (its pods then meet the queue's card quota one by one)."""
    run = harness()
    group = GROUP.copy().card_request(f'{{"NVIDIA-A100": {HUGE}}}').obj()
    member = HEALTHY.copy().name("member").group("pg").obj()
    run.apply(GPU_NODE.obj(), TEAM_A.obj(), group, member)
    run.run()
    assert run.scheduler.group_phases()["ns/pg"] == "Running"
    assert run.backend.bindings["ns/member"] == "gpu"


# ------------------------------------------------------------------------------------ the webhook
CLUSTER = [GPU_NODE.obj(), TEAM_A.obj(), MakeGPUResourceQuota().obj()]
WEBHOOK_CASES: list[tuple[str, Obj, str]] = [
    (
        "card.quota 5000 digits",
        TEAM_A.copy().card_quota(f'{{"NVIDIA-A100": {HUGE}}}').obj(),
        "volcano.sh/card.quota",
    ),
    ("card.quota of 200 KiB", TEAM_A.copy().card_quota(BIG).obj(), "... (204800 characters)"),
    ("card.quota nested 100000 deep", TEAM_A.copy().card_quota(DEEP).obj(), "nested more than 32 deep"),
    (
        "card.request 5000 digits",
        GROUP.copy().card_request(f'{{"NVIDIA-A100": {HUGE}}}').obj(),
        "volcano.sh/card.request",
    ),
    ("queue capability 5000 digits", MakeQueue("q").capability(cpu=HUGE).obj(), "capability"),
    ("pod cpu 5000 digits", MakePod().req(cpu=HUGE).obj(), "requests[cpu]"),
    ("pod cpu 1e999999", MakePod().req(cpu="1e999999").obj(), "requests[cpu]"),
    (
        "pod tflops 5000 digits",
        MakePod().gpus(1).annotation(ann.TF_TFLOPS_REQUEST, HUGE).obj(),
        ann.TF_TFLOPS_REQUEST,
    ),
    (
        "pod strategy weight 5000 digits",
        MakePod().annotation(ann.RESOURCE_STRATEGY_WEIGHT, f'{{"cpu": {HUGE}}}').obj(),
        ann.RESOURCE_STRATEGY_WEIGHT,
    ),
    ("pod card.name of 300000 characters", MakePod().gpus(1).card("A" * 300_000).obj(), ann.CARD_NAME),
    ("elastic quota min 5000 digits", MakeElasticQuota().min(cpu=HUGE).max(cpu="1").obj(), "spec.min"),
    (
        "gpu quota tflops 5000 digits",
        MakeGPUResourceQuota("other").total(requests={"tflops": HUGE}).obj(),
        "tflops",
    ),
]


def _review_body(obj: Obj) -> bytes:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    meta = obj["metadata"]
    request = {
        "uid": "u-1",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "name": meta["name"],
        "namespace": meta.get("namespace", ""),
        "operation": "CREATE",
        "object": obj,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


@pytest.mark.parametrize(("obj", "names"), [c[1:] for c in WEBHOOK_CASES], ids=[c[0] for c in WEBHOOK_CASES])
async def test_the_webhook_denies_a_poisoned_object_naming_the_field(obj: Obj, names: str) -> None:
    """The review path the server answers with (``Endpoints.answer``): a denial that names the field,
    at most 1 KiB, never the "internal error" of an exception (before issue 24: ValueError)."""
    metrics = WebhookMetrics()
    endpoints = Endpoints(Admission(StaticView(CLUSTER), admission_options(CONFIG)), metrics)
    answer = orjson.loads(await endpoints.answer(parse_review(_review_body(obj)), mutate=False, start=0.0))
    response = answer["response"]
    message = response["status"]["message"]
    assert response["allowed"] is False and names in message, message[:300]
    assert "internal error" not in message and len(message) <= MAX_MESSAGE
    assert metrics.errors._value.get() == 0
    # The mutating webhook answers too (it patches nothing it cannot read).
    mutated = orjson.loads(await endpoints.answer(parse_review(_review_body(obj)), mutate=True, start=0.0))
    assert mutated["response"]["uid"] == "u-1"
    assert metrics.errors._value.get() == 0


class _Broken:
    """An admitter with a bug whose message echoes what it was sent."""

    async def review(self, request: Any, *, mutate: bool) -> Any:
        raise RuntimeError("x" * 100_000)


async def test_an_error_of_the_webhooks_own_is_a_bounded_denial() -> None:
    metrics = WebhookMetrics()
    queue = MakeQueue("q" * 300).obj()
    answer = orjson.loads(
        await Endpoints(_Broken(), metrics).answer(parse_review(_review_body(queue)), mutate=False, start=0)
    )
    message = answer["response"]["status"]["message"]
    assert answer["response"]["allowed"] is False and message.startswith(
        "gpuq webhook internal error reviewing Queue"
    )
    assert (
        "... (307 characters)" in message
        and "RuntimeError: " + "x" * 200 + "... (100000 characters)" in message
    )
    assert len(message) <= MAX_MESSAGE and metrics.errors._value.get() == 1


# -------------------------------------------------------------------------- the readers and quoting
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"a": ' + HUGE + "}", "an integer of more than 64 digits"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ("[" * 33 + "]" * 33, "nested more than 32 deep"),
        (DEEP, "nested more than 32 deep"),
        ("x" * (256 * 1024 + 1), "at most 262144 characters"),
        ("{", "Expecting property name enclosed in double quotes"),
    ],
)
def test_json_text_past_the_limits_is_an_invalid_annotation(text: str, reason: str) -> None:
    with pytest.raises(InvalidAnnotation) as info:
        load_json_text(text, "volcano.sh/card.quota", "a JSON object", "Queue/q")
    message = str(info.value)
    assert message.startswith("Queue/q: volcano.sh/card.quota: invalid value ") and reason in message
    assert len(message) < 600
    assert load_json_text("[" * 32 + "]" * 32, "f", "x") is not None  # 32 deep is within the limit


@pytest.mark.parametrize("text", [HUGE, "-" + HUGE, TINY, "1e" + HUGE, "1e-" + HUGE, HUGE + "Gi", "1" * 65])
def test_quantities_past_the_limits_are_invalid_quantities(text: str) -> None:
    with pytest.raises(InvalidValue) as info:
        parse_quantity(text, "spec.capability.cpu")
    assert "spec.capability.cpu: invalid value" in str(info.value) and len(str(info.value)) < 600


def test_quantities_within_the_limits_are_read_exactly() -> None:
    assert parse_quantity("1" * 64) == int("1" * 64)
    assert parse_quantity("1e-0030") * 10**30 == 1
    assert parse_quantity("+1e+3") == 1000


def test_quote_is_bounded_states_the_size_and_never_raises() -> None:
    assert quote("short") == "'short'"
    assert quote({"b": 1, "a": 2}) == "{'b': 1, 'a': 2}"  # repr's order, not sorted
    assert quote(BIG) == repr("x" * MAX_QUOTED_CHARS) + "... (204800 characters)"
    assert quote(10**5000) == "1" + "0" * 19 + "... (5001 digits)"  # repr() would raise ValueError
    nested: list[Any] = []
    for _ in range(100_000):
        nested = [nested]
    assert quote(nested) == "[[[[[...]]]]]"  # repr() would raise RecursionError
    assert quote(list(range(10_000))).endswith("... (10000 entries)")
    assert cut("pg") == "pg" and cut("p" * 300) == "p" * MAX_QUOTED_CHARS + "... (300 characters)"
    message = str(InvalidValue("spec.x", "v" * 10_000, "a value"))
    assert len(message) < 300 and "(10000 characters)" in message


# ------------------------------------------------------------------- containment of gpuq's own bugs
class Faulty(EnqueuePlugin, PreFilterPlugin):
    """A plugin with a bug: anything named ``poison`` makes it raise (a stand-in for an unexpected
    exception in gpuq's own code, met on one object)."""

    name = "faulty"

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        handle.objects.subscribe(self._object)

    def _object(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind is kinds.QUEUE and name == "poison" and obj is not None:
            raise RuntimeError("bug met on a Queue")

    def enqueue(self, group: GroupInfo) -> Status:
        if group.name == "poison":
            raise KeyError("bug met on a PodGroup")
        return Status.success()

    def pre_filter(self, state: CycleState, pod: Any) -> Status:
        if pod.name == "poison":
            raise ZeroDivisionError("bug met on a Pod")
        return Status.success()


@dataclass(frozen=True)
class _PluginEntry:
    """A tier entry for a plugin the configuration file does not know (tests only)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    args: None = None
    switches: Mapping[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class _Settings:
    actions: Sequence[str]
    tiers: Sequence[Sequence[Any]]
    configurations: Mapping[str, Mapping[str, Any]]


def _faulty_harness() -> Harness:
    registry = default_registry()
    registry.register("faulty", Faulty)
    base = CONFIG
    tiers = [*base.tiers[:-1], [*base.tiers[-1], _PluginEntry("faulty")]]
    return harness(_Settings(base.actions, tiers, base.configurations), registry)


def test_an_error_of_gpuqs_own_is_contained_to_the_object_it_met(caplog: pytest.LogCaptureFixture) -> None:
    """Logged with the object and the traceback, counted, a Warning ``InternalError`` on the object,
    the object skipped; the healthy pod is still scheduled."""
    run = _faulty_harness()
    caplog.set_level(logging.ERROR)
    poison_queue = MakeQueue("poison").obj()
    poison_group = MakePodGroup("poison").queue("team-a").min_member(1).obj()
    run.apply(GPU_NODE.obj(), poison_queue, poison_group, POISON.obj(), HEALTHY.obj())
    run.run()
    assert run.backend.bindings == {"ns/healthy": "gpu"}
    assert sorted(run.contained) == ["Pod", "PodGroup", "Queue"]
    for ref, raised in (
        ("Queue/poison", "RuntimeError: 'bug met on a Queue'"),
        ("PodGroup/ns/poison", "KeyError: \"'bug met on a PodGroup'\""),
        ("Pod/ns/poison", "ZeroDivisionError: 'bug met on a Pod'"),
    ):
        warnings = run.warnings(ref)
        assert [r for r, _ in warnings] == [INTERNAL_ERROR], warnings
        assert raised in warnings[0][1] and "an error in gpuq" in warnings[0][1]
        logged = [r for r in caplog.records if ref in r.getMessage()]
        assert logged and logged[0].exc_info is not None, ref
    # The PodGroup is not tried again (one Warning, not one per enqueue round) until it changes.
    run.run()
    run.run()
    assert len(run.warnings("PodGroup/ns/poison")) == 1
    assert run.scheduler.podgroups.enqueue_refusals["ns/poison"].endswith("an error in gpuq (KeyError)")
    changed = MakePodGroup("poison").queue("team-a").min_member(2).obj()
    run.feed.apply(Change("update", ("ns", "poison"), changed, poison_group))
    run.run()
    assert len(run.warnings("PodGroup/ns/poison")) == 2


def test_the_metric_counts_contained_errors_by_kind() -> None:
    metrics = SchedulerMetrics()
    run = _faulty_harness()
    run.scheduler.contain.counted = lambda kind: metrics.internal_errors.labels(kind).inc()
    run.apply(GPU_NODE.obj(), POISON.obj())
    run.run()
    assert metrics.registry.get_sample_value("gpuq_scheduler_internal_errors_total", {"kind": "Pod"}) == 1


class _Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.status = 200
        self._body = json.dumps(body).encode()

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class ListApi:
    """Answers an informer's list with ``items`` (one page)."""

    def __init__(self, items: Sequence[Obj]) -> None:
        self.items = items

    async def call_api(self, *_: Any, **__: Any) -> _Response:
        return _Response({"metadata": {"resourceVersion": "1"}, "items": self.items})


async def test_the_replay_at_start_up_survives_poisoned_objects_and_errors_of_its_own() -> None:
    """``Feed.replay`` after the first lists (every start, every replica): a 5,000-digit amount and
    a bug met on one object each cost that object only; before issue 24 the replay raised and the
    process exited, again after every restart."""
    run = _faulty_harness()
    lists = {
        kinds.NODE: [GPU_NODE.obj()],
        kinds.QUEUE: [
            TEAM_A.copy().card_quota(f'{{"NVIDIA-A100": {HUGE}}}').obj(),
            MakeQueue("poison").obj(),
        ],
        kinds.POD_GROUP: [GROUP.copy().card_request(f'{{"NVIDIA-A100": {HUGE}}}').obj()],
        kinds.POD: [HEALTHY.obj(), POISON.copy().req(cpu=HUGE).obj()],
    }
    informers = []
    for kind, items in lists.items():
        informer = Informer(ListApi(items), kind)
        await informer._list()
        informers.append(informer)
    run.feed.replay(InformerSet(informers))
    assert run.feed.ready
    run.run()
    assert run.backend.bindings == {"ns/healthy": "gpu"}
    assert run.contained == ["Queue"]
    assert {e.obj for e in run.backend.events if e.type == "Warning"} >= {
        "Queue/team-a",
        "Queue/poison",
        "PodGroup/ns/pg",
        "Pod/ns/poison",
    }


def test_a_bound_pod_whose_requests_change_on_a_node_not_seen_keeps_counting() -> None:
    """Found by the fuzzer: re-counting a pod on a ghost row (its node not seen) freed the row under
    it, and the pod's delete then raised KeyError."""
    state = ClusterState()
    pod = MakePod().node("ghost").phase("Running")
    assert state.add_pod(pod.info())
    assert state.add_pod(pod.copy().req(cpu="1").info())  # resized in place
    assert state.has_row("ghost") and state.pods["ns/p"].requests == pod.copy().req(cpu="1").info().requests
    assert state.remove_pod("ns/p") is not None
    assert not state.has_row("ghost")


# ------------------------------------------------------------------------------------ certificates
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize("stamp", ["2026-01-01T00:00:00", "2026-01-01 00:00:00", "2026-01-01"])
def test_a_ca_changed_at_without_a_timezone_is_read_as_utc(stamp: str) -> None:
    """Before issue 24 such a value made every renewal tick of a rollover raise TypeError."""
    policy = RenewalPolicy()
    old, incoming = create_ca("old", now=T0), create_ca("new", now=T0)
    secret = secret_of_authorities("gpuq-system", "ca", Authorities(old, T0, incoming=incoming))
    secret["metadata"]["annotations"][CHANGED_AT] = stamp
    authorities = authorities_from_secret(secret, "Secret/gpuq-system/ca")
    assert authorities.changed_at == T0 and authorities.changed_at.tzinfo is not None
    # One grace later the new CA signs: the rollover goes on.
    step = next_authorities(authorities, None, T0 + policy.grace, policy, lambda: create_ca("unused", now=T0))
    assert step.authorities.signing.certificate == incoming.certificate and step.reason
    assert Authorities(old, dt.datetime(2026, 1, 1)).changed_at == T0  # the naive case


@pytest.mark.parametrize("stamp", ["yesterday", "x" * 200_000, "2026-13-01T00:00:00Z"])
def test_a_ca_changed_at_that_is_no_time_is_refused_naming_it(stamp: str) -> None:
    old = create_ca("old", now=T0)
    secret = secret_of_authorities("gpuq-system", "ca", Authorities(old, T0))
    secret["metadata"]["annotations"][CHANGED_AT] = stamp
    with pytest.raises(InvalidValue) as info:
        authorities_from_secret(secret, "Secret/gpuq-system/ca")
    message = str(info.value)
    assert message.startswith(f"Secret/gpuq-system/ca {CHANGED_AT}: invalid value ")
    assert "expected an RFC 3339 time" in message and len(message) < 400


# ------------------------------------------------------------------- configuration and manifests
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('actions: "enqueue, allocate"\nweight: ' + HUGE, "Exceeds the limit (4300 digits)"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_a_configuration_past_pythons_limits_is_a_config_error(text: str, reason: str) -> None:
    """The ConfigMap both processes read: before issue 24 a ValueError or RecursionError traceback."""
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.from_yaml(text)
    assert str(info.value).startswith(
        "config: invalid value '<yaml>': expected valid YAML within gpuq's limits"
    )
    assert reason in str(info.value)


def test_simulate_reports_a_manifest_past_pythons_limits_in_one_line(tmp_path: Path) -> None:
    manifest = tmp_path / "node.yaml"
    manifest.write_text(
        f"apiVersion: v1\nkind: Node\nmetadata: {{name: n}}\nstatus: {{allocatable: {{cpu: {HUGE}}}}}\n"
    )
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 100_000)
    docs, errors = read([str(manifest), str(deep)])
    assert docs == []
    assert errors == [
        f"{manifest}: invalid YAML: Exceeds the limit (4300 digits) for integer string conversion:"
        " value has 5001 digits",
        f"{deep}:1: invalid YAML: exceeded maximum nesting depth",
    ]


def test_a_ratchet_tells_two_long_values_apart_that_read_alike() -> None:
    """Messages quote a long value cut (its first 200 characters and its length), so two different
    long values read alike: the UPDATE ratchet (design.md Semantics 13) compares the values
    themselves, and a new malformed value is refused, while the old one unchanged is let be."""
    old_value, new_value = "x" * 299 + "a", "x" * 299 + "b"
    invalid = MakeElasticQuota().min(cpu=old_value).max(cpu="2")
    changed = invalid.copy().min(cpu=new_value).obj()
    assert str(validate(kinds.ELASTIC_QUOTA, "CREATE", changed, StaticView())).count("(300 characters)")
    refused = validate(kinds.ELASTIC_QUOTA, "UPDATE", changed, StaticView(), old=invalid.obj())
    assert not refused.allowed and "spec.min" in refused.message, refused
    kept = validate(
        kinds.ELASTIC_QUOTA, "UPDATE", invalid.copy().max(cpu="3").obj(), StaticView(), old=invalid.obj()
    )
    assert kept.allowed, kept.message


@pytest.mark.parametrize("status", [7, ["Open"], "Open"])
def test_a_status_that_is_no_mapping_costs_nothing_when_statuses_are_synced(status: Any) -> None:
    """Found by the long fuzz run (``python -m tests.fuzz``, feed, seed 1000): a Queue whose status is
    a number, a list or a string reached capacity-card's status source at the status sync, whose
    ``dict(...)`` raised out of the loop. Every reader of a status now takes it through
    ``wire.section`` (empty when it is no mapping). The fuzz boundary's own check, on that case."""
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q", "uid": "q", "resourceVersion": "1", "annotations": {ann.CARD_QUOTA: ""}},
        "spec": {},
        "status": {},
    }
    # Added, then updated in its status only (kept without waking anything: a status is no input).
    fuzz_boundaries.check_feed(([queue, {**queue, "status": status}], []))
