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
    arguments: {cardUnlimitedCpuMemory: false, nodeOrderWeight: 100.0}
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

Whether gpuq runs each of Volcano's actions and plugins, and why not when it does not (*never*, or *not
yet*), is one table (:mod:`common.model.volcano_support`): a refusal says which. ``reserve``, ``elect``
and the ``reservation`` plugin (sunset by Volcano in 2022; run by gpuq, design.md Semantics 15) are
accepted only together. A ConfigMap holding the configuration (``data["volcano-scheduler.conf"]``, or
gpuq's ``data["config.yaml"]``) is unwrapped (:meth:`SchedulerConfig.read` says so).

Each plugin's arguments are one pydantic model of that plugin's engine (the engine owns its knobs;
:mod:`common.model.plugin_args`); this module only knows which plugin names exist
(:mod:`common.model.plugin_names`) and which model reads each one's arguments.

Every problem of a file is reported, not only the first: each is a :class:`ConfigError` with its full
path (``tiers[1].plugins[3].arguments.nodeOrderWeight``), and a refused file raises one
:class:`ConfigErrors` holding them all (the commands print one line each). A problem that leaves
nothing below it readable (a file that is no YAML mapping) is the only one reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.action_args import (
    ELECT,
    OVERCOMMIT_FACTOR,
    RESERVE,
    SUPPORTED_ACTIONS,
    parse_configurations,
)
from gpuq_k8s.common.model.binpack import BinpackArgs
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.elastic.args import CapacitySchedulingArgs, ProportionArgs
from gpuq_k8s.common.model.errors import ConfigError, ErrorCollector
from gpuq_k8s.common.model.gang import GangArgs
from gpuq_k8s.common.model.gpu_share.args import GPUQuotaArgs
from gpuq_k8s.common.model.nodeorder import NodeOrderArgs
from gpuq_k8s.common.model.overcommit import OvercommitArgs
from gpuq_k8s.common.model.plugin_args import PluginArgs
from gpuq_k8s.common.model.predicates import PredicatesArgs
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.reservation import ReservationArgs
from gpuq_k8s.common.model.strategy_fit import ResourceStrategyFitArgs
from gpuq_k8s.common.model.switches import switch_problem
from gpuq_k8s.common.model.volcano_support import ACTIONS, PLUGINS, SECTIONS, SWITCHES_WHEN_TRUE

__all__ = ["ARGUMENTS", "SUPPORTED_ACTIONS", "SUPPORTED_PLUGINS", "PluginConfig", "SchedulerConfig"]

SUPPORTED_PLUGINS: Final = plugin_names.ALL
# Which model reads which plugin's arguments; a plugin absent here takes no arguments.
ARGUMENTS: Final[Mapping[str, type[PluginArgs]]] = {
    plugin_names.CAPACITY_CARD: CapacityCardArgs,
    plugin_names.CROSSQUOTA: CrossQuotaArgs,
    plugin_names.RESOURCE_STRATEGY_FIT: ResourceStrategyFitArgs,
    plugin_names.OVERCOMMIT: OvercommitArgs,
    plugin_names.NODEORDER: NodeOrderArgs,
    plugin_names.BINPACK: BinpackArgs,
    plugin_names.PREDICATES: PredicatesArgs,
    plugin_names.GANG: GangArgs,
    plugin_names.RESERVATION: ReservationArgs,
    plugin_names.GPU_QUOTA: GPUQuotaArgs,
    plugin_names.CAPACITY_SCHEDULING: CapacitySchedulingArgs,
    plugin_names.PROPORTION: ProportionArgs,
}

_TOP_LEVEL_KEYS: Final = frozenset({"actions", "tiers", "configurations"})


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """One plugin of a tier: its name, its raw arguments, its parsed argument model, and the Volcano
    switches set on it (a switch left out is on)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    args: PluginArgs | None = None
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
        """The configuration ``text`` holds (a ConfigMap holding one is unwrapped: :meth:`read`)."""
        return cls.read(text)[0]

    @classmethod
    def read(cls, text: str) -> tuple[SchedulerConfig, str | None]:
        """The configuration ``text`` holds, and a note when it was a ConfigMap holding it (Volcano's
        ``volcano-scheduler-configmap`` as ``kubectl get -o yaml`` prints it, or gpuq's own): its
        ``data["volcano-scheduler.conf"]`` (or ``data["config.yaml"]``) is read instead."""
        data = _load(text)
        inner = unwrap_config_map(data)
        if inner is None:
            return cls.from_dict(data), None
        key, text = inner
        meta = data.get("metadata") if isinstance(data.get("metadata"), Mapping) else {}
        ref = "/".join(str(part) for part in ("ConfigMap", meta.get("namespace"), meta.get("name")) if part)
        return cls.from_dict(_load(text, f"{ref}: data.{key}")), f"read {ref}'s data[{key!r}]"

    @classmethod
    def from_dict(cls, data: Any) -> SchedulerConfig:
        """Read a configuration; raises :class:`ConfigErrors` with every problem (see the module doc)."""
        if not isinstance(data, Mapping):
            raise ConfigError("config", data, "a mapping with 'actions' and 'tiers'")
        problems = ErrorCollector()
        for key in data:
            if key in SECTIONS:
                problems.add(str(key), data[key], SECTIONS[key].refusal(f"no '{key}' section"))
            elif key not in _TOP_LEVEL_KEYS:
                allowed = ", ".join(sorted(_TOP_LEVEL_KEYS))
                problems.add(str(key), data[key], f"one of the keys {allowed}")
        actions = _parse_actions(data.get("actions"), problems)
        tiers = _parse_tiers(data.get("tiers"), problems)
        configurations = parse_configurations(data.get("configurations"), into=problems)
        _check_configurations(configurations, {p.name for tier in tiers for p in tier}, problems)
        _check_reservation(actions, tiers, problems)
        problems.raise_any()
        return cls(actions=actions, tiers=tiers, configurations=configurations)

    def action_arguments(self, action: str) -> Mapping[str, Any]:
        return self.configurations.get(action, {})

    @classmethod
    def default(cls) -> SchedulerConfig:
        return cls.from_yaml(DEFAULT_CONFIG_YAML)


# The keys of a ConfigMap's data that hold a configuration: Volcano's chart's, then gpuq's deploy/'s.
CONFIG_MAP_KEYS: Final = ("volcano-scheduler.conf", "config.yaml")


def unwrap_config_map(data: Any) -> tuple[str, str] | None:
    """``(key, text)`` of the configuration a ConfigMap holds; None when ``data`` is no ConfigMap. A
    ConfigMap without one of :data:`CONFIG_MAP_KEYS` is a ConfigError naming the keys it has."""
    if not isinstance(data, Mapping) or data.get("kind") != "ConfigMap":
        return None
    entries = data.get("data")
    entries = entries if isinstance(entries, Mapping) else {}
    for key in CONFIG_MAP_KEYS:
        text = entries.get(key)
        if isinstance(text, str):
            return key, text
    found = ", ".join(sorted(str(k) for k in entries)) or "none"
    keys = " or ".join(repr(k) for k in CONFIG_MAP_KEYS)
    raise ConfigError("data", found, f"a ConfigMap whose data holds the configuration under {keys}")


def _load(text: str, where: str = "config") -> Any:
    """``text`` as YAML, or a one-line ConfigError naming ``where``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        # One line: the problem and where, not PyYAML's multi-line excerpt.
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or type(err).__name__
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(where, "<yaml>", f"valid YAML ({problem}{at})") from None
    except (ValueError, RecursionError) as err:
        # PyYAML's int() of more than 4,300 digits, or nesting past the recursion limit
        # (design.md Semantics 17).
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err).split(";")[0]
        raise ConfigError(where, "<yaml>", f"valid YAML within gpuq's limits ({reason})") from None
    if data is None:
        raise ConfigError(where, "", "a YAML mapping with 'actions' and 'tiers'")
    return data


def _check_configurations(
    configurations: Mapping[str, Mapping[str, Any]], plugins: set[str], problems: ErrorCollector
) -> None:
    """Action arguments only a plugin reads need that plugin: otherwise nothing would honour them."""
    factor = configurations.get("enqueue", {}).get(OVERCOMMIT_FACTOR)
    if factor is not None and plugin_names.OVERCOMMIT not in plugins:
        problems.add(
            f"configurations.enqueue.arguments.{OVERCOMMIT_FACTOR}",
            factor,
            f"no {OVERCOMMIT_FACTOR} without the overcommit plugin in the tiers (the one that reads it)",
        )


def _check_reservation(
    actions: tuple[str, ...], tiers: tuple[tuple[PluginConfig, ...], ...], problems: ErrorCollector
) -> None:
    """reserve, elect and the reservation plugin act only together (design.md Semantics 15): the
    reserve action asks the plugin for the target job and the node to lock; the plugin is asked by
    nothing else; elect is folded into reserve. One without the other would be configuration that
    silently does nothing, so it is refused naming what is missing."""
    where = next(
        (
            f"tiers[{t}].plugins[{p}].name"
            for t, tier in enumerate(tiers)
            for p, plugin in enumerate(tier)
            if plugin.name == plugin_names.RESERVATION
        ),
        None,
    )
    if RESERVE in actions and where is None:
        problems.add(
            "actions",
            RESERVE,
            "the reservation plugin in the tiers as well: it elects the target job and picks the nodes "
            "reserve locks (without it reserve would do nothing)",
        )
    if ELECT in actions and RESERVE not in actions:
        problems.add(
            "actions",
            ELECT,
            "reserve listed as well: gpuq folds elect into reserve, and a target job nothing reserves "
            "for changes nothing",
        )
    if where is not None and RESERVE not in actions:
        problems.add(
            where, plugin_names.RESERVATION, "the reserve action in actions as well: only reserve asks it"
        )


def _parse_actions(value: Any, problems: ErrorCollector) -> tuple[str, ...]:
    expected = f"a comma-separated list of {', '.join(SUPPORTED_ACTIONS)}"
    if not isinstance(value, str) or not value.strip():
        problems.add("actions", value, expected)
        return ()
    actions: list[str] = []
    for raw in value.split(","):
        action = raw.strip()
        if action not in SUPPORTED_ACTIONS:
            entry = ACTIONS.get(action)
            problems.add("actions", action, entry.refusal(expected) if entry else expected)
        elif action in actions:
            problems.add("actions", value, f"{expected}, each at most once ({quote(action)} repeats)")
        else:
            actions.append(action)
    return tuple(actions)


def _parse_tiers(value: Any, problems: ErrorCollector) -> tuple[tuple[PluginConfig, ...], ...]:
    if not isinstance(value, list) or not value:
        problems.add("tiers", value, "a non-empty list of {plugins: [...]}")
        return ()
    seen: set[str] = set()
    tiers: list[tuple[PluginConfig, ...]] = []
    for t, tier in enumerate(value):
        where = f"tiers[{t}]"
        if not isinstance(tier, Mapping) or set(tier) != {"plugins"}:
            problems.add(where, tier, "a mapping with exactly one key, 'plugins'")
            continue
        plugins = tier["plugins"]
        if not isinstance(plugins, list) or not plugins:
            problems.add(f"{where}.plugins", plugins, "a non-empty list of plugins")
            continue
        parsed = [
            _parse_plugin(plugin, f"{where}.plugins[{p}]", seen, problems) for p, plugin in enumerate(plugins)
        ]
        tiers.append(tuple(p for p in parsed if p is not None))
    return tuple(tiers)


def _parse_plugin(plugin: Any, where: str, seen: set[str], problems: ErrorCollector) -> PluginConfig | None:
    if not isinstance(plugin, Mapping):
        problems.add(where, plugin, "a mapping with a 'name'")
        return None
    name = plugin.get("name")
    known = name in SUPPORTED_PLUGINS
    if not known:
        expected = f"one of {', '.join(SUPPORTED_PLUGINS)}"
        entry = PLUGINS.get(name) if isinstance(name, str) else None
        problems.add(f"{where}.name", name, entry.refusal(expected) if entry else expected)
    elif name in seen:
        problems.add(f"{where}.name", name, "each plugin at most once across all tiers")
    seen.add(str(name))
    switches: dict[str, bool] = {}
    for key, val in plugin.items():
        if key in ("name", "arguments"):
            continue
        problem = switch_problem(str(key))
        if problem is not None:
            problems.add(f"{where}.{key}", val, problem)
        elif not isinstance(val, bool):
            problems.add(f"{where}.{key}", val, "true or false")
        elif val and key in SWITCHES_WHEN_TRUE:
            problems.add(f"{where}.{key}", val, SWITCHES_WHEN_TRUE[key].refusal("false"))
        else:
            switches[key] = val
    arguments = plugin.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        problems.add(f"{where}.arguments", arguments, "a mapping of argument name to value")
        return None
    if not known:
        return None  # nothing to read its arguments with
    model = ARGUMENTS.get(str(name))
    if model is None:
        for key, val in arguments.items():
            problems.add(f"{where}.arguments.{key}", val, f"no arguments: {name} takes none")
        return PluginConfig(name=str(name), switches=switches)
    try:
        # Read even when empty, so the model's defaults are filled in one place.
        args = model.parse(arguments)
    except ConfigError as err:
        problems.extend(err, f"{where}.arguments")
        return None
    return PluginConfig(name=str(name), arguments=dict(arguments), args=args, switches=switches)


DEFAULT_CONFIG_YAML: Final = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: capacity-card
    arguments: {cardUnlimitedCpuMemory: false, nodeOrderWeight: 100.0}
  - name: crossquota
    arguments:
      gpu-resource-names: "nvidia.com/gpu,nvidia.com/mig-.+,.+/gpu$"  # whole cards, MIG, MPS
      quota-resources: "cpu,memory"
      quota.cpu: "32"
  - name: resource-strategy-fit
    arguments: {resourceStrategyFitWeight: 10, resources: {nvidia.com/gpu: {type: MostAllocated, weight: 2}}}
  - name: capacity-scheduling
  - name: gpu-quota
"""
