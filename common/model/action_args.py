"""Volcano's ``configurations:`` section: arguments per action (``Configuration`` in volcano-sh/volcano
``pkg/scheduler/conf/scheduler_conf.go``).

```yaml
configurations:
- name: enqueue
  arguments: {overcommit-factor: 1.2}
- name: preempt
  arguments: {enableTopologyAwarePreemption: false, predicateErrorCacheEnable: true}
```

Each action's arguments that gpuq honours are parsed here and handed to the scheduler (the framework
hands them to plugins: ``Handle.action_arguments``). An argument gpuq knows from Volcano but cannot
honour is refused naming the key and why; any other argument is refused as unknown. Nothing is
silently ignored, and every problem of the section is reported at once (:class:`ConfigErrors`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpuq_k8s.common.model.errors import ConfigError, ErrorCollector
from gpuq_k8s.common.model.volcano_support import ACTION_ARGUMENTS, ACTIONS

ENQUEUE: Final = "enqueue"
ALLOCATE: Final = "allocate"
BACKFILL: Final = "backfill"
PREEMPT: Final = "preempt"
RECLAIM: Final = "reclaim"
# Sunset by Volcano in 2022 (PR #2236) and run by gpuq: reserve elects the target job and locks nodes
# for it; elect is folded into reserve (design.md Semantics 15).
RESERVE: Final = "reserve"
ELECT: Final = "elect"
SUPPORTED_ACTIONS: Final = (ENQUEUE, ALLOCATE, BACKFILL, PREEMPT, RECLAIM, RESERVE, ELECT)

OVERCOMMIT_FACTOR: Final = "overcommit-factor"
TOPOLOGY_AWARE_PREEMPTION: Final = "enableTopologyAwarePreemption"
# Volcano's predicate error cache (allocate, backfill, preempt, reclaim): a job's similar tasks reuse
# a predicate failure. It saves time, not decisions, and gpuq's per-pod-class caches already do the
# same (design.md "Performance"), so either value is honoured.
PREDICATE_ERROR_CACHE: Final = "predicateErrorCacheEnable"
_CACHED_ACTIONS: Final = (ALLOCATE, BACKFILL, PREEMPT, RECLAIM)

# Volcano's preempt arguments that bound the candidate-node search: gpuq's preempt and reclaim
# consider every node, which no value of these can express.
_CANDIDATE_LIMITS: Final = (
    "minCandidateNodesPercentage",
    "minCandidateNodesAbsolute",
    "maxCandidateNodesAbsolute",
    "topologyAwarePreemptWorkerNum",
)


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


def _false_only(where: str, value: Any, expected: str) -> bool:
    if _bool(where, value):
        raise ConfigError(where, value, expected)
    return False


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
                raise ConfigError(at, value, ACTION_ARGUMENTS[key].refusal("no scheduling-gate workers"))
            elif action == PREEMPT and key == TOPOLOGY_AWARE_PREEMPTION:
                parsed[key] = _false_only(at, value, ACTION_ARGUMENTS[key].refusal("false"))
            elif action == PREEMPT and key in _CANDIDATE_LIMITS:
                raise ConfigError(at, value, ACTION_ARGUMENTS[key].refusal("no candidate-node limit"))
            else:
                known = {ENQUEUE: [OVERCOMMIT_FACTOR], PREEMPT: [TOPOLOGY_AWARE_PREEMPTION]}.get(action, [])
                if action in _CACHED_ACTIONS:
                    known = [*known, PREDICATE_ERROR_CACHE]
                raise ConfigError(at, value, f"an argument of the {action} action ({', '.join(known)})")
        except ConfigError as err:
            problems.extend(err)
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
            expected = f"one of {', '.join(SUPPORTED_ACTIONS)}"
            known = ACTIONS.get(name) if isinstance(name, str) else None
            problems.add(f"{where}.name", name, known.refusal(expected) if known else expected)
        elif name in out:
            problems.add(f"{where}.name", name, "each action configured at most once")
        elif not isinstance(arguments, Mapping):
            problems.add(f"{where}.arguments", arguments, "a mapping of argument name to value")
        else:
            out[name] = _parse_arguments(name, arguments, where, problems)
    if into is None:
        problems.raise_any()
    return out
