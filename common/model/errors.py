"""gpuq's one error hierarchy.

Every error a user can cause (a malformed annotation, a bad configuration value, a request over a
quota) is a subclass of :class:`GpuqError` and renders as a single line that names the object, the
field, the value and what was expected, so the webhook can return it as a denial message, the
scheduler can put it in an Event, and the CLI can print it without a traceback. The errors that
carry fields are dataclasses (compared by identity and shown by message, like any exception).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

from gpuq_k8s.common.model.quoting import quote

if TYPE_CHECKING:
    from gpuq_k8s.common.model.outlook import Outlook


class GpuqError(Exception):
    """Base of every error gpuq raises on purpose."""


@dataclass(eq=False, repr=False)
class InvalidValue(GpuqError, ValueError):
    """A value in user input is malformed.

    ``where`` names the object (``Queue/team-a``, ``Pod/ns/p``, ``config``); ``field`` the key or
    annotation; ``value`` what was found (quoted bounded, :func:`common.model.quoting.quote`);
    ``expected`` what would have been accepted.
    """

    field: str
    value: Any
    expected: str
    where: str = ""

    def __post_init__(self) -> None:
        super().__init__(self._render())

    def _render(self) -> str:
        prefix = f"{self.where}: " if self.where else ""
        return f"{prefix}{self.field}: invalid value {quote(self.value)}: expected {self.expected}"

    def located(self, where: str) -> InvalidValue:
        """The same error, attributed to an object (keeps the most specific location)."""
        if self.where:
            return self
        return type(self)(self.field, self.value, self.expected, where)


class InvalidQuantity(InvalidValue):
    """A Kubernetes quantity string (``500m``, ``64Gi``, ``1e3``) could not be parsed."""


class InvalidAnnotation(InvalidValue):
    """An annotation or label on a Kubernetes object is malformed."""


class ConfigError(InvalidValue):
    """The scheduler configuration (Volcano format) is invalid; a start-up error."""


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
        from gpuq_k8s.common.model.outlook import quota_outlook  # noqa: PLC0415 - outlook parses with quantity

        return quota_outlook(self.resource, self.requested, self.limit, self.used)


class BelowMinimum(QuotaExceeded):
    """A workload's request below a per-workload minimum (gpu-resource-quota ``single.min``): like a
    per-workload maximum, unresolvable; ``limit`` is the minimum."""

    def _render(self) -> str:
        where = f" in {self.scope}" if self.scope else ""
        resource, requested = self.resource, self.requested
        return f"request below the minimum{where} for {resource}: requested {requested}, minimum {self.limit}"


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
