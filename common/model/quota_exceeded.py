"""A request that does not fit in a quota: :class:`QuotaExceeded` and the wordings of the designs that
word it their own way (:class:`BelowMinimum`, :class:`CrossQuotaExceeded`).

Part of gpuq's one error hierarchy (:class:`~common.model.errors.GpuqError`), in a module of its own
because its message says whether waiting can help (:mod:`common.model.outlook`, design.md Semantics
14), which reads the amounts as quantities: :mod:`common.model.errors` stays below both.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.outlook import Outlook, minimum_outlook, quota_outlook


@dataclass(eq=False, repr=False)
class QuotaExceeded(GpuqError):
    """A request does not fit in a quota.

    ``resource`` names the quota dimension (``NVIDIA-A100``, ``cpu``, ``total.requests.tflops``);
    amounts are pre-formatted strings in the resource's own unit so the message is readable as is.
    ``unresolvable`` marks limits no amount of waiting can satisfy (per-workload limits): the
    scheduler reports those as UnschedulableAndUnresolvable and the webhook denies them outright.
    """

    resource: str
    requested: str
    available: str
    limit: str
    _: KW_ONLY
    scope: str = ""
    used: str | None = None
    unresolvable: bool = False

    def __post_init__(self) -> None:
        super().__init__(self._render())

    def _render(self) -> str:
        """The message; a subclass worded by its design overrides it."""
        where = f" in {self.scope}" if self.scope else ""
        used = f", used {self.used}" if self.used is not None else ""
        outlook = self.outlook
        return (
            f"quota exceeded{where} for {self.resource}: requested {self.requested}, "
            f"available {self.available}{used}, limit {self.limit}" + (f" ({outlook})" if outlook else "")
        )

    @property
    def outlook(self) -> Outlook | None:
        """Whether waiting can help (:mod:`common.model.outlook`); None when the amounts do not say."""
        return quota_outlook(self.resource, self.requested, self.limit, self.used)


class BelowMinimum(QuotaExceeded):
    """A workload's request below a per-workload minimum (gpu-resource-quota ``single.min``): like a
    per-workload maximum, unresolvable, and it can never fit (no usage change raises a request);
    ``limit`` is the minimum."""

    def _render(self) -> str:
        where = f" in {self.scope}" if self.scope else ""
        resource, requested = self.resource, self.requested
        return (
            f"request below the minimum{where} for {resource}: requested {requested}, minimum {self.limit} "
            f"({self.outlook})"
        )

    @property
    def outlook(self) -> Outlook:
        return minimum_outlook(self.resource, self.requested, self.limit)


class CrossQuotaExceeded(QuotaExceeded):
    """A non-GPU pod over a GPU node's cross quota (crossquota.md "Predicate Function"), worded as the
    predicate reports it: ``<res> quota exceeded: required=<q> used=<q> quota=<q>``.

    ``required``, ``used`` and ``quota`` are canonical quantities of ``resource``; ``available`` (what
    the quota leaves, never negative) fills the :class:`QuotaExceeded` vocabulary.
    """

    def __init__(self, resource: str, *, required: str, used: str, quota: str, available: str) -> None:
        super().__init__(resource, required, available, quota, used=used)

    def _render(self) -> str:
        r = self.resource
        return f"{r} quota exceeded: required={self.requested} used={self.used} quota={self.limit}"
