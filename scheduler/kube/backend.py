"""The Kubernetes :class:`~scheduler.backend.ClusterBackend`.

- ``bind`` and ``evict`` start a task (at most ``bind_concurrency`` API calls at once) and call the
  cycle's ``done`` from the event loop when the API answers, with a
  :class:`~scheduler.backend.Result`: a bind whose outcome is unknown (5xx, timeout) is settled by
  reading the pod, again and again if need be, never by a timer; a bind is not sent for a pod the
  watch shows deleted, deleting or bound (``settled``). A successful one leaves the pod assumed
  (see :mod:`scheduler.kube.feed`).
- ``pre_bind`` carries out the PreBind plugins' plans (common/model/prebind.py) before a bind: each
  write a merge patch through the same leader-gated client, then a wait on the informer caches
  (``lookup``; woken by :meth:`KubeBackend.objects_changed`, and every second) until the written
  objects show the versions the writes produced and the plan's condition is met, fails, or times
  out; a failure rolls the plans carried out back. The bind semaphore bounds the writes, not the
  waits (a wait may last the plan's timeout, ten minutes for volumes).
- Events, PodScheduled conditions and custom-resource statuses are only *recorded* here (the latest
  wish per pod or object); :meth:`KubeBackend.flush` writes them in batches. A pod that fails the same
  way a hundred times gets one condition write; a Queue whose usage changed with every one of 500
  binds gets one status patch per flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.kube import binding
from gpuq_k8s.common.kube.errors import Conflict, Invalid, NotFound, RequestFailed
from gpuq_k8s.common.kube.events import EventRecorder
from gpuq_k8s.common.kube.status import MERGE_PATCH, STRATEGIC_MERGE_PATCH, StatusWriter, call
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import (
    ApiWrite,
    Lookup,
    PreBindPlan,
    State,
    resource_version,
    version_reached,
)
from gpuq_k8s.scheduler.backend import SUCCESS, Done, Outcome, Result
from gpuq_k8s.scheduler.metrics import SchedulerMetrics

log = logging.getLogger(__name__)

DEFAULT_BIND_CONCURRENCY: Final = 64
# A bind whose outcome is unknown is settled by reading the pod: first after this, then doubling.
UNKNOWN_FIRST_READ: Final = 0.5
UNKNOWN_MAX_READ: Final = 10.0
# A PreBind wait looks at the caches on every change they report, and at least this often.
PRE_BIND_POLL: Final = 1.0
_SEEN: Final = {
    Result.DONE: "bound there already",
    Result.ELSEWHERE: "bound to another node",
    Result.GONE: "deleted or being deleted",
    Result.NOT_BOUND: "unbound",
}


def _outcome(found: binding.BindResult, node: str) -> Outcome | None:
    """The scheduler's view of what the API said (None: unknown, read the pod again)."""
    if found.unknown:
        return None
    if found.gone:
        return Outcome(Result.GONE, found.message)
    if found.bound_to == node:
        return SUCCESS
    return Outcome(Result.ELSEWHERE if found.bound_to else Result.NOT_BOUND, found.message)


