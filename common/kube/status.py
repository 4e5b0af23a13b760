"""Writing to the API server: one raw request helper, and batched status writes of custom resources.

Status of Queues, PodGroups, ElasticQuotas and GPUResourceQuotas changes with every bind; writing it
once per pod would make the scheduler's write rate proportional to its bind rate and would race with
itself. :class:`StatusWriter` keeps a *dirty set* instead (the latest wanted status per object), and a
flush sends each dirty object once, as a JSON merge patch on its ``/status`` subresource (on the object
itself for a kind whose CRD has none: Volcano's PodGroup), with bounded concurrency. The patch is the RFC
7386 difference between what the informer last saw and what is wanted, so a key that disappears (an
ElasticQuota resource whose usage dropped to zero) is deleted with ``null`` rather than left stale, and an
unchanged status is not written at all.

The informer lags behind our own writes: until its cache shows our last write, the object holds what
we wrote, not what the cache says, and the difference is taken from that (found by issue 11's chaos
soak: usage going A -> B -> A within the lag left B written, the second A looking like no change).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gpuq_k8s.common.kube.client import request
from gpuq_k8s.common.kube.errors import ApiError, KubeError, NotFound, api_error, succeeded
from gpuq_k8s.common.model.backoff import backoff
from gpuq_k8s.common.model.kinds import STATUS_IN_MAIN_RESOURCE, Kind

log = logging.getLogger(__name__)

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
_TIMEOUT: Final = 30.0  # seconds, the whole request


@dataclass(frozen=True, slots=True)
class Reply:
    """An API answer: the HTTP status and the decoded JSON body (``{}`` when there is none).

    Callers ask what an answer means through its type, never its number: ``ok``, or ``error`` (the
    :class:`~common.kube.errors.ApiError` of the status: ``isinstance(reply.error, NotFound)``), or
    :meth:`raise_for_status`."""

    status: int
    body: Mapping[str, Any]

    @property
    def ok(self) -> bool:
        return succeeded(self.status)

    @property
    def error(self) -> ApiError | None:
        """The typed error of an answer that is not a success (:func:`~common.kube.errors.api_error`),
        else None."""
        return None if succeeded(self.status) else api_error(self.status, self.body)

    def raise_for_status(self) -> Reply:
        """This reply when it is a success; else raise its :attr:`error`."""
        error = self.error
        if error is not None:
            raise error
        return self

    @property
    def message(self) -> str:
        """The apiserver's own words (a Status object's ``message``), else the HTTP status."""
        return str(self.body.get("message") or f"HTTP {self.status}")


async def call(
    api_client: Any,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = JSON,
    query: list[tuple[str, str]] | None = None,
) -> Reply:
    """One request through ``api_client``'s connection pool and credentials. Never raises on an
    error status (the caller decides what a NotFound or a Conflict means: ``Reply.error``,
    ``Reply.raise_for_status``); raises :class:`~common.kube.errors.RequestFailed` when there is no
    answer (a :class:`~common.kube.errors.TransportError`, or a write the leadership gate refused)."""
    status, raw = await request(
        api_client, method, path, body=body, content_type=content_type, query=query or [], timeout=_TIMEOUT
    )
    try:
        decoded = orjson.loads(raw) if raw else {}
    except ValueError:
        decoded = {"message": raw[:300].decode("utf-8", "replace")}
    return Reply(status, decoded if isinstance(decoded, dict) else {})


def merge_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch turning ``old`` into ``new``: changed keys, ``None`` for removed ones.

    Lists and scalars are replaced whole (merge patch has no list semantics); nested objects recurse.
    ``{}`` means nothing to write.
    """
    old = old or {}
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    patch.update(status_patch(old, new))
    return patch


