"""The scheduling queue: active, backoff, unschedulable and gated pools (kube-scheduler's PriorityQueue).

* active: a heap in queue order (the QueueSort plugin's key: priority high first, then creation
  time, then namespace/name - design.md "gpuq simulate");
* backoff: pods that failed recently wait ``initial * 2^(attempts-1)`` seconds, at most ``maximum``;
* unschedulable: pods parked until a :class:`ClusterEvent` that one of the plugins that rejected them
  cares about, and whose queueing hint (if it has one) says the change may help; then they go through
  backoff (or straight to active once their backoff has passed);
* gated: pods a PreEnqueue plugin keeps out (``spec.schedulingGates``): never attempted, never in the
  unschedulable flush; each update of the pod (:meth:`SchedulingQueue.add`) asks the PreEnqueue plugins
  again, and so does an event the gating plugin registered.

Nothing here polls: a parked pod costs nothing until an event moves it, and an event only looks at the
pods parked under a plugin that registered it (an index by event). The clock is injected, so
the simulator can run on virtual time and the cluster scheduler on a monotonic clock.

With queue-order plugins configured (``queue_order``: the pod's Queue and the framework's queue
comparison), active pods are kept per Queue and :meth:`SchedulingQueue.pop` takes the head of the
Queue that orders first (Volcano's allocate: queues by share, then jobs and tasks within), so a queue
below its share is served before one above it; equal queues go by the heads' sort keys.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model.backoff import backoff
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.cluster_events import DEFAULT_EVENTS
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent, QueueingHint
from gpuq_k8s.scheduler.framework.status import Status

DEFAULT_INITIAL_BACKOFF: Final = 1.0
DEFAULT_MAX_BACKOFF: Final = 10.0
UNSCHEDULABLE: Final = "unschedulable"
GATED: Final = "gated"
_WAITING: Final = (UNSCHEDULABLE, GATED)


@dataclass(slots=True)
class QueuedPod:
    pod: PodInfo
    sort_key: tuple[Any, ...]
    attempts: int = 0
    rejected_by: frozenset[str] = frozenset()
    backoff_until: float = 0.0
    pool: str = ""
    message: str = ""
    seq: int = field(default=0)
    parked_at: float = 0.0  # when it last went to the unschedulable pool
    park: int = 0  # which parking this is: the event index's entries name it


class SchedulingQueue:
    def __init__(
        self,
        sort_key: Callable[[PodInfo], tuple[Any, ...]],
        clock: Callable[[], float],
        *,
        interest: Mapping[str, frozenset[ClusterEvent]] | None = None,
        hints: Mapping[str, QueueingHint] | None = None,
        pre_enqueue: Callable[[PodInfo], Status] | None = None,
        initial_backoff: float = DEFAULT_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        live_keys: bool = False,
        queue_order: tuple[Callable[[PodInfo], str], Callable[[str, str], int]] | None = None,
    ) -> None:
        self._sort_key = sort_key
        # Keys that grow while pods wait (drf shares): re-read at the head (see pop).
        self._live_keys = live_keys
        self._clock = clock
        self._interest = dict(interest or {})
        self._hints = dict(hints or {})
        self._pre_enqueue = pre_enqueue
        # event -> the pods waiting (parked or gated) under a plugin that registered it, by key, with
        # the park they were indexed at (an entry of an earlier park is stale and dropped when met).
        self._waiting: dict[ClusterEvent, dict[str, int]] = {}
        self._events_of: dict[frozenset[str], frozenset[ClusterEvent]] = {}
        self._parks = itertools.count(1)
        self._initial = initial_backoff
        self._max = max_backoff
        self._pods: dict[str, QueuedPod] = {}
        self._active: list[tuple[tuple[Any, ...], int, str]] = []
        self._queue_order = queue_order
        self._by_queue: dict[str, list[tuple[tuple[Any, ...], int, str]]] = {}
        self._backoff: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        # event -> parked pods waiting for it: key -> the seq it was parked with (stale entries, of
        # pods since moved or parked again, are dropped when met).
        self._parked: dict[ClusterEvent, dict[str, int]] = {}

    # -- pools --------------------------------------------------------------------------------------
    def add(self, pod: PodInfo) -> None:
        """A new pending pod, or an update of a queued one (keeps its attempts). Unless it is active
        already, the PreEnqueue plugins are asked first: a refused pod goes (or stays) gated."""
        queued = self._pods.get(pod.key)
        if queued is None:
            queued = self._pods[pod.key] = QueuedPod(pod, self._sort_key(pod))
        else:
            queued.pod = pod
        if queued.pool != "active" and not self._gate(queued):
            self._to_active(queued)

    def _gate(self, queued: QueuedPod) -> bool:
        """Ask the PreEnqueue plugins; True (the pod is gated now) when one refuses."""
        if self._pre_enqueue is None:
            return False
        status = self._pre_enqueue(queued.pod)
        if status.is_success:
            if queued.pool == GATED:
                self._unindex(queued)
            return False
        if queued.pool in _WAITING:
            self._unindex(queued)
        queued.pool = GATED
        queued.message = status.message
        queued.rejected_by = frozenset({status.plugin}) if status.plugin else frozenset()
        self._index(queued)
        return True

    def _to_active(self, queued: QueuedPod) -> None:
        if self._live_keys:
            queued.sort_key = self._sort_key(queued.pod)
        queued.pool = "active"
        queued.seq = next(self._seq)
        entry = (queued.sort_key, queued.seq, queued.pod.key)
        if self._queue_order is None:
            heapq.heappush(self._active, entry)
        else:
            heapq.heappush(self._by_queue.setdefault(self._queue_order[0](queued.pod), []), entry)

    def _to_backoff(self, queued: QueuedPod) -> None:
        queued.pool = "backoff"
        queued.seq = next(self._seq)
        heapq.heappush(self._backoff, (queued.backoff_until, queued.seq, queued.pod.key))

    def _flush_backoff(self) -> None:
        now = self._clock()
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, key = heapq.heappop(self._backoff)
            queued = self._pods.get(key)
            if queued is not None and queued.pool == "backoff" and queued.seq == seq:
                self._to_active(queued)

    def _current(self, entry: tuple[tuple[Any, ...], int, str]) -> QueuedPod | None:
        queued = self._pods.get(entry[2])
        if queued is not None and queued.pool == "active" and queued.seq == entry[1]:
            return queued
        return None

    def pop(self) -> PodInfo | None:
        """The next pod in queue order, or None when no pod is ready to try now."""
        self._flush_backoff()
        heap = self._active if self._queue_order is None else self._first_queue()
        while heap:
            seq, key = heap[0][1], heap[0][2]
            queued = self._current(heapq.heappop(heap))
            if queued is not None:
                if self._live_keys and heap:
                    # A key that grew since it was pushed goes back behind the pods now ahead of
                    # it. Exact as long as keys only grow while pods wait (a share falls only when
                    # a pod leaves, and the pod is then pushed again with a fresh key at its retry).
                    key_now = self._sort_key(queued.pod)
                    if key_now != queued.sort_key:
                        queued.sort_key = key_now
                        if (key_now, seq) > heap[0][:2]:
                            heapq.heappush(heap, (key_now, seq, key))
                            continue
                queued.pool = "in-flight"
                queued.attempts += 1
                return queued.pod
        return None

    def _first_queue(self) -> list[tuple[tuple[Any, ...], int, str]]:
        """The heap of the Queue that orders first among those with an active pod."""
        assert self._queue_order is not None
        compare = self._queue_order[1]
        best: tuple[str, list[tuple[tuple[Any, ...], int, str]]] | None = None
        for name in sorted(self._by_queue):
            heap = self._by_queue[name]
            while heap and self._current(heap[0]) is None:
                heapq.heappop(heap)
            if not heap:
                del self._by_queue[name]
                continue
            if best is None:
                best = (name, heap)
                continue
            verdict = compare(name, best[0])
            if verdict < 0 or (verdict == 0 and heap[0][:2] < best[1][0][:2]):
                best = (name, heap)
        return best[1] if best is not None else []

    def done(self, key: str) -> None:
        """The pod was scheduled (or deleted): forget it."""
        queued = self._pods.pop(key, None)
        if queued is not None and queued.pool in _WAITING:
            self._unindex(queued)

    delete = done

    def unschedulable(self, pod: PodInfo, rejected_by: Iterable[str], message: str = "") -> None:
        """Park a pod that failed an attempt until an event its rejecting plugins care about."""
        queued = self._pods.get(pod.key)
        if queued is None:
            queued = self._pods[pod.key] = QueuedPod(pod, self._sort_key(pod), attempts=1)
        elif queued.pool in _WAITING:
            self._unindex(queued)
        queued.pod = pod
        queued.rejected_by = frozenset(rejected_by)
        queued.message = message
        queued.parked_at = self._clock()
        queued.backoff_until = queued.parked_at + self.backoff_duration(queued.attempts)
        queued.pool = UNSCHEDULABLE
        self._index(queued)

    def requeue(self, pod: PodInfo) -> None:
        """Retry after backoff regardless of events (an error, not a verdict on the cluster)."""
        queued = self._pods.get(pod.key)
        if queued is None:
            self.add(pod)
            return
        queued.backoff_until = self._clock() + self.backoff_duration(queued.attempts)
        self._to_backoff(queued)

    def activate(self, key: str) -> None:
        """Move a queued pod to active now, skipping its backoff (a preemptor whose victims are gone)."""
        queued = self._pods.get(key)
        if queued is not None and queued.pool not in ("active", GATED):
            if queued.pool == UNSCHEDULABLE:
                self._unindex(queued)
            self._to_active(queued)

    def backoff_duration(self, attempts: int) -> float:
        return backoff(attempts, self._initial, self._max)

    # -- events --------------------------------------------------------------------------------------
    def _interested(self, rejected_by: frozenset[str]) -> frozenset[ClusterEvent]:
        """The events a pod rejected by ``rejected_by`` waits for (any rejector's; none named: the
        default set)."""
        events = self._events_of.get(rejected_by)
        if events is None:
            events = (
                frozenset().union(*(self._interest.get(plugin, DEFAULT_EVENTS) for plugin in rejected_by))
                if rejected_by
                else DEFAULT_EVENTS
            )
            self._events_of[rejected_by] = events
        return events

    def _index(self, queued: QueuedPod) -> None:
        park = queued.park = next(self._parks)
        key = queued.pod.key
        for event in self._interested(queued.rejected_by):
            self._waiting.setdefault(event, {})[key] = park

    def _unindex(self, queued: QueuedPod) -> None:
        key = queued.pod.key
        for event in self._interested(queued.rejected_by):
            waiting = self._waiting.get(event)
            if waiting is not None and waiting.get(key) == queued.park:
                del waiting[key]

    def on_event(
        self,
        event: ClusterEvent | Iterable[ClusterEvent],
        only: Callable[[PodInfo], bool] | None = None,
        *,
        old: object = None,
        new: object = None,
        at_once: bool = False,
    ) -> int:
        """Move the waiting pods that ``event`` (one, or every event one change raises; ``old`` and
        ``new`` the object it changed) may help: parked ones to backoff or active, gated ones through
        the PreEnqueue plugins again. Returns how many moved. ``at_once`` skips the parked pods'
        backoff (what freed the room is no verdict on them: a gang rolled back, its reservations
        released, design.md "Data flow")."""
        if isinstance(event, ClusterEvent):
            if not self._waiting.get(event):
                return 0  # the usual case for a bind: nobody waits for it
            events: tuple[ClusterEvent, ...] = (event,)
        else:
            events = tuple(event)
        candidates: dict[str, QueuedPod] = {}
        for one in events:
            waiting = self._waiting.get(one)
            if not waiting:
                continue
            for key, park in list(waiting.items()):
                queued = self._pods.get(key)
                if queued is None or queued.park != park or queued.pool not in _WAITING:
                    del waiting[key]  # left since (scheduled, deleted, moved, parked again)
                    continue
                candidates[key] = queued
        moved = 0
        now = self._clock()
        for queued in candidates.values():
            if only is not None and not only(queued.pod):
                continue
            if not self._may_help(queued, events, old, new):
                continue
            if queued.pool == GATED:
                if self._gate(queued):
                    continue
                self._to_active(queued)
            else:
                self._unindex(queued)
                if at_once:
                    self._to_active(queued)
                    moved += 1
                    continue
                self._unpark(queued, now)
            moved += 1
        return moved

    def _may_help(
        self, queued: QueuedPod, events: tuple[ClusterEvent, ...], old: object, new: object
    ) -> bool:
        """Whether a plugin that rejected the pod registered one of ``events`` and its queueing hint
        (if it has one) says the change may help (kube-scheduler's ``isPodWorthRequeuing``)."""
        if not queued.rejected_by:
            return True
        for plugin in queued.rejected_by:
            registered = self._interest.get(plugin, DEFAULT_EVENTS)
            interesting = [one for one in events if one in registered]
            if not interesting:
                continue
            hint = self._hints.get(plugin)
            if hint is None or any(hint(one, queued.pod, old, new) for one in interesting):
                return True
        return False

    def _unpark(self, queued: QueuedPod, now: float) -> None:
        """A parked pod goes to active, or to backoff while its backoff has not passed yet."""
        if queued.backoff_until <= now:
            self._to_active(queued)
        else:
            self._to_backoff(queued)

    def flush_unschedulable(self, max_age: float) -> int:
        """Retry pods parked for ``max_age`` seconds or longer whatever happened (kube-scheduler's
        flushUnschedulablePodsLeftover, podMaxInUnschedulablePodsDuration): the safety net for a
        change no plugin declared interest in. Returns how many moved."""
        now = self._clock()
        moved = 0
        for queued in self._pods.values():
            if queued.pool == UNSCHEDULABLE and now - queued.parked_at >= max_age:
                self._unindex(queued)
                self._unpark(queued, now)
                moved += 1
        return moved

    # -- introspection ----------------------------------------------------------------------------
    def next_backoff(self) -> float | None:
        """When the earliest backing-off pod becomes ready (the simulator advances its clock to it)."""
        while self._backoff:
            ready, seq, key = self._backoff[0]
            queued = self._pods.get(key)
            if queued is not None and queued.pool == "backoff" and queued.seq == seq:
                return ready
            heapq.heappop(self._backoff)
        return None

    def has_active(self) -> bool:
        self._flush_backoff()
        heaps = [self._active, *self._by_queue.values()]
        return any(self._current(entry) is not None for heap in heaps for entry in heap)

    def get(self, key: str) -> QueuedPod | None:
        return self._pods.get(key)

    def pods(self, pool: str | None = None) -> list[QueuedPod]:
        return [q for q in self._pods.values() if pool is None or q.pool == pool]

    def __len__(self) -> int:
        return len(self._pods)
