"""The pods Permit holds (kube-scheduler's ``waitingPodsMap``), kept per gang.

A pod that Permit answers Wait for stays reserved and assumed in the cluster state until its gang's
quorum is reached: the gang plugin then allows the gang through the
:class:`~scheduler.framework.interfaces.Handle`, and the binding step binds every waiting member
after the pod that completed it. A gang that never gets there is rejected as a whole, at the end of a
simulation round or after the gang timeout (kube-scheduler's Permit timeout; design.md "Data flow").

The framework owns the map, as kube-scheduler's frameworkImpl does; the cycle adds to it and takes
from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.cycle_state import CycleState


@dataclass(slots=True)
class WaitingPod:
    """A pod held in Permit: assumed (with its node) on ``row``, reserved within ``state``."""

    pod: PodInfo
    row: int
    state: CycleState


class WaitingPods:
    """Waiting pods by gang key (a PodGroup's ``namespace/name``, or the pod's own key)."""

    __slots__ = ("_allowed", "_deadline", "_pods", "_since")

    def __init__(self) -> None:
        self._pods: dict[str, list[WaitingPod]] = {}
        self._since: dict[str, float] = {}  # when the gang's first pod began to wait
        self._deadline: dict[str, float] = {}  # when the gang is rolled back, if its Permit said
        self._allowed: set[str] = set()

    def add(
        self, key: str, pod: PodInfo, row: int, state: CycleState, now: float, *, timeout: float | None = None
    ) -> None:
        """Hold ``pod`` for gang ``key``; ``timeout`` (Permit's) bounds how long the gang waits,
        counted from its first pod (None: the caller's default)."""
        self._pods.setdefault(key, []).append(WaitingPod(pod, row, state))
        since = self._since.setdefault(key, now)
        if timeout is not None and key not in self._deadline:
            self._deadline[key] = since + timeout

    def allow(self, key: str) -> None:
        """The gang ``key`` may go on to binding (its quorum is reached)."""
        self._allowed.add(key)

    def release(self, key: str) -> Sequence[WaitingPod]:
        """The waiting pods of gang ``key`` if it was allowed, forgotten here; none otherwise."""
        if key not in self._allowed:
            return ()
        self._allowed.discard(key)
        self._since.pop(key, None)
        self._deadline.pop(key, None)
        return self._pods.pop(key, [])

    def reject(self, key: str) -> list[WaitingPod]:
        """The waiting pods of gang ``key``, forgotten here (the caller rolls them back)."""
        self._since.pop(key, None)
        self._deadline.pop(key, None)
        return self._pods.pop(key, [])

    def held(self) -> dict[str, tuple[float, list[PodInfo]]]:
        """Per gang with waiting pods: since when it waits, and its waiting pods (for reports)."""
        return {
            key: (self._since.get(key, 0.0), [w.pod for w in pods])
            for key, pods in sorted(self._pods.items())
        }

    def holds(self, key: str) -> bool:
        """Whether gang ``key`` has pods waiting."""
        return key in self._pods

    def count(self, key: str) -> int:
        """How many pods of gang ``key`` wait."""
        return len(self._pods.get(key, ()))

    def gangs(self) -> list[str]:
        """Every gang with waiting pods, in key order."""
        return sorted(self._pods)

    def expired(self, now: float, timeout: float) -> list[str]:
        """Gangs past their Permit timeout, or, for those whose Permit set none, that have waited
        ``timeout`` seconds or longer."""
        return [key for key, since in self._since.items() if now >= self._deadline.get(key, since + timeout)]
