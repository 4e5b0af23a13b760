"""The pure parts of the cluster writers: merge patches, Binding and condition bodies, Event
aggregation, Lease records and timings (common/kube/{status,binding,events,leader}.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuq_k8s.common.kube.binding import binding_body, condition_patch
from gpuq_k8s.common.kube.events import EventRecorder, event_body, micro_time
from gpuq_k8s.common.kube.leader import LeaseTimings, lease_spec
from gpuq_k8s.common.kube.status import merge_patch, status_patch
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.errors import ConfigError
from gpuq_k8s.common.model.wire import split_ref
from tests.testing.clock import FakeClock
from tests.testing.scripted_api import Response, apply_merge_patch


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({}, {}, {}),
        ({"used": {"cpu": "2"}}, {"used": {"cpu": "2"}}, {}),
        ({"used": {"cpu": "2"}}, {"used": {"cpu": "4"}}, {"used": {"cpu": "4"}}),
        # A resource whose usage dropped to zero must disappear, not stay stale.
        ({"used": {"cpu": "2", "memory": "1Gi"}}, {"used": {"cpu": "2"}}, {"used": {"memory": None}}),
        ({"a": [1, 2]}, {"a": [1]}, {"a": [1]}),
        ({"a": 1}, {}, {"a": None}),
    ],
)
def test_merge_patch_table(old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]) -> None:
    assert merge_patch(old, new) == patch
    assert apply_merge_patch(old, patch) == new


json_values = st.recursive(
    st.one_of(st.integers(), st.text(max_size=3), st.booleans()),
    lambda inner: st.dictionaries(st.sampled_from("abcd"), inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(st.sampled_from("abcd"), json_values, max_size=4)


@given(json_objects, json_objects)
def test_merge_patch_applied_gives_the_new_object(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert apply_merge_patch(old, merge_patch(old, new)) == new


def test_status_patch_leaves_keys_of_other_writers_alone() -> None:
    """A Queue's ``state`` belongs to its owner; gpuq only owns ``allocated``."""
    seen = {"state": "Open", "allocated": {"cpu": "2", "NVIDIA-A100": "1"}}
    wanted = {"allocated": {"cpu": "4"}}
    patch = status_patch(seen, wanted)
    assert patch == {"allocated": {"cpu": "4", "NVIDIA-A100": None}}
    assert apply_merge_patch(seen, patch) == {"state": "Open", "allocated": {"cpu": "4"}}
    assert status_patch(seen, {"allocated": seen["allocated"]}) == {}


@pytest.mark.parametrize(
    ("kind", "namespace", "path"),
    [
        (kinds.QUEUE, "", "/apis/scheduling.volcano.sh/v1beta1/queues/q"),
        (kinds.ELASTIC_QUOTA, "ns", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/elasticquotas/q"),
    ],
)
def test_object_path(kind: Any, namespace: str, path: str) -> None:
    assert kind.object_path(namespace, "q") == path


def test_binding_carries_the_pod_uid_as_precondition() -> None:
    body = binding_body("ns", "p", "uid-1", "n1")
    assert body["metadata"] == {"name": "p", "namespace": "ns", "uid": "uid-1"}
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}


def test_condition_patch_is_kube_schedulers_pod_scheduled_false() -> None:
    patch = condition_patch("Unschedulable", "0/1 nodes are available: 1 cpu quota exceeded.", "n2")
    (condition,) = patch["status"]["conditions"]
    assert condition["type"] == "PodScheduled"
    assert condition["status"] == "False"
    assert condition["reason"] == "Unschedulable"
    assert condition["message"] == "0/1 nodes are available: 1 cpu quota exceeded."
    assert patch["status"]["nominatedNodeName"] == "n2"
    assert "nominatedNodeName" not in condition_patch("Unschedulable", "m")["status"]


