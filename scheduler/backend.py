"""The API behind the scheduler: what the cycle asks of a cluster, and nothing else.

The cycle is synchronous (so ``gpuq simulate`` and the unit tests need no event loop); a real API
call is not. The two meet through completion callbacks: :meth:`ClusterBackend.bind` and
:meth:`ClusterBackend.evict` *submit* work and report through ``done``. The in-memory backend calls
``done`` before returning; the Kubernetes backend starts a task (bounded concurrency) and calls
``done`` from the event loop when the API answers, and the cycle then confirms or forgets the
assumed pod. Events, conditions and status patches are fire-and-forget: a real backend batches them
(a status is patched once per sync, never once per pod).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import PreBindPlan


class Result(Enum):
    """Where a submitted bind left the pod, as far as the API says (never a guess from elapsed time).

    - ``DONE``: bound to the node we chose (an eviction: the victim is being deleted, with its grace
      period: it counts until the watch shows it gone);
    - ``NOT_BOUND``: the bind certainly did not happen; the pod is still there, unbound: retry it;
    - ``ELSEWHERE``: the pod is bound to another node (a 409): the watch charges it where it is;
    - ``GONE``: the pod (this UID) no longer exists, or its deletion was observed: forget it (an
      eviction the backend completed at once, as ``gpuq simulate``'s).
    """

    DONE = "done"
    NOT_BOUND = "not-bound"
    ELSEWHERE = "elsewhere"
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a submitted bind or eviction ended; ``message`` explains anything but ``DONE``."""

    result: Result
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.result is Result.DONE


SUCCESS = Outcome(Result.DONE)


Done = Callable[[Outcome], None]


class ClusterBackend(Protocol):
    def bind(self, pod: PodInfo, node: str, done: Done) -> None:
        """Bind ``pod`` to ``node`` (a Binding subresource in a cluster)."""
        ...

    def pre_bind(self, pod: PodInfo, node: str, plans: Sequence[PreBindPlan], done: Done) -> None:
        """Carry out ``plans`` for ``pod`` bound to ``node`` (common/model/prebind.py), in order: each
        one's writes, then the wait for its condition. ``done``: DONE when every plan is ready;
        NOT_BOUND (the message says why) when a write fails, a condition fails or times out, or
        writes are not allowed (not the leader), after rolling back the plans carried out; GONE when
        the pod's deletion is observed meanwhile (rolled back too)."""
        ...

    def roll_back(self, pod: PodInfo, plans: Sequence[PreBindPlan]) -> None:
        """Undo ``plans`` (their rollback writes, best effort): the pod's binding failed after them."""
        ...

    def evict(self, pod: PodInfo, reason: str, done: Done) -> None:
        """Delete a preemption victim (with a DisruptionTarget condition in a cluster)."""
        ...

    def record_event(self, event: EventRecord) -> None: ...

    def set_pod_condition(
        self, pod: PodInfo, reason: str, message: str, nominated_node: str | None = None
    ) -> None:
        """PodScheduled=False with ``reason`` and ``message``; ``nominated_node`` -> nominatedNodeName
        ("" clears it, None leaves it as it is)."""
        ...

    def patch_status(self, kind: Kind, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Replace the status of a custom resource (PodGroup phase, quota usage)."""
        ...
