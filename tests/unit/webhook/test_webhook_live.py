"""Issue 12, honest readiness (Semantics 13): ``/readyz`` follows the watches, not the first sync, and a
decision that needs an object the cache has not seen yet reads it live once before refusing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gpuq_k8s.common.kube.errors import Gone, ServerError
from gpuq_k8s.common.kube.informer import Informer, InformerSet
from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model import kinds
from gpuq_k8s.webhook import jsonpatch
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.cluster import InformerView
from gpuq_k8s.webhook.review import AdmissionRequest
from tests.testing.builders import MakePod, MakePodGroup, MakeQueue

# ------------------------------------------------------------------ informer readiness


async def _step() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# (A silent watch, Inactive, is re-established without a list: tests/unit/common/kube/test_kube_informer.py.)
@pytest.mark.parametrize(
    "failure",
    [ServerError(500, "InternalError", "boom"), Gone(410, "Expired", "too old")],
    ids=["error", "gone"],
)
async def test_an_informer_is_watching_only_between_a_list_and_the_next_failure(failure: Exception) -> None:
    inf = Informer(None, kinds.QUEUE, backoff=(0.0, 0.0))
    lists = 0
    list_gate = asyncio.Event()
    watch_gate = asyncio.Event()
    seen: list[tuple[str, bool]] = []

    async def fake_list() -> None:
        nonlocal lists
        lists += 1
        if lists == 2:
            await list_gate.wait()  # the re-list after the failure is slow
        seen.append(("list", inf.watching))
        inf.watching = True  # what Informer._list does on success
        inf.synced.set()

    async def fake_watch() -> None:
        await watch_gate.wait()
        watch_gate.clear()
        raise failure

    inf._list = fake_list  # type: ignore[method-assign]
    inf._watch = fake_watch  # type: ignore[method-assign]
    task = asyncio.create_task(inf.run())
    try:
        await _step()
        assert inf.watching and inf.synced.is_set()
        watch_gate.set()  # the watch breaks
        await _step()
        assert not inf.watching, "still reported live while re-listing after the watch broke"
        assert inf.synced.is_set()  # synced stays set: it is not the readiness signal
        list_gate.set()
        await _step()
        assert inf.watching and lists == 2
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not inf.watching
    assert seen == [("list", False), ("list", False)]


async def test_real_list_sets_watching_and_a_set_is_live_only_when_all_are() -> None:
    class Api:
        async def call_api(self, *_: Any, **__: Any) -> Any:
            return _Response(200, {"metadata": {"resourceVersion": "7"}, "items": []})

    queues, nodes = Informer(Api(), kinds.QUEUE), Informer(Api(), kinds.NODE)
    informers = InformerSet([queues, nodes])
    assert not informers.watching
    await queues._list()
    assert queues.watching and not informers.watching
    await nodes._list()
    assert informers.watching and informers.synced
    nodes.watching = False
    assert not informers.watching and informers.synced


# ------------------------------------------------------------------ live reads before refusing


class _Response:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self._body = json.dumps(body).encode()

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class FakeApi:
    """Answers GETs of single objects from ``objects`` (path -> object); 404 otherwise."""

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.paths: list[str] = []

    async def call_api(self, path: str, method: str, **_: Any) -> _Response:
        assert method == "GET"
        self.paths.append(path)
        if path in self.objects:
            return _Response(200, self.objects[path])
        return _Response(404, {"kind": "Status", "message": "not found", "code": 404})


QUEUE_PATH = "/apis/scheduling.volcano.sh/v1beta1/queues/team-a"
GROUP_PATH = "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups/pg"
TEAM_A = MakeQueue("team-a").card_quota('{"NVIDIA-A100": 4}').obj()
PG = MakePodGroup("pg", "ns").queue("team-a").min_member(1)


def _request(obj: dict[str, Any], operation: str = "CREATE") -> AdmissionRequest:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    return AdmissionRequest.model_validate(
        {
            "uid": "u",
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "namespace": "ns",
            "operation": operation,
            "object": obj,
        }
    )


def _admission(objects: dict[str, dict[str, Any]]) -> tuple[Admission, InformerView, FakeApi]:
    api = FakeApi(objects)
    view = InformerView(api)
    return Admission(view, live=view), view, api


async def test_a_podgroup_whose_queue_the_cache_has_not_seen_is_admitted_after_a_live_read() -> None:
    admission, view, api = _admission({QUEUE_PATH: TEAM_A})
    assert not admission.validate(_request(PG.obj())).allowed  # the cache alone refuses
    view.take_misses()
    decision = await admission.review(_request(PG.obj()), mutate=False)
    assert decision.allowed, decision.message
    assert api.paths == [QUEUE_PATH]
    # The object read is served from then on: the next review reads nothing.
    assert (await admission.review(_request(PG.obj()), mutate=False)).allowed
    assert api.paths == [QUEUE_PATH]


async def test_a_queue_that_does_not_exist_is_still_refused_after_one_read() -> None:
    admission, view, api = _admission({})
    decision = await admission.review(_request(PG.obj()), mutate=False)
    assert not decision.allowed and "spec.queue" in decision.message and "'team-a'" in decision.message
    assert api.paths == [QUEUE_PATH] and view.live_reads == 1


async def test_an_allowed_pod_of_a_missing_queue_reads_nothing() -> None:
    """Semantics 7: a pod of a Queue that does not exist has no queue quota; that is no refusal, and no
    live read is paid for it on the hot path."""
    admission, _, api = _admission({QUEUE_PATH: TEAM_A})
    pod = MakePod("p", "ns").queue("team-a").req(cpu="1").obj()
    assert (await admission.review(_request(pod), mutate=False)).allowed
    assert api.paths == []


async def test_the_podgroup_a_pod_names_is_read_live_for_the_queue_default() -> None:
    """The mutation defaults the queue annotation from the pod's PodGroup: a PodGroup applied in the same
    file as the pod is read live rather than the pod being sent to the default queue."""
    admission, _, api = _admission({GROUP_PATH: PG.obj(), QUEUE_PATH: TEAM_A})
    pod = MakePod("p", "ns").scheduler("gpuq-scheduler").group("pg").req(cpu="1").obj()
    decision = await admission.review(_request(pod), mutate=True)
    patched = jsonpatch.apply(pod, decision.patch)
    assert patched["metadata"]["annotations"][ann.QUEUE_NAME] == "team-a"
    assert GROUP_PATH in api.paths


async def test_a_failed_live_read_leaves_the_refusal() -> None:
    class Broken(FakeApi):
        async def call_api(self, path: str, method: str, **_: Any) -> _Response:
            raise OSError("connection refused")

    view = InformerView(Broken({}))
    admission = Admission(view, live=view)
    decision = await admission.review(_request(PG.obj()), mutate=False)
    assert not decision.allowed and "spec.queue" in decision.message
    assert view.live_reads == 1
