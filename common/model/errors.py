"""gpuq's one error hierarchy.

Every error a user can cause (a malformed annotation, a bad configuration value, a request over a
quota) is a subclass of :class:`GpuqError` and renders as a single line that names the object, the
field, the value and what was expected, so the webhook can return it as a denial message, the
scheduler can put it in an Event, and the CLI can print it without a traceback. The errors that
carry fields are dataclasses (compared by identity and shown by message, like any exception).

A request over a quota, :class:`~common.model.quota_exceeded.QuotaExceeded`, is a :class:`GpuqError` of
its own module: its message carries the outlook (:mod:`common.model.outlook`), which parses quantities,
and quantities raise :class:`InvalidQuantity` from here, so this module imports nothing of gpuq's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class GpuqError(Exception):
    """Base of every error gpuq raises on purpose."""


@dataclass(eq=False, repr=False)
class InvalidValue(GpuqError, ValueError):
    """A value in user input is malformed.

    ``where`` names the object (``Queue/team-a``, ``Pod/ns/p``, ``config``); ``field`` the key or
    annotation; ``value`` what was found; ``expected`` what would have been accepted.
    """

    field: str
    value: Any
    expected: str
    where: str = ""

    def __post_init__(self) -> None:
        super().__init__(self._render())

    def _render(self) -> str:
        prefix = f"{self.where}: " if self.where else ""
        return f"{prefix}{self.field}: invalid value {self.value!r}: expected {self.expected}"

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
