"""Extension points, mirroring kube-scheduler's framework (and Volcano's session hooks): one abstract
class per extension point, each a :class:`Plugin` implements.

Filter and Score are vectorised: a plugin sees every node row at once and answers with numpy arrays
over rows (``[:cluster.n]``; dead rows are masked out by the runtime; scheduler/framework/results.py).

Plugins never do I/O: they read the :class:`~scheduler.framework.handle.Handle` (cluster arrays, API
objects) and return statuses, masks, scores, victims and :class:`~common.model.events.EventRecord`
values; the cycle and the backend act on them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import PreBindPlan
from gpuq_k8s.common.model.reservation import Candidate, Lock
from gpuq_k8s.scheduler.framework import status_sync

# ClusterEvent is defined with the events a change raises; plugins import it from here with the rest
# (``X as X``: mypy's explicit re-export).
from gpuq_k8s.scheduler.framework.cluster_events import ALL_EVENTS as ALL_EVENTS  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.cluster_events import DEFAULT_EVENTS as DEFAULT_EVENTS  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.cluster_events import ClusterEvent as ClusterEvent  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.cycle_state import CycleState

# What plugins take and return lives in the concept's module (handle, results, status_sync); plugins
# import it from here with the extension points (``X as X``: mypy's explicit re-export).
from gpuq_k8s.scheduler.framework.handle import EventSink as EventSink  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.handle import GroupInfo as GroupInfo  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.handle import Handle as Handle  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.handle import PodGroups as PodGroups  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.handle import read_or_warn as read_or_warn  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.results import BoolArray as BoolArray  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.results import FilterOutcome as FilterOutcome  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.results import FilterResult as FilterResult  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.results import FloatArray as FloatArray  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.results import PostFilterResult as PostFilterResult  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.results import ReasonMasks as ReasonMasks  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.framework.status_sync import StatusPatch as StatusPatch  # noqa: PLC0414
from gpuq_k8s.scheduler.framework.status_sync import StatusSource as StatusSource  # noqa: PLC0414

merge_status_patches = status_sync.merge_status_patches  # re-exported (an `as` import would not fit a line)

# kube-scheduler's QueueingHintFn: whether ``event`` (the object before and after) may make ``pod``,
# which the plugin rejected, schedulable (Queue: True; QueueSkip: False).
QueueingHint = Callable[[ClusterEvent, PodInfo, object, object], bool]


@runtime_checkable
class PendingPodListener(Protocol):
    """A plugin that tracks pods before they are bound (a PodGroup's minimum counts its pending pods).

    Bound pods reach plugins through :class:`~scheduler.cluster.state.ClusterListener`; pending ones
    only through this.
    """

    def pending_pod_added(self, pod: PodInfo) -> None: ...

    def pending_pod_removed(self, pod: PodInfo) -> None: ...


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

    def enqueue_pass(self, began: bool) -> None:
        """A pass of the enqueue action over the Pending PodGroups began (``began``) or ended (Volcano's
        session around its enqueue action): between the two nothing changes but the groups admitted
        (each :meth:`enqueued`), so a plugin may read what its checks count once per pass."""


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


class TargetJobPlugin(Plugin):
    """Volcano's targetJobFn (the ``reserve`` action's election; design.md Semantics 15)."""

    # How long the nodes locked for a job this plugin elected stay locked (seconds).
    lock_timeout: float

    @abstractmethod
    def target_job(self, candidates: Sequence[Candidate], passed_over: Container[str]) -> Candidate | None:
        """The job to lock nodes for, of ``candidates``; ``passed_over``: jobs whose lock timed out."""


class ReservedNodesPlugin(Plugin):
    """Volcano's reservedNodesFn: one more node to lock for the target job."""

    @abstractmethod
    def reserved_node(self, lock: Lock) -> str | None:
        """The node to add to ``lock`` (None: none left)."""
