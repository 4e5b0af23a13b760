"""events.k8s.io/v1 Events, aggregated so that a pod retried every few seconds makes one Event.

Like client-go's ``tools/events`` broadcaster: events are keyed by (regarding object, reason, action,
type); the first occurrence creates an Event, later ones only bump an in-memory ``series`` (count and
lastObservedTime), and a flush patches each changed series at most once per ``series_interval``.
An Event's ``note`` is immutable (kube-apiserver refuses the patch: "field is immutable"), so a series
whose latest note differs from the one written starts a new Event with it instead (the reason for
waiting changed: "available 1" became "available 3"), at the same pace. A pending pod that fails
100 times in a minute costs one create and a handful of patches, not 100 objects. Series older
than ``forget_after`` start afresh (a new Event), as client-go's 6-minute isomorphic window does.
Creation and patching are best-effort: an event that cannot be written is logged and dropped,
never retried forever.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from gpuq_k8s.common.kube.errors import NotFound, RequestFailed
from gpuq_k8s.common.kube.status import MERGE_PATCH, call
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.wire import split_ref

log = logging.getLogger(__name__)

ACTION: Final = "Scheduling"
_MAX_SERIES: Final = 10_000
_MAX_NOTE: Final = 1024  # events.k8s.io/v1 rejects a longer note

# ``Kind/namespace/name`` or ``Kind/name`` -> (apiVersion, uid) of the object, or None when unknown.
Resolver = Callable[[str], tuple[str, str] | None]


def micro_time(at: float) -> str:
    """MicroTime as the API wants it for eventTime and series.lastObservedTime."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class Series:
    name: str = ""  # the Event's metadata.name once created
    namespace: str = ""
    count: int = 1
    first: float = 0.0
    last: float = 0.0
    note: str = ""
    written: str = ""  # the note of the Event written (immutable there)
    dirty: bool = False
    busy: bool = False  # a write of it in flight: the next flush leaves it to that write's end
    flushed: float = 0.0
    body: dict[str, Any] = field(default_factory=dict)


def event_body(
    ref: str,
    type_: str,
    reason: str,
    note: str,
    *,
    at: float,
    controller: str,
    instance: str,
    resolve: Resolver | None = None,
) -> dict[str, Any]:
    """A new events.k8s.io/v1 Event about ``ref``; cluster-scoped objects' events go to ``default``."""
    kind, namespace, name = split_ref(ref)
    regarding: dict[str, Any] = {"kind": kind, "name": name}
    if namespace:
        regarding["namespace"] = namespace
    known = resolve(ref) if resolve is not None else None
    if known is not None:
        regarding["apiVersion"], regarding["uid"] = known
    return {
        "apiVersion": kinds.EVENT.api_version,
        "kind": kinds.EVENT.kind,
        "metadata": {"name": _event_name(name), "namespace": namespace or "default"},
        "eventTime": micro_time(at),
        "reportingController": controller,
        "reportingInstance": instance,
        "action": ACTION,
        "reason": reason,
        "type": type_,
        "note": note[:_MAX_NOTE],
        "regarding": regarding,
    }


