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

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Final

from pydantic import BeforeValidator, Field

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.plugin_args import PluginArgs, expect
from gpuq_k8s.common.model.quantity import CPU, MEMORY, PODS

FACTOR_KEY: Final = "overcommit-factor"
DEFAULT_FACTOR: Final = 1.2
OVERUSED: Final = "resource in cluster is overused"


def _number_text(value: Any) -> Any:
    """A decimal string (Volcano's older ``map[string]string`` arguments) is its number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


class OvercommitArgs(PluginArgs):
    """The ``overcommit`` arguments: the factor the cluster's allocatable is multiplied by (>= 1)."""

    PLUGIN: ClassVar[str] = plugin_names.OVERCOMMIT

    factor: Annotated[
        float,
        Field(ge=1.0, allow_inf_nan=False),
        expect("a number >= 1.0 (the cluster's allocatable is multiplied by it)"),
        BeforeValidator(_number_text),
    ] = Field(DEFAULT_FACTOR, alias=FACTOR_KEY)

    @classmethod
    def unknown_key(cls, location: Sequence[str]) -> str:
        return f"the overcommit argument {FACTOR_KEY}"


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
