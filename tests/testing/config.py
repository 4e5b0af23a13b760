"""Volcano-format scheduler configurations as text (what ``--config`` reads), built instead of written
out by hand in each test.

:func:`config_text` builds any configuration from tiers of plugin names, with each plugin's
``arguments`` and switches (``enablePreemptable``...) given by name; :func:`scheduler_config` is the
common shape (priority and gang, then predicates and the plugins under test) with each plugin entry
given as YAML text, so a test can also write what no model would produce.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from gpuq_k8s.common.model.config import SchedulerConfig

DEFAULT_ACTIONS: Final = "enqueue, allocate, preempt"


def config_text(
    *tiers: str | Sequence[str],
    actions: str = DEFAULT_ACTIONS,
    arguments: Mapping[str, Mapping[str, Any]] | None = None,
    switches: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """A configuration of ``tiers`` (each a list of plugin names, or one string of names separated by
    commas), ``actions``, ``arguments`` (plugin name -> its ``arguments:``) and ``switches`` (plugin
    name -> keys of its entry, such as ``enablePreemptable``)."""
    named = [[n.strip() for n in tier.split(",")] if isinstance(tier, str) else list(tier) for tier in tiers]
    arguments = arguments or {}
    switches = switches or {}
    listed = {name for tier in named for name in tier}
    unknown = (set(arguments) | set(switches)) - listed
    if unknown:
        raise ValueError(f"arguments or switches for plugins in no tier: {sorted(unknown)}")

    def entry(name: str) -> dict[str, Any]:
        plugin: dict[str, Any] = {"name": name, **switches.get(name, {})}
        if name in arguments:
            plugin["arguments"] = dict(arguments[name])
        return plugin

    document = {"actions": actions, "tiers": [{"plugins": [entry(name) for name in tier]} for tier in named]}
    return yaml.safe_dump(document, sort_keys=False)


def scheduler_config(*plugins: str) -> str:
    """A Volcano-format scheduler configuration: priority and gang, then predicates and ``plugins``, each
    a plugin entry as YAML (``"name: gpu-quota"``, or with ``"\\n    arguments: {...}"``)."""
    entries = "".join(f"  - {plugin}\n" for plugin in ("name: predicates", *plugins))
    return (
        'actions: "enqueue, allocate, preempt"\n'
        "tiers:\n- plugins:\n  - name: priority\n  - name: gang\n- plugins:\n" + entries
    )


#: priority and gang, then predicates: a test appends its plugins to the last tier
#: (``BASE_TIER + "  - name: capacity-scheduling\n"``).
BASE_TIER: Final = scheduler_config()


def scheduler_config_model(*plugins: str) -> SchedulerConfig:
    """:func:`scheduler_config` parsed."""
    return SchedulerConfig.from_yaml(scheduler_config(*plugins))