@dataclass(eq=False)
class EventRecorder:
    """Aggregates events in memory; :meth:`flush` writes them (create new, patch changed series)."""

    api_client: Any
    _: KW_ONLY
    controller: str
    instance: str
    resolve: Resolver | None = None
    series_interval: float = 10.0
    forget_after: float = 360.0
    clock: Callable[[], float] = time.time
    concurrency: int = 8
    _series: OrderedDict[tuple[str, str, str], Series] = field(default_factory=OrderedDict, init=False)
    created: int = field(default=0, init=False)
    patched: int = field(default=0, init=False)
    dropped: int = field(default=0, init=False)

    def record(self, ref: str, type_: str, reason: str, note: str) -> None:
        now = self.clock()
        key = (ref, type_, reason)
        series = self._series.get(key)
        if series is not None and now - series.last > self.forget_after:
            series = None
        if series is None:
            body = event_body(
                ref,
                type_,
                reason,
                note,
                at=now,
                controller=self.controller,
                instance=self.instance,
                resolve=self.resolve,
            )
            self._series[key] = Series(first=now, last=now, note=note, dirty=True, body=body)
        else:
            series.count += 1
            series.last = now
            series.note = note
            series.dirty = True
        self._series.move_to_end(key)
        while len(self._series) > _MAX_SERIES:
            self._series.popitem(last=False)

    def forget(self, ref: str) -> None:
        """The object is gone: its series will not be patched again."""
        for key in [k for k in self._series if k[0] == ref]:
            del self._series[key]

    def count(self, ref: str, reason: str) -> int:
        """How many times ``reason`` was recorded for ``ref`` in its current series (0 if none)."""
        return sum(s.count for (r, _, why), s in self._series.items() if r == ref and why == reason)

    async def flush(self, *, force: bool = False) -> None:
        now = self.clock()
        due = [
            s
            for s in self._series.values()
            if s.dirty and not s.busy and (not s.name or force or now - s.flushed >= self.series_interval)
        ]
        if not due:
            return
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(series: Series) -> None:
            # One write per series at a time: flushes overlap (a write may outlast the interval), and
            # a second write of the same series would create its Event twice, or patch the count of
            # an Event a note change has just restarted at 1 (kube-apiserver: "series.count: should
            # be at least 2"; 85 refusals in a long day).
            series.dirty = False
            series.busy = True
            series.flushed = now
            try:
                async with semaphore:
                    await (self._patch(series) if series.name else self._create(series))
            except RequestFailed as err:
                self.dropped += 1
                log.warning("event not written: %s", err or type(err).__name__)
            finally:
                series.busy = False

        await asyncio.gather(*(one(s) for s in due))

    async def _create(self, series: Series) -> None:
        body = series.body
        meta = body["metadata"]
        if series.count > 1:
            body["series"] = {"count": series.count, "lastObservedTime": micro_time(series.last)}
            body["note"] = series.note[:_MAX_NOTE]
        reply = await call(self.api_client, "POST", _events_path(meta["namespace"]), body)
        if reply.ok:
            series.name, series.namespace = meta["name"], meta["namespace"]
            series.written = str(body.get("note") or "")
            self.created += 1
        else:
            self.dropped += 1
            log.warning("event %s %s not created: %s", body["reason"], meta["name"], reply.message)

    async def _patch(self, series: Series) -> None:
        note = series.note[:_MAX_NOTE]
        if note != series.written:  # immutable on the Event: a new Event says it
            series.name, series.count, series.first = "", 1, series.last
            series.body["metadata"]["name"] = _event_name(series.body["regarding"]["name"])
            series.body["note"] = note
            series.body["eventTime"] = micro_time(series.last)
            series.body.pop("series", None)
            await self._create(series)
            return
        if series.count < 2:
            return  # the Event says it once already: a series starts at 2
        patch: Mapping[str, Any] = {
            "series": {"count": series.count, "lastObservedTime": micro_time(series.last)},
        }
        path = f"{_events_path(series.namespace)}/{series.name}"
        reply = await call(self.api_client, "PATCH", path, patch, content_type=MERGE_PATCH)
        if reply.ok:
            self.patched += 1
        elif isinstance(reply.error, NotFound):
            # Expired by the apiserver's event TTL: start a fresh Event next time.
            series.name = ""
            series.body["metadata"]["name"] = _event_name(series.body["regarding"]["name"])
            series.dirty = True
        else:
            self.dropped += 1
            log.warning("event series %s not updated: %s", series.name, reply.message)


_PROCESS = secrets.token_hex(3)
_SEQUENCE = itertools.count()


def _event_name(regarding: str) -> str:
    """Unique per process without a syscall per event (``os.urandom`` showed up in profiles):
    a random per-process prefix and a counter, as client-go uses the time in nanoseconds."""
    return f"{regarding}.{_PROCESS}{next(_SEQUENCE):x}"


def _events_path(namespace: str) -> str:
    return kinds.EVENT.collection(namespace)
