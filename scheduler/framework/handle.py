"""What plugins may read (kube-scheduler's framework.Handle): the :class:`Handle`, the PodGroups as the
framework tracks them (:class:`GroupInfo`, :class:`PodGroups`), where events go (:class:`EventSink`),
and :func:`read_or_warn` for an API object a plugin parses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from gpuq_k8s.common.model.crd import PodGroup
from gpuq_k8s.common.model.disruption_budget import Budgets
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.events import EventRecord, invalid_annotation
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.reservation import Lock
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import ClusterState


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

    def reserves(self, group: GroupInfo) -> bool: ...

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

    def group_reserves(self, group: GroupInfo) -> bool:
        """Whether the Inqueue ``group`` still reserves what its members not placed yet need: not once
        each was tried and parked unschedulable (:func:`common.model.elastic.enqueue.reserves`)."""
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

    @property
    def reservation_lock(self) -> Lock | None:
        """The nodes the ``reserve`` action locked for its target job, if any (Semantics 15)."""
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
