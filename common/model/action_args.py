"""Volcano's ``configurations:`` section: arguments per action (``Configuration`` in volcano-sh/volcano
``pkg/scheduler/conf/scheduler_conf.go``).

```yaml
configurations:
- name: enqueue
  arguments: {overcommit-factor: 1.2}
- name: preempt
  arguments: {minCandidateNodesPercentage: 10, minCandidateNodesAbsolute: 100}
```

Each action's arguments that gpuq honours are parsed here and handed to the scheduler (the framework
hands them to plugins: ``Handle.action_arguments``). An argument gpuq knows from Volcano but cannot
honour is refused naming the key and why; any other argument is refused as unknown. Nothing is
silently ignored, and every problem of the section is reported at once (:class:`ConfigErrors`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model.errors import ConfigError, ErrorCollector

ENQUEUE: Final = "enqueue"
ALLOCATE: Final = "allocate"
BACKFILL: Final = "backfill"
PREEMPT: Final = "preempt"
RECLAIM: Final = "reclaim"
SUPPORTED_ACTIONS: Final = (ENQUEUE, ALLOCATE, BACKFILL, PREEMPT, RECLAIM)

OVERCOMMIT_FACTOR: Final = "overcommit-factor"
TOPOLOGY_AWARE_PREEMPTION: Final = "enableTopologyAwarePreemption"
# Volcano's predicate error cache (allocate, backfill, preempt, reclaim): a job's similar tasks reuse
# a predicate failure. It saves time, not decisions, and gpuq's per-pod-class caches already do the
# same (design.md "Performance"), so either value is honoured.
PREDICATE_ERROR_CACHE: Final = "predicateErrorCacheEnable"
_CACHED_ACTIONS: Final = (ALLOCATE, BACKFILL, PREEMPT, RECLAIM)

# Volcano's preempt arguments that bound the candidate-node search (kube-scheduler's
# DefaultPreemptionArgs, plus Volcano's maximum): how many nodes with victims preemption finds before
# it chooses one (design.md "Preemption"). Unset: kube-scheduler's 10% and at least 100, and
# Volcano's at most 100 (so up to 100 nodes by default). The worker count is Volcano's parallelism of
# that search: it saves time, not decisions (the search is sequential and deterministic in gpuq), so
# any value is honoured.
MIN_CANDIDATE_NODES_PERCENTAGE: Final = "minCandidateNodesPercentage"
MIN_CANDIDATE_NODES_ABSOLUTE: Final = "minCandidateNodesAbsolute"
MAX_CANDIDATE_NODES_ABSOLUTE: Final = "maxCandidateNodesAbsolute"
PREEMPT_WORKERS: Final = "topologyAwarePreemptWorkerNum"
_PREEMPT_KEYS: Final = (
    TOPOLOGY_AWARE_PREEMPTION,
    MIN_CANDIDATE_NODES_PERCENTAGE,
    MIN_CANDIDATE_NODES_ABSOLUTE,
    MAX_CANDIDATE_NODES_ABSOLUTE,
    PREEMPT_WORKERS,
)


@dataclass(frozen=True, slots=True)
class CandidateLimits:
    """How many candidate nodes preemption finds before it chooses (kube's ``calculateNumCandidates``)."""

    percentage: int = 10
    minimum: int = 100
    maximum: int | None = 100

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> CandidateLimits:
        """From the preempt action's parsed arguments (defaults for those not given)."""
        default = cls()
        return cls(
            int(arguments.get(MIN_CANDIDATE_NODES_PERCENTAGE, default.percentage)),
            int(arguments.get(MIN_CANDIDATE_NODES_ABSOLUTE, default.minimum)),
            arguments.get(MAX_CANDIDATE_NODES_ABSOLUTE, default.maximum),
        )


def _int(where: str, value: Any, low: int, high: int | None = None) -> int:
    """An integer from ``low`` (to ``high``), or its digits as text (Volcano's string arguments)."""
    expected = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(where, value, expected)
    if value < low or (high is not None and value > high):
        raise ConfigError(where, value, expected)
    return value


def _factor(where: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(where, value, "a number >= 1.0") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 1.0:
        raise ConfigError(where, value, "a number >= 1.0")
    return float(value)


def _bool(where: str, value: Any) -> bool:
    """A boolean, or its text (Volcano's older ``map[string]string`` arguments)."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    if not isinstance(value, bool):
        raise ConfigError(where, value, "true or false")
    return value


def _parse_arguments(
    action: str, arguments: Mapping[str, Any], where: str, problems: ErrorCollector
) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for key, value in arguments.items():
        at = f"{where}.arguments.{key}"
        try:
            if action == ENQUEUE and key == OVERCOMMIT_FACTOR:
                parsed[key] = _factor(at, value)
            elif action in _CACHED_ACTIONS and key == PREDICATE_ERROR_CACHE:
                parsed[key] = _bool(at, value)
            elif action == ALLOCATE and key == "gateRemovalWorkerNum":
                raise ConfigError(at, value, "no scheduling-gate workers: gpuq removes no scheduling gates")
            elif action == PREEMPT and key == TOPOLOGY_AWARE_PREEMPTION:
                # gpuq's preempt always chooses as Volcano's topology-aware preempt does (kube's
                # DefaultPreemption), so either value is honoured (design.md Semantics 15).
                parsed[key] = _bool(at, value)
            elif action == PREEMPT and key == MIN_CANDIDATE_NODES_PERCENTAGE:
                parsed[key] = _int(at, value, 0, 100)
            elif action == PREEMPT and key == MIN_CANDIDATE_NODES_ABSOLUTE:
                parsed[key] = _int(at, value, 0)
            elif action == PREEMPT and key in (MAX_CANDIDATE_NODES_ABSOLUTE, PREEMPT_WORKERS):
                parsed[key] = _int(at, value, 1)
            else:
                known = {ENQUEUE: [OVERCOMMIT_FACTOR], PREEMPT: list(_PREEMPT_KEYS)}.get(action, [])
                if action in _CACHED_ACTIONS:
                    known = [*known, PREDICATE_ERROR_CACHE]
                raise ConfigError(at, value, f"an argument of the {action} action ({', '.join(known)})")
        except ConfigError as err:
            problems.extend(err)
    if (
        action == PREEMPT
        and parsed.get(MIN_CANDIDATE_NODES_PERCENTAGE, 1) == 0
        and parsed.get(MIN_CANDIDATE_NODES_ABSOLUTE, 1) == 0
    ):
        # kube's ValidateDefaultPreemptionArgs: both zero would look for no candidate at all.
        problems.add(
            f"{where}.arguments.{MIN_CANDIDATE_NODES_ABSOLUTE}",
            0,
            f"not 0 when {MIN_CANDIDATE_NODES_PERCENTAGE} is 0 (preemption would look for no node)",
        )
    return parsed


def parse_configurations(value: Any, into: ErrorCollector | None = None) -> dict[str, dict[str, Any]]:
    """``configurations:`` as action -> parsed arguments. Every offending key is a problem: added to
    ``into`` (then what could be read is returned), else raised together as :class:`ConfigErrors`."""
    problems = ErrorCollector() if into is None else into
    if value is None:
        return {}
    if not isinstance(value, list):
        problems.add("configurations", value, "a list of {name: <action>, arguments: {...}}")
        if into is None:
            problems.raise_any()
        return {}
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(value):
        where = f"configurations[{i}]"
        if not isinstance(entry, Mapping):
            problems.add(where, entry, "a mapping with 'name' and 'arguments'")
            continue
        for key in entry:
            if key not in ("name", "arguments"):
                problems.add(f"{where}.{key}", entry[key], "'name' or 'arguments'")
        name = entry.get("name")
        arguments = entry.get("arguments") or {}
        if name not in SUPPORTED_ACTIONS:
            problems.add(f"{where}.name", name, f"one of {', '.join(SUPPORTED_ACTIONS)}")
        elif name in out:
            problems.add(f"{where}.name", name, "each action configured at most once")
        elif not isinstance(arguments, Mapping):
            problems.add(f"{where}.arguments", arguments, "a mapping of argument name to value")
        else:
            out[name] = _parse_arguments(name, arguments, where, problems)
    if into is None:
        problems.raise_any()
    return out
