"""The Kubernetes :class:`~scheduler.backend.ClusterBackend`.

- ``bind`` and ``evict`` start a task (at most ``bind_concurrency`` API calls at once) and call the
  cycle's ``done`` from the event loop when the API answers: a failed bind makes the cycle unreserve
  and requeue; a successful one leaves the pod assumed (see :mod:`scheduler.kube.feed`).
- Events, PodScheduled conditions and custom-resource statuses are only *recorded* here (the latest
  wish per pod or object); :meth:`KubeBackend.flush` writes them in batches. A pod that fails the same
  way a hundred times gets one condition write; a Queue whose usage changed with every one of 500
  binds gets one status patch per flush.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from common.kube import binding
from common.kube.events import EventRecorder
from common.kube.status import StatusWriter
from common.model.events import EventRecord
from common.model.pods import PodInfo
from scheduler.backend import Done, Outcome
from scheduler.metrics import SchedulerMetrics

log = logging.getLogger(__name__)

DEFAULT_BIND_CONCURRENCY: Final = 16


@dataclass(frozen=True, slots=True)
class _Condition:
    pod: PodInfo
    reason: str
    message: str
    nominated: str


class KubeBackend:
    def __init__(
        self,
        api_client: Any,
        *,
        events: EventRecorder,
        statuses: StatusWriter,
        metrics: SchedulerMetrics | None = None,
        bind_concurrency: int = DEFAULT_BIND_CONCURRENCY,
        on_bound: Callable[[str], None] = lambda key: None,
        wake: Callable[[], None] = lambda: None,
        may_write: Callable[[], bool] = lambda: True,
        on_status: Callable[[str, str, str, Mapping[str, Any]], None] = lambda *a: None,
        on_evict_failed: Callable[[str], None] = lambda key: None,
    ) -> None:
        self.api_client = api_client
        self.events = events
        self.statuses = statuses
        self.metrics = metrics
        self.on_bound = on_bound
        self.wake = wake
        self.may_write = may_write
        self.on_status = on_status
        self.on_evict_failed = on_evict_failed
        self._semaphore = asyncio.Semaphore(bind_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._conditions: dict[str, _Condition] = {}
        self._written: dict[str, tuple[str, str, str]] = {}
        self.bound = 0
        self.bind_failures = 0
        self.first_bind: float | None = None
        self.last_bind: float | None = None

    # -- ClusterBackend -----------------------------------------------------------------------------
    def bind(self, pod: PodInfo, node: str, done: Done) -> None:
        self._spawn(self._bind(pod, node, done), f"bind-{pod.key}")

    def evict(self, pod: PodInfo, reason: str, done: Done) -> None:
        """Optimistic, like the in-memory backend: the victim stops counting *now*, before the
        DELETE is answered. Otherwise the pods tried while the DELETE is in flight still see the
        victim's usage, and each of them preempts another victim for the same room (the e2e test
        of ElasticQuota preemption caught exactly that). A DELETE that fails puts the victim back
        from the informer cache (``on_evict_failed``)."""
        try:
            done(Outcome(True))
        except Exception:
            log.exception("eviction completion of %s failed", pod.ref)
        self._spawn(self._evict(pod, reason), f"evict-{pod.key}")

    def record_event(self, event: EventRecord) -> None:
        self.events.record(event.obj, event.type, event.reason, event.message)

    def set_pod_condition(self, pod: PodInfo, reason: str, message: str, nominated_node: str = "") -> None:
        if self._written.get(pod.key) == (reason, message, nominated_node):
            self._conditions.pop(pod.key, None)
            return
        self._conditions[pod.key] = _Condition(pod, reason, message, nominated_node)

    def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.statuses.put(kind, namespace, name, status)
        self.on_status(kind, namespace, name, status)

    # -- tasks ----------------------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def _bind(self, pod: PodInfo, node: str, done: Done) -> None:
        async with self._semaphore:
            if not self.may_write():
                result = binding.BindResult(False, message="not the leader any more")
            else:
                try:
                    result = await binding.bind(self.api_client, pod.namespace, pod.name, pod.uid, node)
                except (aiohttp.ClientError, TimeoutError, OSError) as err:
                    result = binding.BindResult(
                        False, message=f"binding {pod.ref}: {err or type(err).__name__}"
                    )
        if self.metrics is not None:
            self.metrics.binds.labels("conflict" if result.conflict else "ok" if result.ok else "error").inc()
        if result.ok:
            now = time.monotonic()
            self.bound += 1
            self.first_bind = self.first_bind if self.first_bind is not None else now
            self.last_bind = now
            self._conditions.pop(pod.key, None)
            self._written.pop(pod.key, None)
            self.on_bound(pod.key)
        else:
            self.bind_failures += 1
            log.warning("%s", result.message)
        try:
            done(Outcome(result.ok, result.message))
        except Exception:
            log.exception("bind completion of %s failed", pod.ref)
        self.wake()

    async def _evict(self, pod: PodInfo, reason: str) -> None:
        async with self._semaphore:
            try:
                reply = await binding.preempt(self.api_client, pod.namespace, pod.name, pod.uid, reason)
                ok, message = reply.ok, reply.message
            except (aiohttp.ClientError, TimeoutError, OSError) as err:
                ok, message = False, str(err) or type(err).__name__
        if not ok:
            log.warning("preempting %s failed: %s; it counts again", pod.ref, message)
            self.on_evict_failed(pod.key)
        self.wake()

    # -- batched writes -------------------------------------------------------------------------------
    async def flush(self) -> None:
        """Write pending conditions, statuses and events (each at most once)."""
        conditions, self._conditions = self._conditions, {}
        semaphore = asyncio.Semaphore(8)

        async def one(c: _Condition) -> None:
            async with semaphore:
                try:
                    reply = await binding.set_condition(
                        self.api_client,
                        c.pod.namespace,
                        c.pod.name,
                        c.pod.uid,
                        binding.condition_patch(c.reason, c.message, c.nominated),
                    )
                except (aiohttp.ClientError, TimeoutError, OSError) as err:
                    log.warning("condition of %s not written: %s", c.pod.ref, err)
                    return
            if reply.ok:
                self._written[c.pod.key] = (c.reason, c.message, c.nominated)
            elif reply.status not in (404, 409):
                log.warning("condition of %s not written: %s", c.pod.ref, reply.message)

        await asyncio.gather(*(one(c) for c in conditions.values()))
        await self.statuses.flush()
        await self.events.flush()

    def forget_pod(self, key: str) -> None:
        self._conditions.pop(key, None)
        self._written.pop(key, None)

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait for binds and evictions in flight (graceful shutdown), then flush."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
        await self.flush()