def test_event_body_is_events_k8s_io_v1() -> None:
    body = event_body(
        "Pod/ns/p",
        "Warning",
        "FailedScheduling",
        "x" * 2000,
        at=0.0,
        controller="gpuq-scheduler",
        instance="host_1",
        resolve=lambda ref: ("v1", "uid-1"),
    )
    assert body["apiVersion"] == "events.k8s.io/v1"
    assert body["metadata"]["namespace"] == "ns"
    assert body["metadata"]["name"].startswith("p.")
    assert body["regarding"] == {
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "apiVersion": "v1",
        "uid": "uid-1",
    }
    assert body["eventTime"] == "1970-01-01T00:00:00.000000Z"
    assert len(body["note"]) == 1024  # the API's limit
    assert (body["reportingController"], body["reportingInstance"], body["action"]) == (
        "gpuq-scheduler",
        "host_1",
        "Scheduling",
    )


def test_events_about_cluster_scoped_objects_go_to_default() -> None:
    body = event_body("Queue/q", "Warning", "R", "n", at=0.0, controller="c", instance="i")
    assert body["metadata"]["namespace"] == "default"
    assert "namespace" not in body["regarding"]
    assert body["regarding"]["kind"] == "Queue" and body["regarding"]["name"] == "q"
    assert split_ref("Queue/q") == ("Queue", "", "q")
    assert split_ref("Node/n1") == ("Node", "", "n1")
    assert split_ref("Pod/ns/p") == ("Pod", "ns", "p")


def test_repeated_events_aggregate_into_one_series() -> None:
    clock = FakeClock(1000.0)
    recorder = EventRecorder(None, controller="c", instance="i", clock=clock, forget_after=360.0)
    for i in range(100):
        clock.now += 1
        recorder.record("Pod/ns/p", "Warning", "FailedScheduling", f"attempt {i}")
    assert recorder.count("Pod/ns/p", "FailedScheduling") == 100
    assert len(recorder._series) == 1
    (series,) = recorder._series.values()
    assert series.note == "attempt 99"
    # A different reason is another series; a long silence starts a fresh one.
    recorder.record("Pod/ns/p", "Normal", "Scheduled", "ok")
    assert len(recorder._series) == 2
    clock.now += 1000
    recorder.record("Pod/ns/p", "Warning", "FailedScheduling", "again")
    assert recorder.count("Pod/ns/p", "FailedScheduling") == 1
    recorder.forget("Pod/ns/p")
    assert recorder.count("Pod/ns/p", "FailedScheduling") == 0


class EventStore:
    """Events as kube-apiserver keeps them: created by POST, merge-patched, ``note`` immutable."""

    def __init__(self) -> None:
        self.events: dict[str, dict[str, Any]] = {}

    async def call_api(self, path: str, method: str, **kwargs: Any) -> Response:
        body = kwargs.get("body") or {}
        if method == "POST":
            self.events[body["metadata"]["name"]] = dict(body)
            return Response(201, body)
        name = path.rsplit("/", 1)[1]
        patched = apply_merge_patch(self.events[name], body)
        if patched.get("note") != self.events[name].get("note"):
            return Response(422, {"kind": "Status", "code": 422, "message": "note: field is immutable"})
        self.events[name] = patched
        return Response(200, patched)


def test_a_changed_note_is_a_new_event_not_a_refused_patch() -> None:
    """The day in the life logged 710 "field is immutable" refusals in three minutes: series were
    patched with their latest note. Unchanged notes are counted on the Event; a new note makes a
    new Event (the reason for waiting changed)."""
    clock = FakeClock(1000.0)
    store = EventStore()
    recorder = EventRecorder(store, controller="c", instance="i", clock=clock, series_interval=0.0)

    def record(note: str) -> None:
        clock.now += 1
        recorder.record("Pod/ns/p", "Warning", "FailedScheduling", note)
        asyncio.run(recorder.flush())

    record("available 1")
    record("available 1")
    record("available 1")
    record("available 3")
    record("available 3")
    assert recorder.dropped == 0 and recorder.created == 2 and recorder.patched == 3
    notes = sorted((e["note"], (e.get("series") or {}).get("count", 1)) for e in store.events.values())
    assert notes == [("available 1", 3), ("available 3", 2)]


