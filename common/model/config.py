"""The scheduler configuration, in Volcano's format (design.md, "Scheduler configuration").

```yaml
actions: "enqueue, allocate, backfill, preempt, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
- plugins:
  - name: capacity-card
    arguments: {cardUnlimitedCpuMemory: false, nodeOrderWeight: 1.0}
configurations:
- name: preempt
  arguments: {enableTopologyAwarePreemption: false}
```

Volcano's configuration is taken whole: actions in the listed order, tiers kept as tiers (the
framework combines verdicts as Volcano's session does), every plugin switch with Volcano's spelling
(:mod:`common.model.switches`), and the ``configurations:`` section
(:mod:`common.model.action_args`). Anything gpuq does not support is a start-up error naming the key
and the value: an unknown action, plugin, switch or argument, an argument of the wrong type, an
action argument gpuq cannot honour. Nothing is silently replaced by a default, because a scheduler
that quietly ignores half its configuration is worse than one that refuses to start.

Each plugin's arguments are validated by the argument model of that plugin's engine module (the
engine owns its knobs); this module only knows which plugin names exist and which engine parses
their arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml
from pydantic import BaseModel

from gpuq_k8s.common.model import binpack, nodeorder, overcommit, strategy_fit
from gpuq_k8s.common.model.action_args import OVERCOMMIT_FACTOR, SUPPORTED_ACTIONS, parse_configurations
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.crossquota import args as crossquota_args
from gpuq_k8s.common.model.errors import ConfigError
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.switches import UNSUPPORTED_WHEN_TRUE, switch_problem

__all__ = ["SUPPORTED_ACTIONS", "SUPPORTED_PLUGINS", "PluginConfig", "SchedulerConfig"]

PRIORITY: Final = "priority"
GANG: Final = "gang"
PREDICATES: Final = "predicates"
CAPACITY_CARD: Final = "capacity-card"
CROSSQUOTA: Final = "crossquota"
RESOURCE_STRATEGY_FIT: Final = "resource-strategy-fit"
CAPACITY_SCHEDULING: Final = "capacity-scheduling"
GPU_QUOTA: Final = "gpu-quota"
CONFORMANCE: Final = "conformance"
PROPORTION: Final = "proportion"
OVERCOMMIT: Final = "overcommit"
DRF: Final = "drf"
NODEORDER: Final = "nodeorder"
BINPACK: Final = "binpack"
SUPPORTED_PLUGINS: Final = (
    PRIORITY,
    GANG,
    PREDICATES,
    CAPACITY_CARD,
    CROSSQUOTA,
    RESOURCE_STRATEGY_FIT,
    CAPACITY_SCHEDULING,
    GPU_QUOTA,
    CONFORMANCE,
    PROPORTION,
    OVERCOMMIT,
    DRF,
    NODEORDER,
    BINPACK,
)

_TOP_LEVEL_KEYS: Final = frozenset({"actions", "tiers", "configurations"})
# Volcano keys gpuq knows but does not implement, with the reason: refused by name rather than
# silently ignored.
_UNSUPPORTED_VOLCANO_KEYS: Final = {
    "metrics": "gpuq reads no metrics source (Volcano's usage plugin's input)",
}

ArgumentParser = Callable[[Mapping[str, Any]], BaseModel]


def _argument_parsers() -> dict[str, ArgumentParser]:
    """Which engine validates which plugin's arguments (the engine owns its knobs).

    Plugins absent from this table take no arguments.
    """
    return {
        CAPACITY_CARD: CapacityCardArgs.from_arguments,
        CROSSQUOTA: crossquota_args.parse_arguments,
        RESOURCE_STRATEGY_FIT: strategy_fit.parse_arguments,
        OVERCOMMIT: overcommit.parse_arguments,
        NODEORDER: nodeorder.parse_arguments,
        BINPACK: binpack.parse_arguments,
    }


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """One plugin of a tier: its name, its raw arguments, the engine's parsed argument model, and the
    Volcano switches set on it (a switch left out is on)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    args: BaseModel | None = None
    switches: Mapping[str, bool] = field(default_factory=dict)

    def enabled(self, switch: str) -> bool:
        return self.switches.get(switch, True)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    actions: tuple[str, ...]
    tiers: tuple[tuple[PluginConfig, ...], ...]
    # ``configurations:``: action -> its parsed arguments (only actions the section names).
    configurations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def plugins(self) -> tuple[PluginConfig, ...]:
        """All plugins in tier order."""
        return tuple(p for tier in self.tiers for p in tier)

    def plugin(self, name: str) -> PluginConfig | None:
        return next((p for p in self.plugins if p.name == name), None)

    @classmethod
    def from_yaml(cls, text: str) -> SchedulerConfig:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            # One line: the problem and where, not PyYAML's multi-line excerpt.
            mark = getattr(err, "problem_mark", None)
            problem = getattr(err, "problem", None) or type(err).__name__
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise ConfigError("config", "<yaml>", f"valid YAML ({problem}{at})") from None
        except (ValueError, RecursionError) as err:
            # PyYAML's int() of more than 4,300 digits, or nesting past the recursion limit
            # (design.md Semantics 16).
            reason = "nested too deeply" if isinstance(err, RecursionError) else str(err).split(";")[0]
            raise ConfigError("config", "<yaml>", f"valid YAML within gpuq's limits ({reason})") from None
        if data is None:
            raise ConfigError("config", "", "a YAML mapping with 'actions' and 'tiers'")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> SchedulerConfig:
        if not isinstance(data, Mapping):
            raise ConfigError("config", data, "a mapping with 'actions' and 'tiers'")
        for key in data:
            if key in _UNSUPPORTED_VOLCANO_KEYS:
                why = _UNSUPPORTED_VOLCANO_KEYS[key]
                raise ConfigError(str(key), data[key], f"no '{key}' section: {why}")
            if key not in _TOP_LEVEL_KEYS:
                allowed = ", ".join(sorted(_TOP_LEVEL_KEYS))
                raise ConfigError(str(key), data[key], f"one of the keys {allowed}")
        actions = _parse_actions(data.get("actions"))
        tiers = _parse_tiers(data.get("tiers"))
        configurations = parse_configurations(data.get("configurations"))
        config = cls(actions=actions, tiers=tiers, configurations=configurations)
        config._check_configurations()
        return config

    def _check_configurations(self) -> None:
        """Action arguments only a plugin reads need that plugin: otherwise nothing would honour them."""
        factor = self.configurations.get("enqueue", {}).get(OVERCOMMIT_FACTOR)
        if factor is not None and self.plugin(OVERCOMMIT) is None:
            raise ConfigError(
                f"configurations.enqueue.arguments.{OVERCOMMIT_FACTOR}",
                factor,
                f"no {OVERCOMMIT_FACTOR} without the overcommit plugin in the tiers (the one that reads it)",
            )

    def action_arguments(self, action: str) -> Mapping[str, Any]:
        return self.configurations.get(action, {})

    @classmethod
    def default(cls) -> SchedulerConfig:
        return cls.from_yaml(DEFAULT_CONFIG_YAML)


