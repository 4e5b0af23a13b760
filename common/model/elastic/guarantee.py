"""The guaranteed pool: the sum of ``min`` over every ElasticQuota against what the cluster's nodes have
allocatable (capacity-scheduling.md: the sum of min must not exceed the cluster's capacity; a
configuration that does is a misconfiguration, under which a namespace's min is no longer a
guarantee: its pods may find nothing to take back).

gpuq does not refuse such a configuration (nodes come and go, an autoscaled pool may be empty right
now); it says so, in four places, each reading this module:

- a Warning event ``GuaranteeOvercommitted`` on each ElasticQuota involved, when it becomes involved
  (or the figures of its refusal change), from the scheduler;
- the condition ``GuaranteeOvercommitted`` (True, reason ``SumOfMinExceedsCapacity``) in the
  ``status.conditions`` of each ElasticQuota involved, False (``SumOfMinWithinCapacity``) again once
  the sum fits (a quota never involved gets no condition);
- a warning of the admission webhook on the CREATE or UPDATE that raises a ``min`` past the capacity;
- the gauge ``gpuq_elastic_quota_min_over_capacity{resource}``: by how much the sum exceeds the
  capacity, 0 while it fits.

An ElasticQuota is *involved* for a resource when its ``min`` asks for some of it (more than 0).
Pure: amounts are gpuq's integer units (:mod:`common.model.quantity`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.quantity import format_units
from gpuq_k8s.common.model.wire import section

CONDITION: Final = "GuaranteeOvercommitted"
OVER: Final = "SumOfMinExceedsCapacity"
WITHIN: Final = "SumOfMinWithinCapacity"
EVENT_REASON: Final = CONDITION
WITHIN_MESSAGE: Final = "The sum of min over all ElasticQuotas fits the cluster's allocatable"


@dataclass(frozen=True, slots=True)
class Overcommit:
    """One resource whose ``sum(min)`` exceeds the cluster's allocatable ``capacity``; ``quotas`` are
    the namespaces whose min asks for it."""

    resource: str
    total_min: int
    capacity: int
    quotas: tuple[str, ...]

    @property
    def excess(self) -> int:
        return self.total_min - self.capacity

    @property
    def message(self) -> str:
        r = self.resource
        return (
            f"the sum of min over all ElasticQuotas for {r} is {format_units(r, self.total_min)}, more than "
            f"the {format_units(r, self.capacity)} the cluster's nodes have allocatable"
        )


def total_min(mins: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """``sum(min)`` per resource over the quotas' ``min`` maps."""
    total: dict[str, int] = {}
    for minimum in mins:
        for resource, amount in minimum.items():
            total[resource] = total.get(resource, 0) + amount
    return total


def overcommitted(mins: Mapping[str, Mapping[str, int]], capacity: Mapping[str, int]) -> list[Overcommit]:
    """The resources whose ``sum(min)`` over ``mins`` (namespace -> min) exceeds ``capacity`` (the
    cluster's allocatable per resource; a resource no node has is 0), by resource name."""
    total = total_min(mins.values())
    out: list[Overcommit] = []
    for resource in sorted(total):
        amount = total[resource]
        if amount > capacity.get(resource, 0):
            quotas = tuple(sorted(ns for ns, minimum in mins.items() if minimum.get(resource, 0) > 0))
            out.append(Overcommit(resource, amount, capacity.get(resource, 0), quotas))
    return out


def over_capacity(mins: Mapping[str, Mapping[str, int]], capacity: Mapping[str, int]) -> dict[str, int]:
    """Per resource some ``min`` lists: by how much ``sum(min)`` exceeds ``capacity`` (0 if it fits),
    for the ``gpuq_elastic_quota_min_over_capacity`` gauge."""
    total = total_min(mins.values())
    return {
        resource: max(amount - capacity.get(resource, 0), 0) for resource, amount in sorted(total.items())
    }


def condition_of(namespace: str, overcommits: Iterable[Overcommit]) -> tuple[str, str, str] | None:
    """(status, reason, message) of the ``GuaranteeOvercommitted`` condition of the quota of
    ``namespace`` when it is involved; None when it is not."""
    mine = [o for o in overcommits if namespace in o.quotas]
    if not mine:
        return None
    message = "; ".join(o.message for o in mine)
    return ("True", OVER, f"{message[0].upper()}{message[1:]}: min is no longer a guarantee")


def admission_warnings(
    ref: str,
    new_min: Mapping[str, int],
    old_min: Mapping[str, int],
    others: Iterable[Mapping[str, int]],
    capacity: Mapping[str, int],
) -> list[str]:
    """The webhook's warnings for an ElasticQuota ``ref`` whose min goes from ``old_min`` (empty at
    CREATE) to ``new_min``, beside the ``min`` of every other ElasticQuota: one per resource whose
    min it raises and whose ``sum(min)`` then exceeds the cluster's allocatable."""
    total = total_min([*others, new_min])
    warnings = []
    for resource in sorted(new_min):
        raised = new_min[resource] > old_min.get(resource, 0)
        if not raised or total.get(resource, 0) <= capacity.get(resource, 0):
            continue
        over = Overcommit(resource, total[resource], capacity.get(resource, 0), ())
        warnings.append(f"{ref}: spec.min[{resource}]: {over.message}: min is no longer a guarantee")
    return warnings


Condition = dict[str, str]


def written_condition(obj: Mapping[str, Any]) -> Condition | None:
    """The GuaranteeOvercommitted condition an ElasticQuota's status holds (written before a restart)."""
    conditions = section(obj, "status").get("conditions")
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == CONDITION:
            return {str(k): str(v) for k, v in condition.items()}
    return None


def update_conditions(
    quotas: Mapping[str, str],
    overcommits: Iterable[Overcommit],
    reported: dict[str, Condition],
    stamp: str,
) -> tuple[set[str], list[EventRecord]]:
    """Bring ``reported`` (namespace -> the condition last written) up to ``overcommits`` for the
    ElasticQuotas ``quotas`` (namespace -> ``ElasticQuota/ns/name``); returns the namespaces whose
    condition changed and a Warning event for each quota that became involved (or whose figures
    changed). A quota never involved gets no condition; one that was is told False once it fits; a
    condition keeps its ``lastTransitionTime`` while its status holds."""
    listed = list(overcommits)
    changed: set[str] = set()
    events: list[EventRecord] = []
    for namespace, ref in quotas.items():
        wanted = condition_of(namespace, listed)
        before = reported.get(namespace)
        if wanted is None:
            if before is None or before.get("status") == "False":
                continue  # never involved, or already told it fits again
            wanted = ("False", WITHIN, WITHIN_MESSAGE)
        status, reason, message = wanted
        if before is not None and tuple(before.get(k) for k in ("status", "reason", "message")) == wanted:
            continue
        kept = before is not None and before.get("status") == status
        since = before.get("lastTransitionTime", stamp) if before is not None and kept else stamp
        reported[namespace] = {
            "type": CONDITION,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        }
        changed.add(namespace)
        if status == "True":
            events.append(EventRecord(ref, "Warning", EVENT_REASON, message))
    return changed, events