class StrictEventStore(EventStore):
    """As :class:`EventStore`, with kube-apiserver's series rule (a series counts at least 2), names
    unique (AlreadyExists), and POSTs held at ``gate`` while it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.refused: list[str] = []

    async def call_api(self, path: str, method: str, **kwargs: Any) -> Response:
        body = kwargs.get("body") or {}
        if method == "POST":
            if self.gate is not None:
                await self.gate.wait()
            if body["metadata"]["name"] in self.events:
                self.refused.append("AlreadyExists")
                return Response(409, {"kind": "Status", "code": 409, "message": "already exists"})
        else:
            count = (body.get("series") or {}).get("count")
            if count is not None and count < 2:
                self.refused.append("series.count")
                return Response(422, {"kind": "Status", "code": 422, "message": "series.count"})
        return await super().call_api(path, method, **kwargs)


def test_overlapping_flushes_write_each_series_once_at_a_time() -> None:
    """A flush while the previous one still writes a series (a note change's new Event in flight)
    leaves that series to the write in flight: no second create, no patch of a count below 2."""

    async def scenario() -> tuple[StrictEventStore, EventRecorder]:
        clock = FakeClock(1000.0)
        store = StrictEventStore()
        recorder = EventRecorder(store, controller="c", instance="i", clock=clock, series_interval=0.0)

        def record(note: str) -> None:
            clock.now += 1
            recorder.record("Pod/ns/p", "Warning", "FailedScheduling", note)

        record("a")
        await recorder.flush()
        record("a")
        await recorder.flush()  # the series: count 2
        record("b")  # a new note: a new Event
        store.gate = asyncio.Event()
        first = asyncio.create_task(recorder.flush())
        await asyncio.sleep(0.01)  # its POST is held
        record("b")
        second = asyncio.create_task(recorder.flush())
        await asyncio.sleep(0.01)
        store.gate.set()
        await asyncio.gather(first, second)
        await recorder.flush()  # what the held write left dirty
        record("b")
        await recorder.flush()
        return store, recorder

    store, recorder = asyncio.run(scenario())
    assert store.refused == []
    assert recorder.dropped == 0
    notes = sorted((e["note"], (e.get("series") or {}).get("count", 1)) for e in store.events.values())
    assert notes == [("a", 2), ("b", 3)]


def test_micro_time() -> None:
    assert micro_time(1.5) == "1970-01-01T00:00:01.500000Z"


def test_lease_spec_takeover_and_renewal() -> None:
    fresh = lease_spec("a", 15, 0.0, None)
    assert fresh["holderIdentity"] == "a"
    assert fresh["leaseTransitions"] == 0
    assert fresh["leaseDurationSeconds"] == 15
    renewed = lease_spec("a", 15, 10.0, fresh)
    assert renewed["acquireTime"] == fresh["acquireTime"]
    assert renewed["renewTime"] != fresh["renewTime"]
    assert renewed["leaseTransitions"] == 0
    taken = lease_spec("b", 15, 20.0, renewed)
    assert taken["holderIdentity"] == "b"
    assert taken["leaseTransitions"] == 1
    assert taken["acquireTime"] == taken["renewTime"]


@pytest.mark.parametrize(
    ("timings", "field"),
    [
        (LeaseTimings(15, 10, 0), "--leader-elect-retry-period"),
        (LeaseTimings(15, 2, 2), "--leader-elect-renew-deadline"),
        (LeaseTimings(10, 10, 2), "--leader-elect-lease-duration"),
    ],
)
def test_lease_timings_are_validated_like_client_go(timings: LeaseTimings, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        timings.validate()
    assert err.value.field == field


def test_default_lease_timings_are_valid() -> None:
    LeaseTimings().validate()
    LeaseTimings(3, 2, 0.5).validate()