def _parse_actions(value: Any) -> tuple[str, ...]:
    expected = f"a comma-separated list of {', '.join(SUPPORTED_ACTIONS)}"
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("actions", value, expected)
    actions: list[str] = []
    for raw in value.split(","):
        action = raw.strip()
        if action not in SUPPORTED_ACTIONS:
            raise ConfigError("actions", action, expected)
        if action in actions:
            raise ConfigError("actions", value, f"{expected}, each at most once ({quote(action)} repeats)")
        actions.append(action)
    return tuple(actions)


def _parse_tiers(value: Any) -> tuple[tuple[PluginConfig, ...], ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError("tiers", value, "a non-empty list of {plugins: [...]}")
    parsers = _argument_parsers()
    seen: set[str] = set()
    tiers: list[tuple[PluginConfig, ...]] = []
    for t, tier in enumerate(value):
        where = f"tiers[{t}]"
        if not isinstance(tier, Mapping) or set(tier) != {"plugins"}:
            raise ConfigError(where, tier, "a mapping with exactly one key, 'plugins'")
        plugins = tier["plugins"]
        if not isinstance(plugins, list) or not plugins:
            raise ConfigError(f"{where}.plugins", plugins, "a non-empty list of plugins")
        parsed: list[PluginConfig] = []
        for p, plugin in enumerate(plugins):
            parsed.append(_parse_plugin(plugin, f"{where}.plugins[{p}]", parsers, seen))
        tiers.append(tuple(parsed))
    return tuple(tiers)


def _parse_plugin(
    plugin: Any, where: str, parsers: Mapping[str, ArgumentParser], seen: set[str]
) -> PluginConfig:
    if not isinstance(plugin, Mapping):
        raise ConfigError(where, plugin, "a mapping with a 'name'")
    name = plugin.get("name")
    if name not in SUPPORTED_PLUGINS:
        raise ConfigError(f"{where}.name", name, f"one of {', '.join(SUPPORTED_PLUGINS)}")
    if name in seen:
        raise ConfigError(f"{where}.name", name, "each plugin at most once across all tiers")
    seen.add(name)
    switches: dict[str, bool] = {}
    for key, val in plugin.items():
        if key in ("name", "arguments"):
            continue
        problem = switch_problem(str(key))
        if problem is not None:
            raise ConfigError(f"{where}.{key}", val, problem)
        if not isinstance(val, bool):
            raise ConfigError(f"{where}.{key}", val, "true or false")
        if val and key in UNSUPPORTED_WHEN_TRUE:
            raise ConfigError(f"{where}.{key}", val, f"false: {UNSUPPORTED_WHEN_TRUE[key]}")
        switches[key] = val
    arguments = plugin.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        raise ConfigError(f"{where}.arguments", arguments, "a mapping of argument name to value")
    parser = parsers.get(name)
    if parser is None:
        if arguments:
            key = next(iter(arguments))
            raise ConfigError(f"{where}.arguments.{key}", arguments[key], f"no arguments: {name} takes none")
        return PluginConfig(name=name, switches=switches)
    try:
        # Called even for empty arguments, so the model's defaults are filled in one place.
        args = parser(arguments)
    except ConfigError as err:
        raise ConfigError(f"{where}.arguments.{err.field}", err.value, err.expected) from None
    return PluginConfig(name=name, arguments=dict(arguments), args=args, switches=switches)


DEFAULT_CONFIG_YAML: Final = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: capacity-card
    arguments: {cardUnlimitedCpuMemory: false, nodeOrderWeight: 1.0}
  - name: crossquota
    arguments: {gpu-resource-names: "nvidia.com/gpu", quota-resources: "cpu,memory", quota.cpu: "32"}
  - name: resource-strategy-fit
    arguments: {resourceStrategyFitWeight: 10, resources: {nvidia.com/gpu: {type: MostAllocated, weight: 2}}}
  - name: capacity-scheduling
  - name: gpu-quota
"""
