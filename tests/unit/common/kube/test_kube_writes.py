"""Writes to the API against a scripted API client (no server): what a bind's answer becomes
(common/kube/binding.py, scheduler/kube/backend.py) and per-object backoff of status writes
(common/kube/status.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from gpuq_k8s.common.kube import binding
from gpuq_k8s.common.kube.client import GatedClient
from gpuq_k8s.common.kube.events import EventRecorder
from gpuq_k8s.common.kube.status import StatusWriter
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.backend import Outcome, Result
from gpuq_k8s.scheduler.kube import backend as kube_backend
from gpuq_k8s.scheduler.kube.backend import KubeBackend
from tests.testing.builders import MakePod
from tests.testing.clock import FakeClock
from tests.testing.scripted_api import Response

Answer = tuple[int, dict[str, Any]] | BaseException
Handler = Callable[[str, str], Answer]


class FakeApi:
    """Answers each request with ``handler(method, path)``; records (method, path)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[tuple[str, str]] = []

    async def call_api(self, path: str, method: str, **_: Any) -> Response:
        self.requests.append((method, path))
        answer = self.handler(method, path)
        if isinstance(answer, BaseException):
            raise answer
        return Response(*answer)


POD_PATH = "/api/v1/namespaces/ns/pods/p"


def pod_body(node: str = "", uid: str = "uid-p", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


def scripted(post: Answer, *gets: Answer) -> FakeApi:
    """POST answers ``post``; the GETs answer ``gets`` in turn (the last one repeats)."""
    answers = list(gets)

    def handler(method: str, path: str) -> Answer:
        if method == "POST":
            return post
        return answers.pop(0) if len(answers) > 1 else answers[0]

    return FakeApi(handler)


def bind(api: FakeApi) -> binding.BindResult:
    return asyncio.run(binding.bind(api, "ns", "p", "uid-p", "n1"))


CONFLICT = (409, {"message": "pod p is already assigned"})
UNAVAILABLE = (503, {"message": "etcdserver: request timed out"})


def test_a_bind_accepted_is_bound_without_a_read() -> None:
    api = scripted((201, {}))
    assert bind(api).bound_to == "n1"
    assert api.requests == [("POST", POD_PATH + "/binding")]


def test_404_is_gone_without_a_read() -> None:
    api = scripted((404, {"message": 'pods "p" not found'}))
    found = bind(api)
    assert found.gone and "not found" in found.message
    assert [m for m, _ in api.requests] == ["POST"]


def test_a_bind_the_leadership_gate_refused_was_never_sent() -> None:
    api = scripted((201, {}))
    gated = GatedClient(api, lambda: False)
    found = asyncio.run(binding.bind(gated, "ns", "p", "uid-p", "n1"))
    assert (found.bound_to, found.gone, found.unknown) == ("", False, False)
    assert "not the leader" in found.message and api.requests == []


def test_a_refused_bind_certainly_did_not_happen() -> None:
    api = scripted((403, {"message": "forbidden"}))
    found = bind(api)
    assert (found.bound_to, found.gone, found.unknown) == ("", False, False)
    assert [m for m, _ in api.requests] == ["POST"]


@pytest.mark.parametrize(
    ("post", "get", "expected"),
    [
        (CONFLICT, (200, pod_body("n1")), ("n1", False, False)),  # an earlier bind of ours landed
        (CONFLICT, (200, pod_body("n2")), ("n2", False, False)),  # bound elsewhere
        (CONFLICT, (200, pod_body("n1", uid="other")), ("", True, False)),  # re-created: ours is gone
        (UNAVAILABLE, (200, pod_body("n1")), ("n1", False, False)),  # the 503'd bind stood
        (UNAVAILABLE, (200, pod_body()), ("", False, False)),  # it did not happen
        (UNAVAILABLE, (404, {}), ("", True, False)),  # deleted meanwhile
        (UNAVAILABLE, (200, pod_body(deleting=True)), ("", True, False)),  # deleting: never bound
        (TimeoutError(), (200, pod_body("n1")), ("n1", False, False)),  # timed out, yet bound
        (TimeoutError(), TimeoutError(), ("", False, True)),  # nobody answers: unknown
        (ConnectionResetError(104, "reset"), (200, pod_body("n1")), ("n1", False, False)),  # lost: read
        (UNAVAILABLE, (500, {}), ("", False, True)),
    ],
)
def test_an_unclear_answer_is_settled_by_reading_the_pod(
    post: Answer, get: Answer, expected: tuple[str, bool, bool]
) -> None:
    api = scripted(post, get)
    found = bind(api)
    assert (found.bound_to, found.gone, found.unknown) == expected
    assert [m for m, _ in api.requests] == ["POST", "GET"]
    assert found.conflict is (post == CONFLICT)


def kube_backend_for(api: FakeApi, **kw: Any) -> KubeBackend:
    return KubeBackend(
        api,
        events=EventRecorder(api, controller="test", instance="test"),
        statuses=StatusWriter(api, {}, lambda *a: None),
        **kw,
    )


POD = MakePod("p").uid("uid-p").req(cpu="1").node("n1")


def run_bind(backend: KubeBackend, pod: PodInfo) -> Outcome:
    outcomes: list[Outcome] = []

    async def go() -> None:
        backend.bind(pod, "n1", outcomes.append)
        while backend.in_flight:
            await asyncio.sleep(0)

    asyncio.run(go())
    (outcome,) = outcomes
    return outcome


@pytest.mark.parametrize(
    ("post", "get", "result"),
    [
        ((201, {}), None, Result.DONE),
        ((404, {}), None, Result.GONE),
        (CONFLICT, (200, pod_body("n1")), Result.DONE),
        (CONFLICT, (200, pod_body("n2")), Result.ELSEWHERE),
        (UNAVAILABLE, (200, pod_body()), Result.NOT_BOUND),
    ],
)
def test_the_backend_reports_each_outcome(post: Answer, get: Answer | None, result: Result) -> None:
    """And only a pod still there and unbound may get the PodScheduled=False recorded before."""
    bound: list[str] = []
    api = scripted(post, get or (500, {}))
    backend = kube_backend_for(api, on_bound=bound.append)
    backend.set_pod_condition(POD.info(), "Unschedulable", "an earlier attempt failed")
    assert run_bind(backend, POD.info()).result is result
    assert bound == (["ns/p"] if result is Result.DONE else [])
    asyncio.run(backend.flush())
    condition_writes = [path for method, path in api.requests if method == "PATCH"]
    assert condition_writes == ([POD_PATH + "/status"] if result is Result.NOT_BOUND else [])


BOUND_POD_REFUSES_NOMINATION = (
    422,
    {
        "kind": "Status",
        "status": "Failure",
        "reason": "Invalid",
        "code": 422,
        "message": 'Pod "p" is invalid: status.nominatedNodeName: Forbidden: may not be set on pods '
        "that are already bound to a node",
    },
)


@pytest.mark.parametrize(("now_bound_to", "warned"), [("n1", False), ("", True)])
def test_a_condition_refused_because_our_bind_landed_first_is_no_warning(
    now_bound_to: str, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A nomination queued before the pod's bind and sent after it is refused (422): the pod is read,
    and bound means the condition no longer applies (a DEBUG line); any other refusal is a WARNING."""

    def handler(method: str, path: str) -> Answer:
        return BOUND_POD_REFUSES_NOMINATION if method == "PATCH" else (200, pod_body(now_bound_to))

    api = FakeApi(handler)
    backend = kube_backend_for(api)
    backend.set_pod_condition(POD.info(), "Unschedulable", "preempting", nominated_node="n1")
    with caplog.at_level("DEBUG", logger=kube_backend.__name__):
        asyncio.run(backend.flush())
    assert [m for m, _ in api.requests] == ["PATCH", "GET"]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert bool(warnings) is warned, caplog.records
    if not warned:
        assert any("bound meanwhile" in r.getMessage() for r in caplog.records)


def test_an_unknown_outcome_keeps_reading_the_pod_until_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """No timer settles it: reads fail twice, the third says the bind stood."""
    monkeypatch.setattr(kube_backend, "UNKNOWN_FIRST_READ", 0.001)
    api = scripted(TimeoutError(), TimeoutError(), (503, {}), TimeoutError(), (200, pod_body("n1")))
    assert run_bind(kube_backend_for(api), POD.info()).result is Result.DONE
    assert [m for m, _ in api.requests] == ["POST", "GET", "GET", "GET", "GET"]


def test_no_bind_is_sent_for_a_pod_the_watch_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its delete observed (or a deletionTimestamp): the pod is never bound afterwards."""
    api = scripted((201, {}))
    backend = kube_backend_for(api, settled=lambda pod, node: Result.GONE)
    assert run_bind(backend, POD.info()).result is Result.GONE
    assert api.requests == []


def test_an_unknown_outcome_is_settled_by_the_watch_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_backend, "UNKNOWN_FIRST_READ", 0.001)
    api = scripted(TimeoutError(), TimeoutError())
    answers: list[Result | None] = [None, Result.GONE]  # before the bind; then the watch's delete
    backend = kube_backend_for(api, settled=lambda pod, node: answers.pop(0))
    assert run_bind(backend, POD.info()).result is Result.GONE
    assert [m for m, _ in api.requests] == ["POST", "GET"]


def test_status_writes_back_off_per_object() -> None:
    """One Queue whose /status patch keeps failing is retried on its own backoff; the others' writes
    go out at every flush."""
    api = FakeApi(lambda method, path: (422, {"message": "invalid"}) if "/bad/" in path else (200, {}))
    clock = FakeClock()
    writer = StatusWriter(
        api, {kinds.QUEUE.kind: kinds.QUEUE}, lambda *a: {}, backoff=(1.0, 8.0), clock=clock
    )

    def flush_all(value: int) -> list[str]:
        for name in ("bad", "good", "other"):
            writer.put("Queue", "", name, {"allocated": {"cpu": str(value)}})
        api.requests.clear()
        asyncio.run(writer.flush())
        return sorted(path.split("/")[-2] for _, path in api.requests)

    assert flush_all(1) == ["bad", "good", "other"]
    clock.now += 0.5  # inside bad's backoff: the others are written anyway
    assert flush_all(2) == ["good", "other"]
    assert writer.pending == 1  # bad's latest wish is kept
    clock.now += 0.6  # bad's first backoff (1 s) is over
    assert flush_all(3) == ["bad", "good", "other"]
    clock.now += 1.5  # its second backoff is 2 s
    assert flush_all(4) == ["good", "other"]
    assert writer.failures == 2 and writer.writes == 8


def test_a_status_write_finds_its_object_gone_or_gets_no_answer() -> None:
    """NotFound: the object is gone, the wish is dropped (no failure, no retry); no answer (a
    TransportError, whichever client): kept and retried after its backoff."""
    answers: dict[str, Answer] = {
        "gone": (404, {"message": 'queues "gone" not found'}),
        "cut": OSError(104, "reset"),
    }
    api = FakeApi(lambda method, path: answers.get(path.split("/")[-2], (200, {})))
    clock = FakeClock()
    writer = StatusWriter(
        api, {kinds.QUEUE.kind: kinds.QUEUE}, lambda *a: {}, backoff=(1.0, 8.0), clock=clock
    )
    for name in ("gone", "cut", "fine"):
        writer.put("Queue", "", name, {"allocated": {"cpu": "1"}})
    assert asyncio.run(writer.flush()) == 1
    assert (writer.writes, writer.failures, writer.pending) == (1, 1, 1)  # only "cut" is kept
    clock.now += 1.1
    del answers["cut"]
    api.requests.clear()
    assert asyncio.run(writer.flush()) == 1
    assert [path.split("/")[-2] for _, path in api.requests] == ["cut"] and writer.pending == 0


class HangingApi(FakeApi):
    """A POST that is sent and never answered (an apiserver too slow for the shutdown's wait)."""

    async def call_api(self, path: str, method: str, **kw: Any) -> Response:
        if method == "POST":
            self.requests.append((method, path))
            await asyncio.Event().wait()
        return await super().call_api(path, method, **kw)


@pytest.mark.parametrize(("api_class", "answered"), [(FakeApi, True), (HangingApi, False)])
def test_drain_says_whether_every_write_was_answered(api_class: type[FakeApi], answered: bool) -> None:
    """The shutdown hands the Lease over only when drain answers True: a bind given up after the
    wait may still land, after the next leader listed (scheduler/service.py)."""
    api = api_class(lambda method, path: (201, {}))
    backend = kube_backend_for(api)

    async def go() -> bool:
        backend.bind(POD.info(), "n1", lambda outcome: None)
        await asyncio.sleep(0)
        return await backend.drain(timeout=0.2)

    assert asyncio.run(go()) is answered
    assert ("POST", "/api/v1/namespaces/ns/pods/p/binding") in api.requests


def test_a_podgroup_without_the_status_subresource_gets_its_status_on_the_object() -> None:
    """Volcano's own PodGroup CRD declares no status subresource (``subresources: {}``): PATCH
    .../status is a 404 while the object exists. The status is then patched on the object (as
    Volcano's scheduler updates the whole PodGroup), and the next writes go there at once; a Queue's
    404 still means it is gone."""
    group = kinds.POD_GROUP.object_path("ns", "pg")
    api = FakeApi(
        lambda method, path: (404, {"message": "not found"}) if path.endswith("/status") else (200, {})
    )
    writer = StatusWriter(api, {k.kind: k for k in (kinds.POD_GROUP, kinds.QUEUE)}, lambda *a: {})
    writer.put("PodGroup", "ns", "pg", {"phase": "Inqueue"})
    writer.put("Queue", "", "q", {"allocated": {"cpu": "1"}})
    assert asyncio.run(writer.flush()) == 1
    assert sorted(api.requests) == [
        ("PATCH", group),
        ("PATCH", group + "/status"),
        ("PATCH", kinds.QUEUE.object_path("", "q") + "/status"),
    ]
    api.requests.clear()
    writer.put("PodGroup", "ns", "pg", {"phase": "Running"})
    assert asyncio.run(writer.flush()) == 1
    assert api.requests == [("PATCH", group)]
