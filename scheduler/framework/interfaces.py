"""Extension points, mirroring kube-scheduler's framework (and Volcano's session hooks).

Filter and Score are vectorised: a plugin sees every node row at once and answers with numpy arrays
over rows (``[:cluster.n]``; dead rows are masked out by the runtime). Reasons are lazy: computing a
message per rejected node costs Python time, so a :class:`FilterResult` only builds them when the pod
turned out unschedulable or an explanation was asked for.

Plugins never do I/O: they read the :class:`Handle` (cluster arrays, API objects) and return
statuses, masks, scores, victims and :class:`~common.model.events.EventRecord` values; the cycle and
the backend act on them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.crd import PodGroup
from gpuq_k8s.common.model.disruption_budget import Budgets
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.events import EventRecord, invalid_annotation
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import PreBindPlan
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import ClusterState

# ClusterEvent is defined with the events a change raises; plugins import it from here with the rest
# (``X as X``: mypy's explicit re-export).
from gpuq_k8s.scheduler.framework.cluster_events import ALL_EVENTS as ALL_EVENTS  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.cluster_events import DEFAULT_EVENTS as DEFAULT_EVENTS  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.cluster_events import ClusterEvent as ClusterEvent  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.status import Status

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

ReasonMasks = Sequence[tuple[BoolArray, str]]


# kube-scheduler's QueueingHintFn: whether ``event`` (the object before and after) may make ``pod``,
# which the plugin rejected, schedulable (Queue: True; QueueSkip: False).
QueueingHint = Callable[[ClusterEvent, PodInfo, object, object], bool]


@dataclass(slots=True)  # not frozen: a frozen init costs 3x, and every Filter makes one per pod
class FilterResult:
    """One Filter plugin's verdict over all node rows (read-only once made).

    ``reasons`` returns (mask of rejected rows, message) pairs, one per distinct message; a rejected
    row may appear under several messages (``Insufficient cpu`` and ``Insufficient memory``).
    ``unresolvable`` marks rows that preemption cannot fix (kube's UnschedulableAndUnresolvable).
    """

    passed: BoolArray
    reasons: Callable[[], ReasonMasks] = lambda: ()
    unresolvable: BoolArray | None = None

    @staticmethod
    def all_pass(n: int) -> FilterResult:
        return FilterResult(np.ones(n, dtype=np.bool_))


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """A preemption outcome: the node the pod is nominated to, and the pods to evict for it."""

    status: Status
    nominated_node: str = ""
    victims: tuple[PodInfo, ...] = ()
    message: str = ""


@dataclass(slots=True)
class GroupInfo:
    """A PodGroup as the framework tracks it (Volcano's JobInfo, reduced to what the cycle needs)."""

    namespace: str
    name: str
    min_member: int
    queue: str
    phase: str
    model: PodGroup | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return f"PodGroup/{self.namespace}/{self.name}"


class EventSink(Protocol):
    """Where events go (the backend's ``record_event``)."""

    def __call__(self, record: EventRecord, /) -> None: ...


class PodGroups(Protocol):
    """Where the :class:`Handle`'s PodGroup and pending-pod queries are answered from: the scheduler's
    :class:`~scheduler.groups.GroupTracker`, which the framework is given (it is built first, and it
    runs the enqueue action through the framework, so the framework knows it only by this shape)."""

    @property
    def groups(self) -> Mapping[str, GroupInfo]:
        """PodGroups by ``namespace/name``."""
        ...

    @property
    def invalid(self) -> Mapping[str, str]:
        """Why a PodGroup ``namespace/name`` could not be read, for those that could not."""
        ...

    @property
    def pending(self) -> Mapping[str, PodInfo]:
        """The pods still to be scheduled by us, by ``namespace/name``."""
        ...

    def group_of(self, pod: PodInfo) -> GroupInfo | None: ...

    def group_members(self, group: GroupInfo) -> Sequence[PodInfo]: ...

    def ready_members(self, group: GroupInfo) -> int: ...

    def queue_of(self, pod: PodInfo) -> str: ...


class Handle(Protocol):
    """What plugins may read (kube-scheduler's framework.Handle).

    :class:`~scheduler.framework.runtime.Framework` implements it, as kube-scheduler's frameworkImpl does.
    """

    @property
    def cluster(self) -> ClusterState: ...

    @property
    def objects(self) -> ObjectStore: ...

    def record(self, event: EventRecord) -> None: ...

    def group_of(self, pod: PodInfo) -> GroupInfo | None: ...

    def group_members(self, group: GroupInfo) -> Sequence[PodInfo]:
        """Every known pod of the group, pending and bound."""
        ...

    def ready_members(self, group: GroupInfo) -> int:
        """Pods of the group bound, binding, or reserved and waiting in Permit."""
        ...

    def allow_group(self, group: GroupInfo) -> None:
        """Release the pods of ``group`` waiting in Permit (gang quorum reached)."""
        ...

    def running_on(self, row: int) -> Sequence[PodInfo]:
        """The pods bound or assumed on node row ``row`` (what an eviction could remove); not the
        nominated pods that hold room there during an attempt (design.md Semantics 18)."""
        ...

    def group(self, key: str) -> GroupInfo | None:
        """The PodGroup ``namespace/name`` as the scheduler tracks it (its phase included)."""
        ...

    def group_problem(self, key: str) -> str | None:
        """Why the PodGroup ``namespace/name`` could not be read (it exists but is invalid), if so."""
        ...

    def pending_pod(self, key: str) -> PodInfo | None:
        """The pod ``namespace/name`` if it is waiting to be scheduled by us (not bound yet)."""
        ...

    def queue_of(self, pod: PodInfo) -> str:
        """The pod's Queue name (design.md Semantics 7)."""
        ...

    def action_arguments(self, action: str) -> Mapping[str, Any]:
        """The configuration's ``configurations:`` arguments of ``action`` (parsed; empty if none):
        how a plugin reads an action argument it honours (enqueue's ``overcommit-factor``)."""
        ...

    def disruption_budgets(self) -> Budgets:
        """The cluster's PodDisruptionBudgets with what each allows now (preemption's victims)."""
        ...

    def fits_without(
        self,
        pod: PodInfo,
        row: int,
        removed: Sequence[PodInfo],
        queue_ok: Callable[[PodInfo], bool] | None = None,
    ) -> bool:
        """Whether ``pod`` would pass the real queue check (or ``queue_ok``, the action's), PreFilter and
        Filter on node row ``row`` with ``removed`` gone (kube-scheduler's filters run on a node with the
        victims removed)."""

    def shared(self, kind: type[Shared], make: Callable[[], Shared]) -> Shared:
        """The one object of class ``kind`` the plugins of this framework share, made by ``make`` for
        the first plugin that asks (the members of one kube-scheduler plugin, e.g. InterPodAffinity's
        filter under ``predicates`` and its scorer under ``nodeorder``, share their per-cluster index)."""
        ...


Model = TypeVar("Model")
Shared = TypeVar("Shared")


def read_or_warn(handle: Handle, ref: str, parse: Callable[[Obj], Model], obj: Obj) -> Model | None:
    """``parse(obj)``; None after recording a Warning event on ``ref`` when the object is malformed
    (an object that predates the webhook, design.md Semantics 3): the plugin then treats it as absent."""
    try:
        return parse(obj)
    except GpuqError as err:
        handle.record(invalid_annotation(ref, str(err)))
        return None


@runtime_checkable
class PendingPodListener(Protocol):
    """A plugin that tracks pods before they are bound (a PodGroup's minimum counts its pending pods).

    Bound pods reach plugins through :class:`~scheduler.cluster.state.ClusterListener`; pending ones
    only through this.
    """

    def pending_pod_added(self, pod: PodInfo) -> None: ...

    def pending_pod_removed(self, pod: PodInfo) -> None: ...


@dataclass(frozen=True, slots=True)
class StatusPatch:
    """A custom resource status to write: one per dirty object per sync, never one per pod."""

    kind: Kind
    namespace: str
    name: str
    status: Mapping[str, Any]


def merge_status_patches(
    patches: Sequence[StatusPatch], current: Callable[[Kind, str, str], Mapping[str, Any]]
) -> list[StatusPatch]:
    """One patch per object: several sources may each want a status of one object (a Queue's
    ``allocated`` from capacity-card, its PodGroup counts from the tracker), each a whole status
    built from what the object holds (``current``). Each source's changes to that are kept; a later
    source wins on a key both change."""
    by_object: dict[tuple[Kind, str, str], list[StatusPatch]] = {}
    for patch in patches:
        by_object.setdefault((patch.kind, patch.namespace, patch.name), []).append(patch)
    merged: list[StatusPatch] = []
    for (kind, namespace, name), wanted in by_object.items():
        if len(wanted) == 1:
            merged.append(wanted[0])
            continue
        base = current(kind, namespace, name)
        status = dict(base)
        for patch in wanted:
            for key in set(base) | set(patch.status):
                if key not in patch.status:
                    if key in base:
                        status.pop(key, None)
                elif patch.status[key] != base.get(key):
                    status[key] = patch.status[key]
        merged.append(StatusPatch(kind, namespace, name, status))
    return merged


@runtime_checkable
class StatusSource(Protocol):
    """A plugin whose usage bookkeeping is written back to custom resources (batched status sync).

    ``now`` stamps conditions and ``lastUpdateTime``; events are returned with the patches (the
    GPU quota's QuotaAlertThreshold is decided when its status is computed).
    """

    def take_status(self, now: datetime) -> tuple[list[StatusPatch], list[EventRecord]]: ...


class Plugin(ABC):  # noqa: B024 - a marker base: every extension point below is optional
    """Base of every plugin; ``name`` is its name (in the configuration, or kube-scheduler's name of a
    member plugin).

    ``config_name`` is the configuration entry the plugin was built for: its own ``name``, or, for a
    *member* (one of kube-scheduler's filter or score plugins that a Volcano plugin entry runs: the
    ``predicates`` entry runs NodePorts, InterPodAffinity, ...), that entry's name. The framework places
    a plugin in its entry's tier and applies its entry's switches (``enablePredicate: false`` on
    ``predicates`` switches every member's Filter off); the plugin's own ``name`` labels its verdicts.
    """

    name: str = ""
    # Events after which a pod this plugin rejected is worth retrying (kube's EventsToRegister;
    # scheduler/framework/cluster_events.py). Empty: only the pod's own update (or the safety flush).
    events: frozenset[ClusterEvent] = DEFAULT_EVENTS
    # Finer interest for some rejections: a Status whose plugin is ``<name>:<kind>`` (for example
    # ``gpu-quota:single``, a per-workload limit only a quota change can lift) is retried on these.
    event_groups: ClassVar[Mapping[str, frozenset[ClusterEvent]]] = {}

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.config_name = self.name

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        """kube-scheduler's queueing hint: may ``event`` (``old`` and ``new`` the object it changed, None
        for an absent side: a PodInfo, a NodeInfo or an API object) make ``pod``, which this plugin
        rejected, schedulable? Only asked for an event in :attr:`events`; True (Queue) unless a plugin
        knows better."""
        return True


class PreEnqueuePlugin(Plugin):
    @abstractmethod
    def pre_enqueue(self, pod: PodInfo) -> Status:
        """kube-scheduler's PreEnqueue: may ``pod`` enter the active queue at all? A rejection keeps it
        in the queue's gated set, never attempted, until an update of the pod or an event in
        :attr:`Plugin.events` lets it through (scheduler/queue.py)."""


class QueueSortPlugin(Plugin):
    # True when a pod's key can grow while it waits (drf: its job's share rises as its pods are
    # placed): the queue then reads the key again when the pod reaches the head.
    live: ClassVar[bool] = False

    @abstractmethod
    def sort_key(self, pod: PodInfo) -> tuple[Any, ...]:
        """This plugin's part of the pod queue's key; smaller sorts first. The framework chains the
        enabled QueueSort plugins' parts in tier order and ends the key with creation time and
        namespace/name (``Framework.sort_key``), so a part holds only what this plugin orders by."""


class EnqueuePlugin(Plugin):
    @abstractmethod
    def enqueue(self, group: GroupInfo) -> Status:
        """May ``group`` go from Pending to Inqueue? Failures should also record an event."""

    def enqueued(self, group: GroupInfo) -> None:
        """``group`` is now Inqueue (reserve what it asked for)."""

    def dequeued(self, group: GroupInfo) -> None:
        """``group`` left Inqueue (running, or deleted): release the reservation."""


class PreFilterPlugin(Plugin):
    @abstractmethod
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        """Once per attempt; Skip means this plugin's Filter has nothing to say for the pod."""


class FilterPlugin(Plugin):
    @abstractmethod
    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        """Vectorised over all node rows ``[:cluster.n]``.

        ``passed`` may be the plugin's own cache and ``reasons`` may read live state: both are
        only used during the attempt, and the framework copies them out when it keeps them."""


class FilterOutcome:
    """What Filter decided for one attempt, for PostFilter and explanations.

    ``results`` is, per plugin in order, its result and the rows it was the first to reject. A
    scheduled pod never needs those (one more pass over N rows per plugin), so the framework may hand
    over the plugins' verdicts instead (``pending``: the rows alive before Filter, then each plugin's
    result) and ``results`` is worked out from them when first read. The verdicts are the plugins'
    arrays: they are only valid until the next Filter runs, so the framework reads ``results`` at
    once when the outcome must outlive the attempt (explanations kept, no feasible node).
    """

    __slots__ = ("_feasible_count", "_pending", "_results", "feasible", "prefilter")

    def __init__(
        self,
        feasible: BoolArray,
        results: tuple[tuple[str, FilterResult, BoolArray], ...] = (),
        prefilter: Status | None = None,
        *,
        pending: tuple[BoolArray, tuple[tuple[str, FilterResult], ...]] | None = None,
        feasible_count: int | None = None,
    ) -> None:
        self.feasible = feasible
        self._feasible_count = feasible_count
        self.prefilter = prefilter if prefilter is not None else Status.success()
        self._results: tuple[tuple[str, FilterResult, BoolArray], ...] | None = (
            results if pending is None else None
        )
        self._pending = pending

    @property
    def feasible_count(self) -> int:
        if self._feasible_count is None:
            self._feasible_count = int(np.count_nonzero(self.feasible))
        return self._feasible_count

    @property
    def results(self) -> tuple[tuple[str, FilterResult, BoolArray], ...]:
        if self._results is None:
            assert self._pending is not None
            alive, verdicts = self._pending
            left = alive.copy()
            out: list[tuple[str, FilterResult, BoolArray]] = []
            for name, result in verdicts:
                first: BoolArray = np.greater(left, result.passed)  # left & ~passed, in one pass
                left &= result.passed
                out.append((name, result, first))
            self._results, self._pending = tuple(out), None
        return self._results


class PostFilterPlugin(Plugin):
    @abstractmethod
    def post_filter(self, state: CycleState, pod: PodInfo, outcome: FilterOutcome) -> PostFilterResult:
        """Called when no node is feasible; may nominate a node and name victims."""


class PreScorePlugin(Plugin):
    @abstractmethod
    def pre_score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> Status:
        """Skip means this plugin's Score contributes nothing for the pod."""


class ScorePlugin(Plugin):
    @property
    def scoring(self) -> bool:
        """False when the configuration switches this plugin's scoring off (a plugin weight of 0, as
        Volcano then registers no node-order function): the framework calls neither its PreScore nor
        its Score, so an explanation lists no score for it (design.md Semantics 11)."""
        return True

    @abstractmethod
    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        """float64 over all node rows; only feasible rows are read.

        The array may be the plugin's own cache: the framework only reads it during the attempt
        and copies it when it keeps the scores (explanations)."""


class ReservePlugin(Plugin):
    @abstractmethod
    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        """Charge the pod to whatever this plugin accounts; must be idempotent per pod key."""

    @abstractmethod
    def unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        """Undo :meth:`reserve`; idempotent, and a no-op for a pod never reserved."""


class PreBindPlugin(Plugin):
    @abstractmethod
    def pre_bind(self, state: CycleState, pod: PodInfo, row: int) -> PreBindPlan | Status:
        """After Permit, before the pod's binding (kube-scheduler's PreBind): the API writes this
        plugin needs made, and the condition to wait for, before the pod may be bound
        (:class:`~common.model.prebind.PreBindPlan`, carried out by the backend); Skip when it needs
        nothing for this pod; a rejection fails the binding (the pod is unreserved and retried)."""


class PermitPlugin(Plugin):
    @abstractmethod
    def permit(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        """Success to bind now, Wait to hold the pod (reserved) until the plugin allows it."""


# -- Volcano's session extension points (combined across tiers by scheduler/framework/tiers.py) ------


class QueueOrderPlugin(Plugin):
    # Whether this order also picks the Queue allocate serves next (the pod queue's pop), not only
    # the order in which enqueue admits PodGroups (design.md Semantics 15).
    orders_allocation: ClassVar[bool] = True

    @abstractmethod
    def compare_queues(self, left: str, right: str) -> int:
        """Volcano's queueOrderFn: < 0 when Queue ``left`` goes first, > 0 when ``right`` does, 0 for no
        opinion (the next plugin, then the next tier, decides)."""


class JobOrderPlugin(Plugin):
    @abstractmethod
    def compare_jobs(self, left: GroupInfo, right: GroupInfo) -> int:
        """Volcano's jobOrderFn over PodGroups, with :meth:`QueueOrderPlugin.compare_queues`' convention."""


class PreemptablePlugin(Plugin):
    @abstractmethod
    def preemptable(self, preemptor: PodInfo, candidates: Sequence[PodInfo]) -> Sequence[PodInfo] | None:
        """Volcano's preemptableFn: the candidates this plugin lets ``preemptor`` evict, or None to
        abstain. An empty answer means none of them."""

    def rules_out(self, preemptor: PodInfo) -> bool:
        """True when this plugin would answer no running pod at all (a fast path: the framework then
        skips the node walk when every tier has such a plugin). False: it may allow some."""
        return False


class ReclaimablePlugin(Plugin):
    @abstractmethod
    def reclaimable(self, reclaimer: PodInfo, candidates: Sequence[PodInfo]) -> Sequence[PodInfo] | None:
        """Volcano's reclaimableFn (the candidates run in other queues), with the convention of
        :meth:`PreemptablePlugin.preemptable`."""

    def rules_out(self, reclaimer: PodInfo) -> bool:
        """As :meth:`PreemptablePlugin.rules_out`, for reclaim."""
        return False


class OverusedPlugin(Plugin):
    @abstractmethod
    def overused(self, queue: str) -> bool:
        """Volcano's overusedFn: Queue ``queue`` holds at least what it deserves (gets nothing new)."""


class AllocatablePlugin(Plugin):
    @abstractmethod
    def allocatable(self, queue: str, pod: PodInfo) -> bool:
        """Volcano's allocatableFn: may Queue ``queue`` be charged ``pod`` as well?"""


class JobStarvingPlugin(Plugin):
    @abstractmethod
    def job_starving(self, group: GroupInfo) -> bool:
        """Volcano's jobStarvingFn: does the PodGroup still want more of its pods running?"""
