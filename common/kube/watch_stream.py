"""A watch's answer read as a stream: its newline-separated events (:func:`lines`, with the
inactivity timeout that finds a silent watch), and the initial events of a streaming list (WatchList,
KEP-3157: :func:`initial_events`). common/kube/informer.py reads its watches and streamed lists by
them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Final

import aiohttp

from gpuq_k8s.common.kube.errors import (
    TRANSPORT_FAILURES,
    ApiError,
    ProtocolError,
    status_error,
    transport_error,
)

# The annotation of the BOOKMARK that ends a streaming list's initial events (WatchList).
INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"


class Inactive(Exception):
    """Nothing (no event, no bookmark) arrived on the watch for the inactivity timeout."""


class InitialEventsUnended(ProtocolError):
    """A streaming list ended without the bookmark that ends its initial events (a server without
    WatchList)."""


def refuses_watch_list(err: ApiError) -> bool:
    """An apiserver that does not take WatchList's parameters: 400 Bad Request, 422 Invalid
    (``sendInitialEvents`` forbidden: its feature gate off)."""
    return err.status in (400, 422)


async def lines(stream: aiohttp.StreamReader, inactivity: float) -> AsyncIterator[bytes]:
    """Newline-separated watch events; raises :class:`Inactive` after ``inactivity`` seconds of silence.

    aiohttp's ``readline`` refuses lines over 128 KiB, and an object may be up to 1.5 MiB.
    """
    buffer = b""
    while True:
        try:
            async with asyncio.timeout(inactivity):
                try:
                    chunk = await stream.readany()
                except TRANSPORT_FAILURES as err:
                    raise transport_error(err) from err
        except TimeoutError:
            raise Inactive() from None
        if not chunk:
            if buffer.strip():
                yield buffer
            return
        if b"\n" not in chunk:
            buffer += chunk
            continue
        # One split per chunk: a chunk carrying hundreds of events is not re-sliced per event.
        split = (buffer + chunk).split(b"\n")
        buffer = split.pop()
        for line in split:
            if line.strip():
                yield line


async def initial_events(
    events: AsyncIterator[bytes], decode_event: Callable[[bytes], Any], page_size: int, path: str
) -> AsyncGenerator[tuple[list[dict[str, Any]], str], None]:
    """A streaming list's objects from its watch ``events`` (each ADDED, then a BOOKMARK annotated
    :data:`INITIAL_EVENTS_END` carrying the resourceVersion they are the state at), by ``page_size``,
    the last batch with that resourceVersion. An ERROR event raises its Status's error (Gone: the
    informer lists again); a stream that ends before the bookmark raises :class:`InitialEventsUnended`."""
    batch: list[dict[str, Any]] = []
    async for line in events:
        event = decode_event(line)
        kind = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, dict):
            raise ProtocolError(f"watch event without an object: {str(event)[:200]}")
        if kind == "ADDED":
            batch.append(raw)
            if len(batch) >= page_size:
                yield batch, ""
                batch = []
        elif kind == "BOOKMARK":
            meta = raw.get("metadata") or {}
            if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                yield batch, str(meta.get("resourceVersion") or "")
                return
        elif kind == "ERROR":
            raise status_error(raw)  # Gone: the loop lists again
        else:
            raise ProtocolError(f"{kind!r} event before the initial events of {path} ended")
    raise InitialEventsUnended(f"GET {path}: the streaming list ended before its last object")
