"""common.kube: the re-list diff (pure) and how watch events update the informer cache."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuq_k8s.common.kube.diff import Change, diff, object_key, strip_managed_fields
from gpuq_k8s.common.kube.errors import Gone, ProtocolError, ServerError
from gpuq_k8s.common.kube.informer import Informer, continue_in_head
from gpuq_k8s.common.model import kinds


def obj(name: str, rv: str, ns: str = "", uid: str = "u") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv, "uid": uid}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta}


def by_key(*objects: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {object_key(o): o for o in objects}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ([], [], []),
        ([], [obj("a", "1")], [("add", "a")]),
        ([obj("a", "1")], [], [("delete", "a")]),
        ([obj("a", "1")], [obj("a", "1")], []),
        ([obj("a", "1")], [obj("a", "2")], [("update", "a")]),
        ([obj("a", "1", uid="x")], [obj("a", "1", uid="y")], [("update", "a")]),
        (
            [obj("b", "1"), obj("c", "1")],
            [obj("a", "1"), obj("c", "2")],
            [("delete", "b"), ("add", "a"), ("update", "c")],
        ),
    ],
    ids=["empty", "add", "delete", "same", "update", "recreated", "mixed-deletes-first"],
)
def test_relist_diff(
    old: list[dict[str, Any]], new: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    changes = diff(by_key(*old), by_key(*new))
    assert [(c.type, c.key[1]) for c in changes] == expected


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.sampled_from("123")),
    st.dictionaries(st.sampled_from("abcdef"), st.sampled_from("123")),
)
def test_diff_replayed_on_the_old_cache_gives_the_new_one(old: dict[str, str], new: dict[str, str]) -> None:
    before = by_key(*(obj(k, v) for k, v in old.items()))
    after = by_key(*(obj(k, v) for k, v in new.items()))
    cache = dict(before)
    for change in diff(before, after):
        if change.type == "delete":
            del cache[change.key]
        else:
            assert (change.type == "add") == (change.key not in cache)
            cache[change.key] = change.obj
    assert cache == after


def informer(kind: Any = kinds.POD) -> tuple[Informer, list[Change]]:
    seen: list[Change] = []
    return Informer(None, kind, handlers=[seen.append]), seen


def test_watch_events_update_cache_and_resource_version() -> None:
    inf, seen = informer()
    inf._event({"type": "ADDED", "object": obj("p", "5", ns="ns")})
    inf._event({"type": "MODIFIED", "object": obj("p", "6", ns="ns")})
    assert inf.get("ns", "p") is not None and inf.resource_version == "6"
    inf._event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    assert inf.resource_version == "9"
    inf._event({"type": "DELETED", "object": obj("p", "10", ns="ns")})
    assert inf.get("ns", "p") is None
    assert [c.type for c in seen] == ["add", "update", "delete"]
    assert seen[1].old is not None and seen[1].old["metadata"]["resourceVersion"] == "5"
    assert seen[0].obj["kind"] == "Pod" and seen[0].obj["apiVersion"] == "v1"


def test_410_in_the_watch_means_relist() -> None:
    inf, _ = informer()
    with pytest.raises(Gone, match="too old"):
        inf._event({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
    with pytest.raises(ServerError, match="HTTP 500"):
        inf._event({"type": "ERROR", "object": {"kind": "Status", "code": 500}})
    with pytest.raises(ProtocolError, match="unknown watch event type 'WHAT'"):
        inf._event({"type": "WHAT", "object": obj("p", "1")})


def test_handler_failure_does_not_stop_delivery() -> None:
    seen: list[str] = []

    def broken(_: Change) -> None:
        raise RuntimeError("boom")

    inf = Informer(None, kinds.QUEUE, handlers=[broken, lambda c: seen.append(c.key[1])])
    inf._event({"type": "ADDED", "object": obj("q", "1")})
    assert seen == ["q"]


def test_cluster_scoped_get_ignores_namespace_and_managed_fields_are_dropped() -> None:
    inf, _ = informer(kinds.NODE)
    node = obj("n1", "1")
    node["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    inf._event({"type": "ADDED", "object": node})
    cached = inf.get("whatever", "n1")
    assert cached is not None and "managedFields" not in cached["metadata"]
    assert strip_managed_fields({"metadata": "odd"}) == {"metadata": "odd"}


def test_paths() -> None:
    assert kinds.POD.path == "/api/v1/pods"
    assert kinds.QUEUE.path == "/apis/scheduling.volcano.sh/v1beta1/queues"
    assert kinds.QUEUE.ref("x", "q") == "Queue/q"


# ------------------------------------------------------------------ silent watches (issue 11)


class Stream:
    """A watch body the test writes to: ``readany`` as aiohttp's StreamReader answers it."""

    def __init__(self) -> None:
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue()

    def send(self, event: dict[str, Any]) -> None:
        self.chunks.put_nowait(json.dumps(event).encode() + b"\n")

    async def readany(self) -> bytes:
        return await self.chunks.get()


