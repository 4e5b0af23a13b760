"""An informer: list, watch with bookmarks, re-establish a silent watch, re-list and diff on 410 Gone.

kubernetes_asyncio's ``Watch`` retries a 410 once and then raises, and returns model objects; gpuq owns
the loop instead and reads raw JSON:

1. **list** (paginated, ``limit`` per page, the next page requested while this one is decoded) ->
   replace the cache, deliver the :func:`diff` against the previous cache (so a re-list after an
   outage still tells handlers about every delete); with ``watch_list``, the list is kube-apiserver's
   streaming list instead (:meth:`Informer._initial_events`), pages by the same size, same diff;
2. **watch** from the list's resourceVersion with ``allowWatchBookmarks`` and a server-side
   ``timeoutSeconds``; every event and bookmark advances the resourceVersion, so a watch that ends
   normally is resumed from where it stopped without listing again;
3. on **inactivity** (no byte, no event and no bookmark, for ``inactivity_timeout``: a stalled or
   half-dead connection) the watch is closed and **re-established** from the last resourceVersion on
   a new connection: nothing is lost (the apiserver replays what came after it) and nothing is listed.
   The new watch must answer within ``inactivity_timeout`` too, or it counts as an error;
4. on **410 Gone** (the resourceVersion was compacted: :class:`~common.kube.errors.Gone`) or on any
   error, go back to 1, with an exponential backoff (:func:`~common.model.backoff.backoff`) and jitter
   after errors so a struggling apiserver is not hammered.

Its requests fail with gpuq's API errors (:mod:`common.kube.errors`): an error status raises the
:class:`~common.kube.errors.ApiError` of that status, a watch's ERROR event the one its Status object
carries, a failure on the way (aiohttp's, translated) a :class:`~common.kube.errors.TransportError`,
an answer that is not the API's a :class:`~common.kube.errors.ProtocolError`.

Bookmarks do not keep every healthy watch busy: kube-apiserver sends one about once a minute, but
only once the kind has changed after the watch's resourceVersion (its cacher sends none before it has
seen an event, and none older than the watch). A watch of a kind nobody changes is silent however
healthy it is; re-establishing it costs one watch request per ``inactivity_timeout``, no list.

Handlers run in the event loop, synchronously, in order of delivery; one that raises is logged and
does not stop the informer. The cache is readable at any time (``informer.get``, ``informer.items``).

:meth:`Informer.relist` asks for a list now and returns once its diff is delivered: the list starts
after the call, so it holds every write the apiserver acknowledged before (a new leader's view of the
binds its predecessor made before giving up the Lease).

Taking over from another replica does not need a list when the watches are live:
:meth:`Informer.catch_up` has the watch pass the apiserver's present (common/kube/catch_up.py).

``synced`` is set once, by the first list. ``watching`` is True only while the cache is live and
watched: from a successful list (and each watch the apiserver answers) until the next failure (410
Gone, a failed request) or until a watch is found silent, and again once a list or a re-established
watch succeeds. A watch that ends normally and is resumed stays live.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final, Protocol

import aiohttp
import orjson

from gpuq_k8s.common.kube import list_pages
from gpuq_k8s.common.kube.catch_up import CATCH_UP_WATCH_TIMEOUT, CatchUp, revision
from gpuq_k8s.common.kube.collection_get import get, read_body
from gpuq_k8s.common.kube.diff import (
    Change,
    Key,
    diff,
    object_key,
    resource_version,
    strip_managed_fields,
)
from gpuq_k8s.common.kube.errors import (
    ApiError,
    Gone,
    ProtocolError,
    RequestTimeout,
    status_error,
)
from gpuq_k8s.common.kube.list_pages import continue_in_head
from gpuq_k8s.common.kube.watch_stream import (
    INITIAL_EVENTS_END,
    Inactive,
    InitialEventsUnended,
    initial_events,
    lines,
    refuses_watch_list,
)
from gpuq_k8s.common.model.backoff import backoff
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.wire import Obj

__all__ = [
    "CATCH_UP_WATCH_TIMEOUT",
    "DEFAULT_INACTIVITY",
    "INITIAL_EVENTS_END",
    "Decoder",
    "Handler",
    "Inactive",
    "Informer",
    "InformerSet",
    "Transform",
    "continue_in_head",
]

log = logging.getLogger(__name__)

Handler = Callable[[Change], None]
Transform = Callable[[dict[str, Any]], dict[str, Any]]


class Decoder(Protocol):
    """How an informer decodes its kind's JSON where orjson's whole objects are not what it keeps
    (the scheduler's pods: scheduler/kube/pod_cache.py): a list page (``metadata``, ``items``) and
    a watch event (``type``, ``object``), as JSON objects; what is not one the informer refuses."""

    def page(self, body: bytes) -> Any: ...

    def event(self, line: bytes) -> Any: ...


# No byte on a watch for this long: it is re-established (from its resourceVersion, without a list).
# Longer than kube-apiserver's bookmark period (about a minute), so a watch of a kind that changes is
# kept alive by its bookmarks; a watch of a kind nobody changes gets none and is renewed at this pace.
DEFAULT_INACTIVITY: Final = 150.0


class _Relist(Exception):
    """:meth:`Informer.relist` was called: the watch stops and the loop lists again."""


@dataclass(eq=False)
class Informer(CatchUp):
    """Keeps an up-to-date cache of one resource kind and tells handlers what changed; its catch-up on
    taking over (:meth:`catch_up`) is mixed in from common/kube/catch_up.py."""

    api_client: Any
    kind: Kind
    _: KW_ONLY
    handlers: Sequence[Handler] = ()
    transform: Transform | None = strip_managed_fields
    # Decodes the list pages and watch events instead of orjson (its objects then transformed).
    decoder: Decoder | None = None
    # Called with (the list's number, its items) for each page of a list before the first one has
    # completed (the scheduler's streamed start: scheduler/kube/feed.py); a list that fails and is
    # retried gives its pages again under a new number.
    on_page: Callable[[int, Sequence[Obj]], None] | None = None
    # Whether the first list's objects are delivered to the handlers (as adds). A handler that reads
    # the first list from the cache itself (the scheduler's feed: Feed.load) skips them: 150,000 adds
    # it would ignore one by one.
    deliver_first_list: bool = True
    page_size: int = 500
    # List by a watch with ``sendInitialEvents`` (kube-apiserver's streaming list, WatchList) instead
    # of pages; refused by the apiserver, it lists by pages from then on (see :meth:`_initial_events`).
    watch_list: bool = False
    watch_timeout: tuple[int, int] = (300, 600)
    inactivity_timeout: float = DEFAULT_INACTIVITY
    backoff: tuple[float, float] = (0.5, 30.0)
    label_selector: str = ""
    field_selector: str = ""
    synced: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    watching: bool = field(default=False, init=False)
    relists: int = field(default=0, init=False)
    list_began: float = field(default=0.0, init=False)  # time.monotonic() when the cache's list began
    _cache: dict[Key, Obj] = field(default_factory=dict, init=False)
    _resource_version: str = field(default="", init=False)
    _relist_wanted: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _lists_started: int = field(default=0, init=False)
    _listed: int = field(default=0, init=False)  # the number (in start order) of the last list delivered
    _progress: asyncio.Event = field(default_factory=asyncio.Event, init=False)  # set by every list
    _watch_list_refused: bool = field(default=False, init=False)

    # --- cache ---------------------------------------------------------------------------------
    def get(self, namespace: str, name: str) -> Obj | None:
        return self._cache.get((namespace if self.kind.namespaced else "", name))

    def items(self) -> Mapping[Key, Obj]:
        """The cache (read-only by convention: handlers and readers must not mutate it)."""
        return self._cache

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def resource_version(self) -> str:
        return self._resource_version

    # --- loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """List, watch and re-list until cancelled."""
        failures = 0
        while True:
            try:
                await self._list()
                failures = 0
                while True:
                    try:
                        await self._watch_until_relist()
                    except Inactive:
                        self.watching = False  # until the new watch answers
                        log.warning(
                            "%s: watch silent for %.0fs, re-establishing it from resourceVersion %s",
                            self.kind.kind,
                            self.inactivity_timeout,
                            self._resource_version,
                        )
            except asyncio.CancelledError:
                self.watching = False
                raise
            except _Relist:
                continue
            except Gone:
                self.watching = False
                log.info("%s: resourceVersion %s expired, re-listing", self.kind.kind, self._resource_version)
                continue
            except Exception as err:
                self.watching = False
                failures += 1
                delay = backoff(failures, *self.backoff) * random.uniform(0.5, 1.0)
                log.warning("%s: %s; retrying in %.1fs", self.kind.kind, err or type(err).__name__, delay)
                await asyncio.sleep(delay)

    async def relist(self) -> None:
        """List again now (stopping the watch) and return once the list's diff is delivered."""
        target = self._lists_started + 1
        self._relist_wanted.set()
        while self._listed < target:
            await self._progress.wait()

    async def _watch_until_relist(self) -> None:
        """One watch, cut short by :meth:`relist` (raises :class:`_Relist`) or by :meth:`catch_up`
        (returns: the loop resumes the watch from its resourceVersion)."""
        if not self._relist_wanted.is_set():
            self._rewatch_wanted.clear()
            watch = asyncio.ensure_future(self._watch())
            wanted = asyncio.ensure_future(self._relist_wanted.wait())
            rewatch = asyncio.ensure_future(self._rewatch_wanted.wait())
            try:
                await asyncio.wait({watch, wanted, rewatch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                wanted.cancel()
                rewatch.cancel()
                if not watch.done():
                    watch.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await watch
            if not watch.cancelled():
                watch.result()  # the watch's own end: normal, or Gone, Inactive, an error
        if self._relist_wanted.is_set():
            raise _Relist()

    async def _list(self) -> None:
        # Whoever asked for a list before this one started is answered by it.
        self._relist_wanted.clear()
        self._lists_started += 1
        number = self._lists_started
        began = time.monotonic()
        fresh: dict[Key, Obj] = {}
        version = ""
        streamed = self.watch_list and not self._watch_list_refused
        batches = self._initial_events() if streamed else self._batches()
        async with contextlib.aclosing(batches) as pages:  # closed (its fetch stopped) on any exit
            async for items, page_version in pages:
                objs = [self._prepare(item) for item in items]
                for obj in objs:
                    fresh[object_key(obj)] = obj
                version = page_version or version
                if self.on_page is not None and not self.synced.is_set():
                    try:
                        self.on_page(number, objs)
                    except Exception:
                        log.exception("%s: page handler failed", self.kind.kind)
        first = not self.synced.is_set() and not self._cache
        changes = diff(self._cache, fresh) if self.deliver_first_list or not first else ()
        self._cache = fresh
        self._resource_version = version
        self.list_began = began
        self.relists += 1
        self._deliver(changes)
        self.watching = True
        self.synced.set()
        self._listed = number
        self._progress.set()
        self._progress = asyncio.Event()
        self._advanced()

    def _batches(self) -> AsyncGenerator[tuple[list[dict[str, Any]], str], None]:
        """The list's pages as (items, the page's resourceVersion) (common/kube/list_pages.py)."""
        return list_pages.batches(
            list_pages.pages(self._get_body, self._decode, self.page_size, self.kind.path)
        )

    async def _initial_events(self) -> AsyncGenerator[tuple[list[dict[str, Any]], str], None]:
        """The list as kube-apiserver streams it (WatchList, KEP-3157): a watch with
        ``sendInitialEvents=true`` and ``resourceVersionMatch=NotOlderThan`` from no resourceVersion
        (a consistent read, like a list's) sends every object as an ADDED event, then a BOOKMARK
        annotated ``k8s.io/initial-events-end`` carrying the resourceVersion they are the state at.
        Yielded by ``page_size`` objects, the last batch with that resourceVersion; the stream is then
        closed and the loop watches from that resourceVersion as after a list.

        Served from the apiserver's watch cache, with each object's encoding kept there: 50,000 pods
        cost kube-apiserver about 40 % less than the same list by pages, on the 2 cores the scheduler
        shares with it (issue 29's measurement; docs/operations.md). An apiserver that refuses the
        parameters (an error status, or a stream that ends without the end bookmark: a server without
        WatchList) makes this informer list by pages from then on; one whose watch cache of the kind is
        not ready yet (429) is listed by pages this once.
        """
        params = [
            ("watch", "true"),
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.watch_timeout[1])),
        ]
        try:
            async with asyncio.timeout(self.inactivity_timeout):
                response = await self._request(params, timeout=aiohttp.ClientTimeout(total=None, connect=30))
        except TimeoutError:
            raise RequestTimeout(
                f"streaming list of {self.kind.path} not answered within {self.inactivity_timeout:g}s"
            ) from None
        except ApiError as err:
            if err.status == 429:
                # The apiserver's watch cache of the kind is not ready (a custom resource's, just after
                # the apiserver or the CRD came up: "storage is (re)initializing"): a list by pages is
                # served from etcd now instead of after a retry's backoff. Streamed again next time.
                log.info("%s: streaming list not served yet (%s): listing by pages", self.kind.kind, err)
            elif refuses_watch_list(err):
                self._refuse_watch_list(f"refused ({err})")
            else:
                raise
            async with contextlib.aclosing(self._batches()) as pages:
                async for page in pages:
                    yield page
            return
        events = initial_events(
            lines(response.content, self.inactivity_timeout),
            self._decode_event,
            self.page_size,
            self.kind.path,
        )
        try:
            async with contextlib.aclosing(events) as batched:
                async for batch in batched:
                    yield batch
        except InitialEventsUnended:
            self._refuse_watch_list("the stream ended without the initial-events-end bookmark")
            raise
        finally:
            response.close()  # done with (or failed on) this stream: never reuse its connection
            response.release()

    def _refuse_watch_list(self, why: str) -> None:
        self._watch_list_refused = True
        log.warning("%s: streaming list (WatchList) %s: listing by pages", self.kind.kind, why)

    async def _watch(self) -> None:
        self._skip_through = 0  # this watch starts past it
        low, high = self.watch_timeout
        seconds = CATCH_UP_WATCH_TIMEOUT if self._catch_up_to else random.randint(low, high)
        params = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self._resource_version),
            ("timeoutSeconds", str(seconds)),
        ]
        try:
            async with asyncio.timeout(self.inactivity_timeout):
                response = await self._request(params, timeout=aiohttp.ClientTimeout(total=None, connect=30))
        except TimeoutError:
            raise RequestTimeout(
                f"watch of {self.kind.path} not answered within {self.inactivity_timeout:g}s"
            ) from None
        self.watching = True  # answered: the cache is watched again
        try:
            async for line in lines(response.content, self.inactivity_timeout):
                self._event(self._decode_event(line))
        except Inactive:
            response.close()  # the connection may be half dead: never reuse it
            raise
        finally:
            response.release()

    def _event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, dict):
            raise ProtocolError(f"watch event without an object: {str(event)[:200]}")
        if kind == "ERROR":
            raise status_error(raw)  # Gone when the resourceVersion was compacted
        version = resource_version(raw)
        if self._skip_through and (revision(version) or 0) <= self._skip_through:
            return  # before the whole collection catch_up read (:meth:`_take_whole`)
        if kind == "BOOKMARK":
            self._resource_version = version or self._resource_version
            self._advanced(bookmark=True)
            return
        obj = self._prepare(raw)
        key = object_key(obj)
        old = self._cache.get(key)
        if kind == "DELETED":
            self._cache.pop(key, None)
            change = Change("delete", key, obj)
        elif kind in ("ADDED", "MODIFIED"):
            self._cache[key] = obj
            change = Change("add", key, obj) if old is None else Change("update", key, obj, old)
        else:
            raise ProtocolError(f"unknown watch event type {kind!r}")
        self._resource_version = version or self._resource_version
        self._deliver([change])
        self._advanced()

    def _prepare(self, item: dict[str, Any]) -> Obj:
        # List items carry neither kind nor apiVersion; parsers downstream route on them.
        item.setdefault("kind", self.kind.kind)
        item.setdefault("apiVersion", self.kind.api_version)
        return self.transform(item) if self.transform is not None else item

    def _deliver(self, changes: Sequence[Change]) -> None:
        for change in changes:
            for handler in self.handlers:
                try:
                    handler(change)
                except Exception:
                    log.exception("%s: handler failed on %s %s", self.kind.kind, change.type, change.key)

    # --- HTTP ----------------------------------------------------------------------------------
    async def _request(self, params: list[tuple[str, str]], timeout: aiohttp.ClientTimeout) -> Any:
        if self.label_selector:
            params.append(("labelSelector", self.label_selector))
        if self.field_selector:
            params.append(("fieldSelector", self.field_selector))
        return await get(self.api_client, self.kind.path, params, timeout)

    async def _get_body(self, params: list[tuple[str, str]], timeout: aiohttp.ClientTimeout) -> bytes:
        return await read_body(await self._request(params, timeout))

    def _decode(self, body: bytes) -> dict[str, Any]:
        data = orjson.loads(body) if self.decoder is None else self.decoder.page(body)
        if not isinstance(data, dict):
            raise ProtocolError(f"GET {self.kind.path}: expected a JSON object")
        return data

    def _decode_event(self, line: bytes) -> Any:
        return orjson.loads(line) if self.decoder is None else self.decoder.event(line)


class InformerSet:
    """Informers for several kinds sharing one API client, with one readiness signal."""

    def __init__(self, informers: Iterable[Informer]) -> None:
        self.informers: dict[str, Informer] = {i.kind.kind: i for i in informers}
        self._tasks: list[asyncio.Task[None]] = []

    def __getitem__(self, kind: str) -> Informer:
        return self.informers[kind]

    @property
    def synced(self) -> bool:
        """True once every informer has completed its first list."""
        return all(i.synced.is_set() for i in self.informers.values())

    @property
    def watching(self) -> bool:
        """True while every informer's cache is live (see :class:`Informer`): the readiness signal."""
        return all(i.watching for i in self.informers.values())

    def start(self) -> None:
        for informer in self.informers.values():
            self._tasks.append(asyncio.create_task(informer.run(), name=f"informer-{informer.kind.kind}"))

    async def wait_synced(self, timeout: float | None = None) -> None:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*(i.synced.wait() for i in self.informers.values()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
