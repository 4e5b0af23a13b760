"""The pod informer's decoder (scheduler/kube/pod_cache.py): a pod its typed declarations do not fit
is decoded as before, alone; a malformed one gets the same Warning as before and stops nothing; the
informer lists and watches through it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.kube.informer import Informer
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.events import FAILED_SCHEDULING
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.kube.pod_cache import PodDecoder, decode_pod, pod_cache, pod_shared_parts
from tests.testing.builders import MakeNode, MakePod
from tests.testing.feed import make_feed

POD = MakePod("p", "ns").req(cpu="1").priority(0).phase("Pending")


def as_event(obj: Any, kind: str = "ADDED") -> bytes:
    return orjson.dumps({"type": kind, "object": obj})


def with_spec(**fields: Any) -> dict[str, Any]:
    pod = POD.obj()
    pod["spec"].update(fields)
    return pod


# Objects the declarations do not fit, valid for PodInfo: decoded whole, trimmed as the cache was.
UNUSUAL = {
    "containers null": with_spec(containers=None),
    "status null": {**POD.obj(), "status": None},
    "a container's resources null": with_spec(
        containers=[{"name": "c", "image": "x", "resources": None, "env": [{"name": "A"}]}]
    ),
}


@pytest.mark.parametrize("pod", UNUSUAL.values(), ids=UNUSUAL.keys())
def test_an_unusual_valid_pod_is_decoded_as_before(pod: dict[str, Any]) -> None:
    out = decode_pod(orjson.dumps(pod))
    assert out == pod_cache(orjson.loads(orjson.dumps(pod)))  # the path before, whole and trimmed
    assert PodInfo.from_dict(out) == PodInfo.from_dict(pod)
    assert "env" not in str(out)


# (id, the malformed pod, a text of the Warning's message) as PodInfo.from_dict refuses them.
MALFORMED = [
    ("spec not a map", {**POD.obj(), "spec": "x"}, "spec"),
    ("metadata not a map", {**POD.obj(), "metadata": ["p"]}, "metadata"),
    ("containers not a list", with_spec(containers="x"), "spec.containers"),
    ("a container not a map", with_spec(containers=[5]), "spec.containers"),
    (
        "a label not a string",
        {**POD.obj(), "metadata": {"name": "p", "namespace": "ns", "labels": {"a": 1}}},
        "metadata.labels",
    ),
    ("priority not a number", with_spec(priority="high"), "spec.priority"),
    # tests/unit/boundaries/test_hostile_input.py's poisoned pods, through the decoder
    ("cpu of 5000 digits", MakePod("p", "ns").req(cpu="1" + "0" * 5000).priority(0).obj(), "requests[cpu]"),
    (
        "cpu exponent of 5000 digits",
        MakePod("p", "ns").req(cpu="1e" + "9" * 5000).priority(0).obj(),
        "exponent",
    ),
]


@pytest.mark.parametrize(("pod", "names"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_malformed_pod_gets_the_warning_it_got_before_and_the_next_one_is_scheduled(
    pod: dict[str, Any], names: str
) -> None:
    def warnings(obj: dict[str, Any]) -> list[str]:
        scheduler, backend, feed, _ = make_feed()
        feed.apply(Change("add", ("", "n1"), MakeNode("n1").alloc(cpu="4", memory="8Gi", pods="10").obj()))
        feed.apply(Change("add", ("ns", "p"), obj))
        feed.apply(Change("add", ("ns", "ok"), MakePod("ok", "ns").req(cpu="1").priority(0).obj()))
        scheduler.run_enqueue()
        while scheduler.schedule_one() is not None:
            pass
        assert backend.bindings.get("ns/ok") == "n1"
        return [e.message for e in backend.events if e.type == "Warning" and e.reason == FAILED_SCHEDULING]

    event = PodDecoder().event(as_event(pod))
    assert event["type"] == "ADDED"
    before = warnings(pod_cache(orjson.loads(orjson.dumps(pod))))
    assert before and any(names in m for m in before), before
    assert warnings(pod_shared_parts(event["object"])) == before


def test_a_page_decodes_each_pod_on_its_own() -> None:
    good, odd, bad = POD.obj(), UNUSUAL["containers null"], {**POD.obj(), "spec": "x"}
    page = PodDecoder().page(orjson.dumps({"metadata": {"resourceVersion": "9"}, "items": [good, odd, bad]}))
    assert page["metadata"] == {"resourceVersion": "9"}
    assert page["items"] == [decode_pod(orjson.dumps(o)) for o in (good, odd, bad)]
    assert page["items"][2]["spec"] == "x"  # as it was: the feed names it
    assert PodDecoder().page(b"[1]") == [1]  # not a list: the informer says so (ProtocolError)


def test_an_error_event_keeps_its_status_and_a_bookmark_its_version() -> None:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 410}
    status |= {"reason": "Expired", "message": "too old resource version: 1 (5)"}
    assert PodDecoder().event(as_event(status, "ERROR")) == {"type": "ERROR", "object": status}
    no_status = {"kind": "Status", "code": 410, "message": "gone"}  # would fit the declarations
    assert PodDecoder().event(as_event(no_status, "ERROR"))["object"] == no_status
    end = {"resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}}
    bookmark = PodDecoder().event(as_event({"kind": "Pod", "metadata": end}, "BOOKMARK"))
    assert bookmark["object"]["metadata"] == end


class Stream:
    def __init__(self) -> None:
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue()

    async def readany(self) -> bytes:
        return await self.chunks.get()


class Response:
    def __init__(self, stream: Stream) -> None:
        self.status = 200
        self.content = stream

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class StreamingApi:
    """Answers the streaming list with ``objects`` and the end bookmark at 9, each watch with a stream
    the test writes to."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.watches: list[Stream] = []

    async def call_api(self, path: str, method: str, **kwargs: Any) -> Response:
        stream = Stream()
        if dict(kwargs["query_params"]).get("sendInitialEvents") == "true":
            for obj in self.objects:
                stream.chunks.put_nowait(as_event(obj) + b"\n")
            end = {"resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}}
            stream.chunks.put_nowait(as_event({"kind": "Pod", "metadata": end}, "BOOKMARK") + b"\n")
        else:
            self.watches.append(stream)
        return Response(stream)


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[None]:
    task = asyncio.create_task(informer.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(condition: Any) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.005)


async def test_the_pod_informer_lists_and_watches_through_the_decoder() -> None:
    full = POD.obj()
    full["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    full["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    odd = {**MakePod("odd", "ns").obj(), "status": None}
    objects = [full, {**MakePod("bad", "ns").obj(), "spec": "x"}, odd]
    api = StreamingApi(objects)
    changes: list[Change] = []
    informer = Informer(
        api,
        kinds.POD,
        handlers=[changes.append],
        watch_list=True,
        transform=pod_shared_parts,
        decoder=PodDecoder(),
    )
    async with running(informer):
        await until(lambda: informer.synced.is_set() and api.watches)
        assert sorted(informer.items()) == [("ns", "bad"), ("ns", "odd"), ("ns", "p")]
        cached = informer.get("ns", "p") or {}
        assert cached["kind"] == "Pod" and "managedFields" not in cached["metadata"]
        assert "env" not in cached["spec"]["containers"][0]
        assert PodInfo.from_dict(cached) == PodInfo.from_dict(full)
        assert informer.resource_version == "9"
        moved = MakePod("p", "ns").req(cpu="1").node("n1").resource_version("10").obj()
        api.watches[0].chunks.put_nowait(as_event(moved, "MODIFIED") + b"\n")
        await until(lambda: informer.resource_version == "10")
        assert (informer.get("ns", "p") or {})["spec"]["nodeName"] == "n1"
        assert changes[-1].type == "update" and changes[-1].old is cached