class Response:
    def __init__(self, status: int, body: dict[str, Any] | None = None, stream: Stream | None = None) -> None:
        self.status = status
        self.content = stream
        self.body = json.dumps(body or {}).encode()
        self.closed = False

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class WatchApi:
    """Answers lists with an empty list at resourceVersion 7 and each watch with a new :class:`Stream`
    (or never, while ``hang`` is set); records the resourceVersion every watch asked from."""

    def __init__(self) -> None:
        self.lists = 0
        self.watches: list[tuple[str, Stream, Response]] = []
        self.hang = False

    async def call_api(self, path: str, method: str, **kwargs: Any) -> Response:
        params = dict(kwargs["query_params"])
        if params.get("watch") != "true":
            self.lists += 1
            return Response(200, {"metadata": {"resourceVersion": "7"}, "items": []})
        if self.hang:
            await asyncio.Event().wait()
        stream = Stream()
        response = Response(200, stream=stream)
        self.watches.append((params["resourceVersion"], stream, response))
        return response


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def running(inf: Informer) -> AsyncIterator[None]:
    task = asyncio.create_task(inf.run())
    try:
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def bookmark(rv: str) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": rv}}}


async def test_a_silent_watch_is_re_established_from_its_resource_version_without_a_list() -> None:
    api = WatchApi()
    inf = Informer(api, kinds.QUEUE, inactivity_timeout=0.3)
    async with running(inf):
        await until(lambda: len(api.watches) == 1)
        assert inf.watching and api.lists == 1
        api.watches[0][1].send({"type": "ADDED", "object": obj("q", "8")})
        await until(lambda: inf.get("", "q") is not None)
        began = asyncio.get_running_loop().time()
        await until(lambda: not inf.watching or len(api.watches) == 2)  # silent past the bound
        assert asyncio.get_running_loop().time() - began >= 0.25
        await until(lambda: len(api.watches) == 2)
        assert [rv for rv, _, _ in api.watches] == ["7", "8"]  # resumed where it stopped
        assert api.watches[0][2].closed  # the silent connection is never reused
        assert api.lists == 1 and inf.relists == 1 and inf.get("", "q") is not None
        await until(lambda: inf.watching)


async def test_bookmarks_keep_a_quiet_watch_alive() -> None:
    api = WatchApi()
    inf = Informer(api, kinds.QUEUE, inactivity_timeout=0.5)
    async with running(inf):
        await until(lambda: len(api.watches) == 1)
        stream = api.watches[0][1]
        for rv in range(8, 23):  # 1.5 s of bookmarks, one every 0.1 s: three times the bound
            stream.send(bookmark(str(rv)))
            await asyncio.sleep(0.1)
            assert inf.watching
        assert len(api.watches) == 1 and inf.resource_version == "22"
        await until(lambda: len(api.watches) == 2)  # then silence: re-established from the last bookmark
        assert api.watches[1][0] == "22" and api.lists == 1


async def test_a_re_established_watch_that_does_not_answer_is_an_error_and_the_cache_is_re_listed() -> None:
    api = WatchApi()
    inf = Informer(api, kinds.QUEUE, inactivity_timeout=0.2, backoff=(0.0, 0.0))
    async with running(inf):
        await until(lambda: len(api.watches) == 1)
        api.hang = True  # from now on a watch request is never answered
        await until(lambda: not inf.watching)
        await until(lambda: api.lists == 2)  # silent, then the new watch unanswered: list again
        api.hang = False
        await until(lambda: len(api.watches) == 2 and inf.watching)


# ------------------------------------------------------------------ list pages (issue 17)