@dataclass(frozen=True, slots=True)
class _Condition:
    pod: PodInfo
    reason: str
    message: str
    nominated: str | None


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
        on_status: Callable[[Kind, str, str, Mapping[str, Any]], None] = lambda *a: None,
        settled: Callable[[PodInfo, str], Result | None] = lambda pod, node: None,
        lookup: Lookup = lambda kind, namespace, name: None,
    ) -> None:
        self.api_client = api_client
        self.events = events
        self.statuses = statuses
        self.metrics = metrics
        self.on_bound = on_bound
        self.wake = wake
        self.may_write = may_write
        self.on_status = on_status
        self.settled = settled
        self.lookup = lookup
        self._changed = asyncio.Event()
        self._semaphore = asyncio.Semaphore(bind_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._conditions: dict[str, _Condition] = {}
        self._written: dict[str, tuple[str, str, str | None]] = {}
        self.bound = 0
        self.bind_failures = 0
        self.first_bind: float | None = None
        self.last_bind: float | None = None

    # -- ClusterBackend -----------------------------------------------------------------------------
    def bind(self, pod: PodInfo, node: str, done: Done) -> None:
        self._spawn(self._bind(pod, node, done), f"bind-{pod.key}")

    def pre_bind(self, pod: PodInfo, node: str, plans: Sequence[PreBindPlan], done: Done) -> None:
        self._spawn(self._pre_bind(pod, node, tuple(plans), done), f"prebind-{pod.key}")

    def roll_back(self, pod: PodInfo, plans: Sequence[PreBindPlan]) -> None:
        if any(plan.rollback for plan in plans):
            self._spawn(self._roll_back(pod, tuple(plans)), f"rollback-{pod.key}")

    def objects_changed(self) -> None:
        """The informers delivered a change: PreBind waits look at their caches again."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def evict(self, pod: PodInfo, reason: str, done: Done) -> None:
        """DisruptionTarget, then a DELETE with the victim's own grace period; ``done`` gets DONE once
        the API accepted it (the victim goes on counting until the watch shows it gone: design.md
        Semantics 18), NOT_BOUND when it failed. Pods tried meanwhile do not take the room: its
        preemptor is nominated and holds it (:mod:`scheduler.nominator`)."""
        self._spawn(self._evict(pod, reason, done), f"evict-{pod.key}")

    def record_event(self, event: EventRecord) -> None:
        self.events.record(event.obj, event.type, event.reason, event.message)

    def set_pod_condition(
        self, pod: PodInfo, reason: str, message: str, nominated_node: str | None = None
    ) -> None:
        if self._written.get(pod.key) == (reason, message, nominated_node):
            self._conditions.pop(pod.key, None)
            return
        self._conditions[pod.key] = _Condition(pod, reason, message, nominated_node)

    def patch_status(self, kind: Kind, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.statuses.put(kind.kind, namespace, name, status)
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
            outcome = await self._send_bind(pod, node)
        delay = UNKNOWN_FIRST_READ
        while outcome is None:
            # The bind may stand: the pod stays charged until the watch or a read of it says.
            await asyncio.sleep(delay)
            delay = min(delay * 2, UNKNOWN_MAX_READ)
            outcome = self._from_watch(pod, node)
            if outcome is None:
                found = await binding.read_binding(self.api_client, pod.namespace, pod.name, pod.uid)
                outcome = _outcome(found, node)
        if outcome.ok:
            now = time.monotonic()
            self.bound += 1
            self.first_bind = self.first_bind if self.first_bind is not None else now
            self.last_bind = now
            self._conditions.pop(pod.key, None)
            self._written.pop(pod.key, None)
            self.on_bound(pod.key)
        else:
            self.bind_failures += 1
            log.warning("%s", outcome.message)
        if outcome.result is not Result.NOT_BOUND:
            self._conditions.pop(pod.key, None)  # bound or gone: PodScheduled=False never applies
        try:
            done(outcome)
        except Exception:
            log.exception("bind completion of %s failed", pod.ref)
        self.wake()

    async def _send_bind(self, pod: PodInfo, node: str) -> Outcome | None:
        """Send the bind unless the watch settled it already or we may not write; None: unknown."""
        settled = self._from_watch(pod, node)
        if settled is not None:
            return settled
        if not self.may_write():
            return Outcome(Result.NOT_BOUND, "not the leader any more")
        log.debug("sending bind of pod %s to %s", pod.key, node)
        found = await binding.bind(self.api_client, pod.namespace, pod.name, pod.uid, node)
        if self.metrics is not None:
            label = "conflict" if found.conflict else "ok" if found.bound_to == node else "error"
            self.metrics.binds.labels(label).inc()
        return _outcome(found, node)

    def _from_watch(self, pod: PodInfo, node: str) -> Outcome | None:
        result = self.settled(pod, node)
        if result is None:
            return None
        return Outcome(result, f"not binding {pod.ref} to {node}: the watch shows it {_SEEN[result]}")

    async def _pre_bind(self, pod: PodInfo, node: str, plans: tuple[PreBindPlan, ...], done: Done) -> None:
        carried: list[PreBindPlan] = []
        outcome = SUCCESS
        for plan in plans:
            carried.append(plan)
            try:
                outcome = await self._carry_out(pod, node, plan)
            except GpuqError as err:  # an object the condition reads is malformed
                outcome = Outcome(Result.NOT_BOUND, plan.failure(str(err)))
            if not outcome.ok:
                log.warning("PreBind of %s on %s: %s", pod.ref, node, outcome.message)
                await self._roll_back(pod, tuple(carried))
                break
        try:
            done(outcome)
        except Exception:
            log.exception("PreBind completion of %s failed", pod.ref)
        self.wake()

    async def _carry_out(self, pod: PodInfo, node: str, plan: PreBindPlan) -> Outcome:
        """One plan: its writes, then the wait for its condition (see the module docstring)."""
        written: list[tuple[ApiWrite, str]] = []
        for write in plan.writes:
            error = await self._send(write)
            if isinstance(error, str):
                return Outcome(Result.NOT_BOUND, plan.failure(error))
            written.append((write, error[1]))
        deadline = time.monotonic() + plan.timeout
        while True:
            changed = self._changed  # taken before looking: a change while we look wakes the wait
            seen = self.settled(pod, node)
            if seen in (Result.GONE, Result.ELSEWHERE):
                return Outcome(seen, f"PreBind of {pod.ref} stopped: the watch shows it {_SEEN[seen]}")
            if all(self._caught_up(write, version) for write, version in written):
                progress = plan.ready(self.lookup)
                if progress.state is State.DONE:
                    return SUCCESS
                if progress.state is State.FAILED:
                    return Outcome(Result.NOT_BOUND, plan.failure(progress.message))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Outcome(Result.NOT_BOUND, plan.timed_out())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=min(remaining, PRE_BIND_POLL))

    def _caught_up(self, write: ApiWrite, version: str) -> bool:
        """The caches show ``write``'s object at least at ``version`` (or show it gone: the condition
        then says what that means)."""
        cached = self.lookup(write.kind, write.namespace, write.name)
        return cached is None or version_reached(resource_version(cached), version)

    async def _send(self, write: ApiWrite) -> str | tuple[ApiWrite, str]:
        """PATCH (or create, delete) ``write``; the resourceVersion it produced, or what went wrong."""
        if not self.may_write():
            return f"{write.ref}: not written: not the leader any more"
        try:
            async with self._semaphore:
                if write.verb == "PATCH":
                    content_type = STRATEGIC_MERGE_PATCH if write.strategic else MERGE_PATCH
                    reply = await call(
                        self.api_client, "PATCH", write.path, write.patch, content_type=content_type
                    )
                else:
                    body = write.patch if write.verb == "POST" else None
                    reply = await call(self.api_client, write.verb, write.path, body)
        except RequestFailed as err:
            return f"{write.ref}: {err}"
        if not reply.ok:
            return f"{write.ref}: {reply.message}"
        return write, resource_version(reply.body)

    async def _roll_back(self, pod: PodInfo, plans: tuple[PreBindPlan, ...]) -> None:
        for plan in reversed(plans):
            for write in plan.rollback:
                outcome = await self._send(write)
                if isinstance(outcome, str):
                    log.warning("rolling back PreBind of %s: %s", pod.ref, outcome)

    async def _evict(self, pod: PodInfo, reason: str, done: Done) -> None:
        async with self._semaphore:
            try:
                reply = await binding.preempt(self.api_client, pod.namespace, pod.name, pod.uid, reason)
                ok, message = reply.ok, reply.message
            except RequestFailed as err:
                ok, message = False, str(err)
        if not ok:
            log.warning("preempting %s failed: %s", pod.ref, message)
        elif self.metrics is not None:
            self.metrics.preemptions.inc()
        try:
            done(SUCCESS if ok else Outcome(Result.NOT_BOUND, f"preempting {pod.ref} failed: {message}"))
        except Exception:
            log.exception("eviction completion of %s failed", pod.ref)
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
                except RequestFailed as err:
                    log.warning("condition of %s not written: %s", c.pod.ref, err)
                    return
            if reply.ok:
                self._written[c.pod.key] = (c.reason, c.message, c.nominated)
            elif isinstance(reply.error, (NotFound, Conflict)):  # gone, or re-created (its UID)
                return
            elif isinstance(reply.error, Invalid) and await self._bound_meanwhile(c.pod):
                # Sent before our own bind of the pod was answered: the apiserver refuses a
                # nominatedNodeName on a bound pod, and PodScheduled=False no longer applies.
                log.debug("condition of %s not written: bound meanwhile", c.pod.ref)
            else:
                log.warning("condition of %s not written: %s", c.pod.ref, reply.message)

        await asyncio.gather(*(one(c) for c in conditions.values()))
        await self.statuses.flush()
        await self.events.flush()

    async def _bound_meanwhile(self, pod: PodInfo) -> bool:
        """The pod (this UID) is bound now: a condition refused as invalid came too late."""
        found = await binding.read_binding(self.api_client, pod.namespace, pod.name, pod.uid)
        return bool(found.bound_to)

    def forget_pod(self, key: str) -> None:
        self._conditions.pop(key, None)
        self._written.pop(key, None)

    async def drain(self, timeout: float = 10.0) -> bool:
        """Wait for binds and evictions in flight (graceful shutdown), then flush; all within
        ``timeout`` (the flush gets what is left, at least a second): a write that hangs must not keep
        a stopping scheduler alive past its grace period (what is left unwritten is the next
        leader's to write, from the state it lists).

        Returns whether every write was answered. A write given up may still reach the apiserver
        after this process stopped waiting for it (the request was sent): the caller must then not
        hand leadership over at once, or the next leader could list before that write lands and
        decide from a cache without it (a bind counted nowhere: a node or a quota spent twice)."""
        deadline = time.monotonic() + timeout
        answered = True
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            answered = not pending
        try:
            await asyncio.wait_for(self.flush(), max(1.0, deadline - time.monotonic()))
        except TimeoutError:
            log.warning("writes still pending when stopping: left to the next leader")
            answered = False
        return answered
