"""gpuq's one error hierarchy.

Every error a user can cause (a malformed annotation, a bad configuration value, a request over a
quota) is a subclass of :class:`GpuqError` and renders as a single line that names the object, the
field, the value and what was expected, so the webhook can return it as a denial message, the
scheduler can put it in an Event, and the CLI can print it without a traceback. The errors that
carry fields are dataclasses (compared by identity and shown by message, like any exception).

A request over a quota, :class:`~common.model.quota_exceeded.QuotaExceeded`, is a :class:`GpuqError` of
its own module: its message carries the outlook (:mod:`common.model.outlook`), which parses quantities,
and quantities raise :class:`InvalidQuantity` from here, so this module imports only
:mod:`common.model.quoting` (which imports nothing of gpuq's but the limits).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuq_k8s.common.model.quoting import quote


class GpuqError(Exception):
    """Base of every error gpuq raises on purpose."""

    def lines(self) -> list[str]:
        """The error as a command prints it: one line per problem (:class:`ConfigErrors` has several)."""
        return [str(self)]


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


class ConfigErrors(ConfigError):
    """Every problem found in one configuration, each a :class:`ConfigError` with its full path
    (``tiers[1].plugins[3].arguments.nodeOrderWeight``), so a file is fixed in one run, not one
    problem per run (design.md "Scheduler configuration").

    It is the ConfigError of its first problem as well, so ``except ConfigError`` catches a refused
    configuration whether it has one problem or many. Its message is every problem's, joined with
    ``"; "`` (one line, as every GpuqError's; with one problem exactly that problem's); the commands
    print :meth:`lines`, one line per problem. Build one with :class:`ErrorCollector`.
    """

    errors: tuple[ConfigError, ...]

    def __init__(self, errors: Iterable[ConfigError]) -> None:
        flat = tuple(one for error in errors for one in _each(error))
        if not flat:
            raise ValueError("ConfigErrors needs at least one ConfigError")
        self.errors = flat
        first = flat[0]
        super().__init__(first.field, first.value, first.expected, first.where)

    def _render(self) -> str:
        return "; ".join(str(error) for error in self.errors)

    def lines(self) -> list[str]:
        return [str(error) for error in self.errors]

    def located(self, where: str) -> ConfigErrors:
        return ConfigErrors(
            ConfigError(error.field, error.value, error.expected, error.where or where)
            for error in self.errors
        )


def _each(error: ConfigError) -> tuple[ConfigError, ...]:
    return error.errors if isinstance(error, ConfigErrors) else (error,)


class ErrorCollector:
    """Collects the problems of one configuration instead of stopping at the first.

    ``add`` records one; ``extend`` records a raised ConfigError (or every problem of a ConfigErrors),
    its fields under a path prefix (``tiers[0].plugins[2].arguments``); ``raise_any`` raises them
    together as one :class:`ConfigErrors`, in the order found.
    """

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def __bool__(self) -> bool:
        return bool(self.errors)

    def add(self, field: str, value: Any, expected: str) -> None:
        self.errors.append(ConfigError(field, value, expected))

    def extend(self, error: ConfigError, prefix: str = "") -> None:
        for one in _each(error):
            field = f"{prefix}.{one.field}" if prefix and one.field else prefix or one.field
            self.errors.append(ConfigError(field, one.value, one.expected, one.where))

    def raise_any(self) -> None:
        if self.errors:
            raise ConfigErrors(self.errors)
