"""overcommit: the enqueue check of Volcano's ``overcommit`` plugin (volcano-sh/volcano
``pkg/scheduler/plugins/overcommit``).

The cluster tolerates jobs in the queue up to its allocatable times ``overcommit-factor``::

    idle    = total allocatable * factor - used        (used: what bound pods request)
    inqueue = the minResources of every Inqueue PodGroup, plus, for a Running one with at least
              minMember pods placed, the part of its minResources its pods do not hold yet
    a PodGroup may enter when inqueue + its minResources <= idle, on each resource it asks for

A PodGroup without ``spec.minResources`` always may (Volcano: "bestEffort"). A refusal names the
resources that would be overused: ``resource in cluster is overused: overused cpu, overused memory``.

Where gpuq differs: ``overcommit-factor`` below 1 is a configuration error (upstream logs a warning and
uses 1.2): nothing is silently replaced (design.md "Scheduler configuration").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from gpuq_k8s.common.model.errors import ConfigError
from gpuq_k8s.common.model.quantity import CPU, MEMORY, PODS

FACTOR_KEY: Final = "overcommit-factor"
DEFAULT_FACTOR: Final = 1.2
OVERUSED: Final = "resource in cluster is overused"


class OvercommitArgs(BaseModel):
    model_config = ConfigDict(frozen=True)

    factor: float = DEFAULT_FACTOR


def parse_factor(value: Any, field: str = FACTOR_KEY) -> float:
    """A factor: a number >= 1 (an int, a float or a decimal string)."""
    expected = "a number >= 1.0 (the cluster's allocatable is multiplied by it)"
    if isinstance(value, bool):
        raise ConfigError(field, value, expected)
    try:
        factor = float(value)
    except (TypeError, ValueError):
        raise ConfigError(field, value, expected) from None
    if not factor >= 1.0 or factor == float("inf"):
        raise ConfigError(field, value, expected)
    return factor


def parse_arguments(arguments: Mapping[str, Any] | None) -> OvercommitArgs:
    """Validate the ``overcommit`` arguments; :class:`ConfigError` names the key."""
    args = dict(arguments or {})
    for key, value in args.items():
        if key != FACTOR_KEY:
            raise ConfigError(str(key), value, f"the overcommit argument {FACTOR_KEY}")
    if FACTOR_KEY in args:
        return OvercommitArgs(factor=parse_factor(args[FACTOR_KEY]))
    return OvercommitArgs()


def reserved_while_running(min_resources: Mapping[str, int], allocated: Mapping[str, int]) -> dict[str, int]:
    """What a Running PodGroup still holds in the queue: the part of its minResources its pods do not
    hold yet, per resource (Volcano's ``GetInqueueResource``)."""
    out: dict[str, int] = {}
    for resource, amount in min_resources.items():
        left = amount - allocated.get(resource, 0)
        if left > 0:
            out[resource] = left
    return out


def overused(
    minimum: Mapping[str, int],
    inqueue: Mapping[str, int],
    total: Mapping[str, int],
    used: Mapping[str, int],
    factor: float,
) -> list[str]:
    """The resources (of those ``minimum`` asks for) on which ``inqueue + minimum`` would exceed
    ``total * factor - used``; empty when the job may enter. Compared in float64, as upstream."""
    out: list[str] = []
    ordered = [r for r in (CPU, MEMORY) if r in minimum] + [r for r in minimum if r not in (CPU, MEMORY)]
    for resource in ordered:
        amount = minimum[resource]
        if amount <= 0 or resource == PODS:  # Volcano never compares the pod count
            continue
        idle = float(total.get(resource, 0)) * factor - float(used.get(resource, 0))
        if float(inqueue.get(resource, 0)) + float(amount) > idle:
            out.append(resource)
    return out


def refusal_message(resources: list[str]) -> str:
    """Volcano's event text (``FormatResourceNames``)."""
    return OVERUSED + ": " + ", ".join(f"overused {r}" for r in resources) if resources else OVERUSED
