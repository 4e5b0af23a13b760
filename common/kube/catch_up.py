"""An informer's catch-up on taking over: its live cache brought past the apiserver's present, without a
list (common/kube/informer.py's :class:`~common.kube.informer.Informer` mixes :class:`CatchUp` in).

Taking over from another replica does not need a list when the watches are live:
:meth:`CatchUp.catch_up` reads the collection's present resourceVersion with a ``limit=1`` list (a
consistent read: it is at least every write the apiserver acknowledged before), then waits until the
watch has passed it. Events advance the cache's resourceVersion; where nothing of the kind changed,
a bookmark does: the watch is resumed (from where it is, nothing lost) as a watch of
``CATCH_UP_WATCH_TIMEOUT`` seconds as the read is sent, and kube-apiserver sends a bookmark two
seconds before a watch's deadline (its cacher's ``nextBookmarkTime``, in one-second buckets),
carrying the newest resourceVersion it has seen; the consistent read made its cache wait for etcd's
progress up to the present (etcd's RequestWatchProgress). 0-2.25 s, where a list of 150,000 pods
takes tens; a bookmark short of the present cuts the watch again at once. A collection of at most
one object comes whole in that read (no ``continue``): the cache is set to it, as by a list, and the
watch resumes from there without waiting for a bookmark.

The informer's watch loop reads the state kept here: ``_rewatch_wanted`` (cut the watch and resume
it), ``_catch_up_to`` (catching up: the next watch is a short one), ``_skip_through`` (events the
cache already holds), and calls :meth:`CatchUp._advanced` whenever its resourceVersion moves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import aiohttp

from gpuq_k8s.common.kube.diff import Change, Key, diff, object_key
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.wire import Obj

log = logging.getLogger("gpuq_k8s.common.kube.informer")  # the informer's log, as before the split

# A watch of this many seconds gets a bookmark 1-2 s after it opens (kube-apiserver sends
# one 2 s before a watch's deadline; its timer ticks every second): how :meth:`Informer.catch_up`
# has the watch pass a resourceVersion when nothing of the kind changes.
CATCH_UP_WATCH_TIMEOUT: Final = 3
# catch_up's target while the present resourceVersion is being read: above any revision.
_PRESENT_UNREAD: Final = 1 << 62


def revision(version: str) -> int | None:
    """A resourceVersion as the number it is on kube-apiserver (etcd's revision); None if not one."""
    return int(version) if version.isdigit() else None


class _Informer(Protocol):
    """The informer :class:`CatchUp` is mixed into (common/kube/informer.py): its cache, watch state
    and requests, and the catch-up's own state and methods."""

    kind: Kind
    watching: bool
    synced: asyncio.Event
    last_catch_up: tuple[float, float]
    _cache: dict[Key, Obj]
    _resource_version: str
    _rewatch_wanted: asyncio.Event
    _catch_up_to: int
    _moved: asyncio.Event
    _skip_through: int

    async def _get_body(self, params: list[tuple[str, str]], timeout: aiohttp.ClientTimeout) -> bytes: ...

    def _decode(self, body: bytes) -> dict[str, Any]: ...

    def _prepare(self, item: dict[str, Any]) -> Obj: ...

    def _deliver(self, changes: Sequence[Change]) -> None: ...

    async def _present(self) -> dict[str, Any]: ...

    def _take_whole(self, items: Sequence[dict[str, Any]], version: str, revision: int) -> None: ...

    def _advanced(self, bookmark: bool = False) -> None: ...


@dataclass(eq=False)
class CatchUp:
    """The catch-up's state and methods, mixed into :class:`~common.kube.informer.Informer`."""

    # catch_up: the watch is cut and resumed (short) without a list; the resourceVersion to pass
    # (0: not catching up), and an event set whenever the resourceVersion moves meanwhile.
    _rewatch_wanted: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _catch_up_to: int = field(default=0, init=False)
    _moved: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    # Set by _take_whole: the events up to this revision of the watch open then are dropped (0: none).
    _skip_through: int = field(default=0, init=False)
    # The last catch_up that succeeded: seconds to read the present, and in all.
    last_catch_up: tuple[float, float] = field(default=(0.0, 0.0), init=False)

    async def catch_up(self: _Informer, timeout: float) -> bool:
        """Have the live cache pass the apiserver's present without listing: True once the watch has
        delivered everything up to the resourceVersion a ``limit=1`` list read after this call (so
        every write acknowledged before the call is in the cache and was delivered to the handlers).

        The watch is cut as the read is sent, not once it is answered: the short watch that follows
        gets its bookmark as early as it can (kube-apiserver's bookmarks come on whole seconds), and
        a bookmark short of the present (sent before the read was answered) cuts it again at once.
        Only resourceVersions decide: how early the watch is cut changes how soon, never whether.
        ``last_catch_up`` says afterwards how long the read and the whole took.

        False when it cannot tell, and the caller lists (:meth:`relist`): the cache is not live, a
        resourceVersion is not a number (they are etcd revisions on kube-apiserver), or the watch has
        not passed it within ``timeout`` seconds (a stalled watch, an apiserver that sends no bookmark).
        """
        if not (self.watching and self.synced.is_set()):
            return False
        began = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                self._catch_up_to = _PRESENT_UNREAD
                self._rewatch_wanted.set()  # the watch open now gets its next bookmark in a minute
                try:
                    present = await self._present()
                    read = time.monotonic() - began
                    meta = present.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or "")
                    target = revision(version)
                    mine = revision(self._resource_version)
                    if target is None or mine is None:
                        return False
                    if mine < target and not meta.get("continue"):
                        # The read holds the whole collection (none, or one object): a list at the
                        # present, the cache set to it at once, no bookmark waited for.
                        self._take_whole(present.get("items") or [], version, target)
                        self.last_catch_up = (read, time.monotonic() - began)
                        return True
                    self._catch_up_to = target
                    while (mine := revision(self._resource_version)) is not None and mine < target:
                        await self._moved.wait()
                    self.last_catch_up = (read, time.monotonic() - began)
                    return mine is not None
                finally:
                    self._catch_up_to = 0
        except TimeoutError:
            log.info(
                "%s: watch did not pass the present resourceVersion within %gs",
                self.kind.kind,
                timeout,
            )
            return False

    async def _present(self: _Informer) -> dict[str, Any]:
        """The collection now, by a consistent ``limit=1`` list: its resourceVersion, and all of it
        when it holds at most one object (no ``continue``)."""
        params = [("limit", "1")]
        return self._decode(await self._get_body(params, aiohttp.ClientTimeout(total=30)))

    def _take_whole(self: _Informer, items: Sequence[dict[str, Any]], version: str, revision: int) -> None:
        """The whole collection at ``version``, read by :meth:`catch_up`: the cache becomes it (its
        difference delivered, as after a list) and the watch resumes from there. The events of the
        watch open now up to ``version`` are dropped: the cache already holds their outcome."""
        fresh = {object_key(obj): obj for obj in (self._prepare(item) for item in items)}
        changes = diff(self._cache, fresh)
        self._cache = fresh
        self._resource_version = version
        self._skip_through = revision
        self._rewatch_wanted.set()
        self._deliver(changes)
        self._advanced()

    def _advanced(self: _Informer, bookmark: bool = False) -> None:
        """The resourceVersion moved: wake a :meth:`catch_up` waiting for it; a bookmark short of
        its target cuts the watch (the next short watch's bookmark is the next chance)."""
        if self._catch_up_to:
            if bookmark and (revision(self._resource_version) or 0) < self._catch_up_to:
                self._rewatch_wanted.set()
            self._moved.set()
            self._moved = asyncio.Event()