@pytest.mark.parametrize(
    ("body", "token"),
    [
        (
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"41","continue":"eyJ2Ijoi'
            b'bWV0YS5rOHMuaW8vdjEiLCJydiI6NDF9","remainingItemCount":7},"items":[{"metadata":{}}]}',
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDF9",
        ),
        (b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"41"},"items":[]}', ""),
        # a custom resource's list: metadata after the items, never guessed
        (
            b'{"apiVersion":"scheduling.volcano.sh/v1beta1","items":[{"metadata":{"continue":"x"}}],'
            b'"kind":"QueueList","metadata":{"continue":"abc","resourceVersion":"9"}}',
            "",
        ),
        # an escaped token is not guessed (the decoded page is used instead)
        (b'{"kind":"PodList","apiVersion":"v1","metadata":{"continue":"a\\u003cb"},"items":[]}', ""),
        (b"", ""),
        (b"not json", ""),
    ],
    ids=["token", "last-page", "custom-resource", "escaped", "empty", "garbage"],
)
def test_continue_token_read_from_the_head_of_a_page(body: bytes, token: str) -> None:
    assert continue_in_head(body) == token


def test_a_token_past_the_head_is_not_guessed() -> None:
    padding = b'"x":"' + b"a" * 5000 + b'",'
    body = b'{"kind":"PodList",' + padding + b'"metadata":{"continue":"abc"},"items":[]}'
    assert continue_in_head(body) == ""


# ------------------------------------------------------------------ streaming lists (issue 29)


