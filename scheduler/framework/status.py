"""Plugin results, mirroring kube-scheduler's ``framework.Status``.

A Status carries a :class:`Code`, the reasons (one line each, user-readable) and the plugin that
produced it, so the cycle can aggregate them into the PodScheduled message without knowing which
plugin said what. A plugin that finds its input malformed raises an InvalidValue; the framework hands
it on as a :class:`PluginInputError`, which carries the plugin's name as a Status does.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from gpuq_k8s.common.model.errors import GpuqError, InvalidValue


class Code(enum.IntEnum):
    """Ordered by severity so :meth:`Status.merge` keeps the worst code."""

    SUCCESS = 0
    SKIP = 1
    WAIT = 2
    UNSCHEDULABLE = 3
    UNSCHEDULABLE_AND_UNRESOLVABLE = 4
    ERROR = 5


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    # Wait only: the longest the pod may wait in Permit (kube-scheduler's Permit returns a Status and
    # a timeout); None leaves it to the scheduler's default.
    timeout: float | None = None

    @classmethod
    def success(cls, plugin: str = "") -> Status:
        # Plugins answer Success or Skip a dozen times per attempt: share the immutable plain ones.
        return _SUCCESS if not plugin else cls(Code.SUCCESS, (), plugin)

    @classmethod
    def skip(cls, plugin: str = "") -> Status:
        return _SKIP if not plugin else cls(Code.SKIP, (), plugin)

    @classmethod
    def wait(cls, reason: str, plugin: str = "", timeout: float | None = None) -> Status:
        return cls(Code.WAIT, (reason,), plugin, timeout)

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, tuple(reasons), plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, tuple(reasons), plugin)

    @classmethod
    def error(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, tuple(reasons), plugin)

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @property
    def is_wait(self) -> bool:
        return self.code is Code.WAIT

    @property
    def is_rejected(self) -> bool:
        """Unschedulable, unresolvable or an error: the pod cannot go on in this cycle."""
        return self.code >= Code.UNSCHEDULABLE

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        return self if self.plugin else Status(self.code, self.reasons, plugin, self.timeout)

    @staticmethod
    def merge(statuses: Iterable[Status]) -> Status:
        """The worst code among ``statuses`` with the reasons of every status of that code."""
        items = list(statuses)
        if not items:
            return Status.success()
        worst = max(s.code for s in items)
        chosen = [s for s in items if s.code == worst]
        reasons = tuple(r for s in chosen for r in s.reasons)
        return Status(worst, reasons, chosen[0].plugin)

    def __str__(self) -> str:
        who = f"{self.plugin}: " if self.plugin else ""
        return f"{who}{self.code.name}" + (f" ({self.message})" if self.reasons else "")


_SUCCESS = Status(Code.SUCCESS)
_SKIP = Status(Code.SKIP)


class PluginInputError(GpuqError):
    """``plugin`` found its input malformed at extension point ``point``: the ``error`` it raised (also
    the ``__cause__``), with the plugin's name, as kube-scheduler's Status carries its plugin. Renders
    as the error itself."""

    def __init__(self, plugin: str, point: str, error: InvalidValue) -> None:
        super().__init__(str(error))
        self.plugin = plugin
        self.point = point
        self.error = error
        self.__cause__ = error