def status_patch(seen: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch for a ``status`` of which we own only the top-level keys in ``wanted``.

    Other writers' keys (a Queue's ``state``, set by Volcano's controller) are left alone; inside a
    key we own, the value is made exactly ``wanted``'s (absent sub-keys deleted with ``None``).
    :func:`merge_patch` is this plus ``None`` for the keys ``wanted`` lacks.
    """
    seen = seen or {}
    patch: dict[str, Any] = {}
    for key, value in wanted.items():
        before = seen.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            inner = merge_patch(before, value)
            if inner:
                patch[key] = inner
        elif key not in seen or before != value:
            patch[key] = _plain(value)
    return patch


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


StatusKey = tuple[str, str, str]  # kind, namespace, name
CurrentStatus = Callable[[str, str, str], Mapping[str, Any] | None]


class StatusWriter:
    """The dirty set of custom-resource statuses and the batched flush that writes them.

    ``current(kind, namespace, name)`` returns the object's status as the informer last saw it (or
    None when the object is unknown: then nothing is written, there is nothing to patch).
    """

    def __init__(
        self,
        api_client: Any,
        kinds: Mapping[str, Kind],
        current: CurrentStatus,
        *,
        concurrency: int = 8,
        backoff: tuple[float, float] = (0.5, 30.0),
        clock: Callable[[], float] = time.monotonic,
        on_written: Callable[[str], None] = lambda kind: None,
    ) -> None:
        self.api_client = api_client
        self.kinds = dict(kinds)
        self.on_written = on_written  # each patch the API accepted, by kind (a metric)
        self.current = current
        self.concurrency = concurrency
        self._dirty: dict[StatusKey, Mapping[str, Any]] = {}
        self.writes = 0
        self.failures = 0
        self.clock = clock
        self.backoff = backoff
        # Per object: consecutive failed writes and when to try it again. One object whose patch
        # keeps failing (a webhook or validation rejecting it) must not hold the others back.
        self._failing: dict[StatusKey, tuple[int, float]] = {}
        # Per object: the status we last wrote, and the cached status it was written over.
        self._written: dict[StatusKey, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
        # Kinds found without the status subresource (Volcano's PodGroup CRD): patched on the object.
        self._main_resource: set[str] = set()

    def put(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Want ``status`` on the object; replaces any not-yet-written wish for the same object."""
        if kind not in self.kinds:
            log.warning("no status subresource known for %s; status of %s/%s dropped", kind, namespace, name)
            return
        ns = namespace if self.kinds[kind].namespaced else ""
        self._dirty[(kind, ns, name)] = status

    @property
    def pending(self) -> int:
        return len(self._dirty)

    async def flush(self) -> int:
        """Write every dirty status once; returns how many patches were sent."""
        now = self.clock()
        batch = {k: v for k, v in self._dirty.items() if k not in self._failing or self._failing[k][1] <= now}
        if not batch:
            return 0
        for key in batch:
            del self._dirty[key]
        semaphore = asyncio.Semaphore(self.concurrency)
        sent = 0

        async def one(key: StatusKey, status: Mapping[str, Any]) -> None:
            nonlocal sent
            kind, namespace, name = key
            seen = self.current(kind, namespace, name)
            if seen is None:
                return
            patch = status_patch(self._holds(key, seen), status)
            if not patch:
                self._failing.pop(key, None)
                return
            record = self.kinds[kind]
            main = kind in self._main_resource
            path = record.object_path(namespace, name) + ("" if main else "/status")
            try:
                async with semaphore:
                    reply = await call(
                        self.api_client, "PATCH", path, {"status": patch}, content_type=MERGE_PATCH
                    )
                    if isinstance(reply.error, NotFound) and not main and record in STATUS_IN_MAIN_RESOURCE:
                        # Volcano's PodGroup CRD declares no status subresource (its scheduler
                        # updates the whole object): the status is part of the object itself.
                        reply = await call(
                            self.api_client,
                            "PATCH",
                            record.object_path(namespace, name),
                            {"status": patch},
                            content_type=MERGE_PATCH,
                        )
                        if reply.ok:
                            log.info("%s has no status subresource: status patched on the object", kind)
                            self._main_resource.add(kind)
                reply.raise_for_status()
            except NotFound:
                self._failing.pop(key, None)  # the object is gone: nothing to write
                return
            except KubeError as err:
                self.failures += 1
                log.warning("status of %s %s/%s not written: %s", kind, namespace, name, err)
                # Keep the wish unless a newer one arrived meanwhile; retried after its backoff.
                self._dirty.setdefault(key, status)
                rounds = self._failing.get(key, (0, 0.0))[0] + 1
                self._failing[key] = (rounds, self.clock() + backoff(rounds, *self.backoff))
                return
            self._failing.pop(key, None)
            sent += 1
            self.on_written(kind)
            self._written[key] = (status, seen)

        await asyncio.gather(*(one(key, status) for key, status in batch.items()))
        self.writes += sent
        return sent

    def _holds(self, key: StatusKey, seen: Mapping[str, Any]) -> Mapping[str, Any]:
        """What the object's status is now, as far as we know: the cache's, unless the cache still
        shows what it showed when we last wrote (the watch has not delivered our write): then the
        keys we wrote hold what we wrote."""
        written = self._written.get(key)
        if written is None or written[1] != seen:
            return seen
        return {**seen, **written[0]}

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """The object is gone: drop a status not yet written for it."""
        self._dirty.pop((kind, namespace, name), None)
        self._failing.pop((kind, namespace, name), None)
        self._written.pop((kind, namespace, name), None)