class StreamingListApi(WatchApi):
    """:class:`WatchApi` that answers a watch with ``sendInitialEvents`` as kube-apiserver's WatchList
    does (``objects`` as ADDED events, then the initial-events-end bookmark at resourceVersion 9), or
    with ``refuse`` as its status, or (``no_end``) with the objects and no end bookmark."""

    def __init__(self, objects: list[dict[str, Any]], *, refuse: int = 0, no_end: bool = False) -> None:
        super().__init__()
        self.objects = objects
        self.refuse = refuse
        self.no_end = no_end
        self.streamed: list[dict[str, str]] = []

    async def call_api(self, path: str, method: str, **kwargs: Any) -> Response:
        params = dict(kwargs["query_params"])
        if params.get("sendInitialEvents") != "true":
            return await super().call_api(path, method, **kwargs)
        self.streamed.append(params)
        if self.refuse:
            status = {"kind": "Status", "code": self.refuse, "reason": "Invalid", "message": "forbidden"}
            return Response(self.refuse, status)
        stream = Stream()
        for item in self.objects:
            stream.send({"type": "ADDED", "object": item})
        if self.no_end:
            stream.chunks.put_nowait(b"")  # the stream ends
        else:
            end = {"resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}}
            stream.send({"type": "BOOKMARK", "object": {"kind": "Queue", "metadata": end}})
        return Response(200, stream=stream)


async def test_a_streaming_list_fills_the_cache_by_pages_and_the_watch_goes_on_from_its_end() -> None:
    objects = [obj(f"q{i}", str(i)) for i in range(5)]
    api = StreamingListApi(objects)
    pages: list[tuple[int, list[str]]] = []
    changes: list[Change] = []
    inf = Informer(
        api,
        kinds.QUEUE,
        handlers=[changes.append],
        watch_list=True,
        page_size=2,
        on_page=lambda n, objs: pages.append((n, [o["metadata"]["name"] for o in objs])),
    )
    async with running(inf):
        await until(lambda: len(api.watches) == 1)
        assert api.lists == 0 and len(api.streamed) == 1  # no list by pages
        query = api.streamed[0]
        assert query["resourceVersionMatch"] == "NotOlderThan" and "resourceVersion" not in query
        assert pages == [(1, ["q0", "q1"]), (1, ["q2", "q3"]), (1, ["q4"])]
        assert sorted(c.key[1] for c in changes if c.type == "add") == [f"q{i}" for i in range(5)]
        assert inf.synced.is_set() and inf.watching and inf.resource_version == "9"
        assert api.watches[0][0] == "9"  # the watch of changes, from the end bookmark
        assert (inf.get("", "q3") or {}).get("kind") == "Queue"


async def test_without_first_list_delivery_the_first_list_is_cached_not_delivered() -> None:
    """``deliver_first_list=False`` (the scheduler's informers: Feed.load reads the first lists from
    the caches): the first list's objects reach the cache and ``on_page``, no handler; a re-list's
    changes and the watch's are delivered as ever."""
    api = StreamingListApi([obj("q0", "1"), obj("q1", "2")])
    pages: list[list[str]] = []
    changes: list[Change] = []
    inf = Informer(
        api,
        kinds.QUEUE,
        handlers=[changes.append],
        watch_list=True,
        deliver_first_list=False,
        on_page=lambda n, objs: pages.append([o["metadata"]["name"] for o in objs]),
    )
    async with running(inf):
        await until(lambda: len(api.watches) == 1)
        assert inf.synced.is_set() and sorted(k[1] for k in inf.items()) == ["q0", "q1"]
        assert pages == [["q0", "q1"]] and changes == []
        api.objects = [obj("q0", "3"), obj("q2", "4")]
        await inf.relist()
        assert sorted((c.type, c.key[1]) for c in changes) == [
            ("add", "q2"),
            ("delete", "q1"),
            ("update", "q0"),
        ]


@pytest.mark.parametrize("refusal", [{"refuse": 422}, {"refuse": 400}, {"no_end": True}])
async def test_an_apiserver_without_streaming_lists_is_listed_by_pages(refusal: dict[str, Any]) -> None:
    api = StreamingListApi([obj("q", "3")], **refusal)
    inf = Informer(api, kinds.QUEUE, watch_list=True, backoff=(0.0, 0.0))
    async with running(inf):
        await until(lambda: len(api.watches) == 1)
        assert api.lists == 1 and len(api.streamed) == 1 and inf.synced.is_set()
        await inf.relist()  # and by pages from then on
        assert api.lists == 2 and len(api.streamed) == 1


async def test_a_kind_whose_watch_cache_is_not_ready_is_listed_by_pages_this_once() -> None:
    api = StreamingListApi([obj("q", "3")], refuse=429)  # "storage is (re)initializing"
    inf = Informer(api, kinds.QUEUE, watch_list=True, backoff=(0.0, 0.0))
    async with running(inf):
        await until(lambda: len(api.watches) == 1)
        assert api.lists == 1 and len(api.streamed) == 1 and inf.synced.is_set()
        api.refuse = 0
        await inf.relist()  # streamed again
        assert api.lists == 1 and len(api.streamed) == 2 and inf.get("", "q") is not None


async def test_a_streaming_list_error_event_fails_the_list() -> None:
    api = StreamingListApi([obj("q", "3")])
    inf = Informer(api, kinds.QUEUE, watch_list=True, backoff=(0.0, 0.0))
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    api.objects = [obj("q", "3")]
    original = api.call_api

    async def with_error(path: str, method: str, **kwargs: Any) -> Response:
        response = await original(path, method, **kwargs)
        if len(api.streamed) == 1 and dict(kwargs["query_params"]).get("sendInitialEvents"):
            assert response.content is not None
            response.content.chunks = asyncio.Queue()
            response.content.send({"type": "ERROR", "object": gone})
        return response

    api.call_api = with_error  # type: ignore[method-assign]
    async with running(inf):
        await until(lambda: len(api.watches) == 1)
        assert len(api.streamed) == 2 and api.lists == 0  # listed again, streamed again
        assert inf.get("", "q") is not None


# ------------------------------------------------------------------ catching up on taking over (issue 29)


class PresentApi(WatchApi):
    """:class:`WatchApi` whose ``limit=1`` read of the collection's present resourceVersion answers
    ``present`` once ``answer`` is set."""

    def __init__(self, present: str, items: list[dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.present = present
        self.answer = asyncio.Event()
        self.reads = 0
        # The collection now; more than one object: the read has a continue token, as a page has.
        self.items = items if items is not None else [obj("a", "1"), obj("b", "2")]

    async def call_api(self, path: str, method: str, **kwargs: Any) -> Response:
        if dict(kwargs["query_params"]).get("limit") == "1":
            self.reads += 1
            await self.answer.wait()
            meta = {"resourceVersion": self.present, "continue": "more" if len(self.items) > 1 else ""}
            return Response(200, {"metadata": meta, "items": self.items[:1]})
        return await super().call_api(path, method, **kwargs)


async def test_catch_up_cuts_the_watch_as_it_reads_the_present_and_again_on_a_bookmark_short_of_it() -> None:
    """The short watch is opened while the present is still being read (its bookmark comes on the
    apiserver's next whole second: the sooner it opens, the sooner); a bookmark short of the present
    (sent before the read was answered) cuts it again at once; one past it ends the catch-up."""
    api = PresentApi("30")
    inf = Informer(api, kinds.QUEUE)
    async with running(inf):
        await until(lambda: len(api.watches) == 1 and inf.watching)
        catching = asyncio.create_task(inf.catch_up(5.0))
        await until(lambda: len(api.watches) == 2)  # cut before the present is answered
        assert api.reads == 1 and not catching.done()
        api.watches[1][1].send(bookmark("12"))
        await until(lambda: len(api.watches) == 3)  # short of it: cut again, from the bookmark
        assert api.watches[2][0] == "12"
        api.answer.set()
        await asyncio.sleep(0.05)
        assert not catching.done()  # 12 < 30
        api.watches[2][1].send(bookmark("31"))
        assert await catching
        assert inf.resource_version == "31" and api.lists == 1 and len(api.watches) == 3
        read, took = inf.last_catch_up
        assert 0 < read <= took


async def test_catch_up_passes_the_present_on_events_without_cutting_the_watch_again() -> None:
    api = PresentApi("30")
    api.answer.set()
    inf = Informer(api, kinds.QUEUE)
    async with running(inf):
        await until(lambda: len(api.watches) == 1 and inf.watching)
        catching = asyncio.create_task(inf.catch_up(5.0))
        await until(lambda: len(api.watches) == 2)
        api.watches[1][1].send({"type": "ADDED", "object": obj("q", "20")})
        await until(lambda: inf.get("", "q") is not None)
        await asyncio.sleep(0.05)
        assert len(api.watches) == 2 and not catching.done()  # an event short of it: the watch goes on
        api.watches[1][1].send({"type": "MODIFIED", "object": obj("q", "30")})
        assert await catching
        assert len(api.watches) == 2 and api.lists == 1


async def test_catch_up_that_cannot_pass_the_present_in_time_says_so() -> None:
    api = PresentApi("30")
    api.answer.set()
    inf = Informer(api, kinds.QUEUE)
    async with running(inf):
        await until(lambda: len(api.watches) == 1 and inf.watching)
        assert not await inf.catch_up(0.2)  # no bookmark comes: the caller lists
        assert api.lists == 1


async def test_a_collection_the_read_holds_whole_is_taken_as_a_list_at_the_present() -> None:
    """A collection of at most one object comes whole in the ``limit=1`` read: the cache becomes it
    (its difference delivered), the watch resumes from the present and the events of the watch open
    then, up to the present, are dropped (the cache holds their outcome: none goes back in time)."""
    api = PresentApi("30", items=[obj("q", "25")])
    api.answer.set()
    seen: list[tuple[str, str]] = []
    inf = Informer(
        api, kinds.QUEUE, handlers=[lambda c: seen.append((c.type, c.obj["metadata"]["resourceVersion"]))]
    )
    async with running(inf):
        await until(lambda: len(api.watches) == 1 and inf.watching)
        first = api.watches[0][1]
        assert await inf.catch_up(5.0)  # no bookmark
        assert inf.get("", "q") is not None and inf.resource_version == "30"
        assert seen == [("add", "25")]
        first.send({"type": "ADDED", "object": obj("q", "20")})  # older than the read: dropped
        first.send(bookmark("21"))
        await asyncio.sleep(0.05)
        assert seen == [("add", "25")] and inf.resource_version == "30"
        await until(lambda: api.watches[-1][0] == "30")  # resumed from the present
        api.watches[-1][1].send({"type": "DELETED", "object": obj("q", "31")})
        await until(lambda: inf.get("", "q") is None)
        assert seen == [("add", "25"), ("delete", "31")] and api.lists == 1


async def test_an_empty_collection_needs_no_bookmark_either() -> None:
    api = PresentApi("30", items=[])
    api.answer.set()
    inf = Informer(api, kinds.QUEUE)
    async with running(inf):
        await until(lambda: len(api.watches) == 1 and inf.watching)
        assert await inf.catch_up(5.0)
        assert len(inf) == 0 and inf.resource_version == "30" and api.lists == 1
