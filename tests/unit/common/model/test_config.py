"""The Volcano-format scheduler configuration (design.md, "Scheduler configuration")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from gpuq_k8s.common.model.config import SUPPORTED_PLUGINS, SchedulerConfig
from gpuq_k8s.common.model.errors import ConfigError
from tests.testing.hostile import OBJECTS, only_gpuq_errors


def test_default_config_is_the_design_example() -> None:
    config = SchedulerConfig.default()
    assert config.actions == ("enqueue", "allocate", "preempt")
    assert [p.name for p in config.tiers[0]] == ["priority", "gang"]
    # gpuq's own plugins; Volcano's default-configuration plugins (overcommit, drf, ...) are opt-in.
    assert [p.name for p in config.plugins] == [
        "priority",
        "gang",
        "predicates",
        "capacity-card",
        "crossquota",
        "resource-strategy-fit",
        "capacity-scheduling",
        "gpu-quota",
    ]
    volcano = {"overcommit", "drf", "nodeorder", "binpack", "conformance", "proportion"}
    assert volcano <= set(SUPPORTED_PLUGINS)
    assert config.plugin("gang") is not None and config.plugin("binpack") is None
    assert config.plugin("proportion") is None


def test_volcano_switches_are_accepted_with_volcanos_spelling() -> None:
    config = SchedulerConfig.from_yaml(
        "actions: enqueue, allocate\ntiers:\n- plugins:\n  - name: gang\n    enableJobReady: false\n"
        "    enablePreemptable: false\n    enabledVictim: true\n"
    )
    plugin = config.plugin("gang")
    assert plugin is not None
    assert plugin.switches == {"enableJobReady": False, "enablePreemptable": False, "enabledVictim": True}
    assert not plugin.enabled("enablePreemptable") and plugin.enabled("enableNodeOrder")


def test_a_plugin_weight_of_zero_is_a_valid_configuration() -> None:
    """Semantics 11: 0 switches the plugin's scoring off (it used to be a start-up error); below 0 is
    still one, naming the argument."""
    text = (
        "actions: allocate\ntiers: [{plugins: [{name: crossquota,"
        " arguments: {gpu-resource-names: nvidia.com/gpu, crossQuotaWeight: 0}},"
        " {name: resource-strategy-fit, arguments: {resourceStrategyFitWeight: 0}}]}]"
    )
    config = SchedulerConfig.from_yaml(text)
    weights = [getattr(p.args, "plugin_weight", None) for p in config.plugins]
    assert weights == [0, 0]
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.from_yaml(
            text.replace("resourceStrategyFitWeight: 0", "resourceStrategyFitWeight: -1")
        )
    assert "tiers[0].plugins[1].arguments.resourceStrategyFitWeight" in str(info.value)
    assert "an integer from 0 to" in str(info.value)


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ('actions: "enqueue, shuffle"\ntiers: [{plugins: [{name: gang}]}]', "actions", "'shuffle'"),
        ('actions: "enqueue, enqueue"\ntiers: [{plugins: [{name: gang}]}]', "actions", "'enqueue, enqueue'"),
        ("actions: 3\ntiers: [{plugins: [{name: gang}]}]", "actions", "3"),
        ("actions: enqueue\ntiers: [{plugins: [{name: no-such}]}]", "tiers[0].plugins[0].name", "'no-such'"),
        (
            "actions: enqueue\ntiers: [{plugins: [{name: gang}]}, {plugins: [{name: gang}]}]",
            "tiers[1].plugins[0].name",
            "'gang'",
        ),
        ("actions: enqueue\ntiers: [{plugins: [{name: gang, arguments: {x: 1}}]}]", "arguments.x", "1"),
        ("actions: enqueue\ntiers: [{plugins: [{name: gang, enabledFoo: true}]}]", "enabledFoo", "True"),
        (
            "actions: enqueue\ntiers: [{plugins: [{name: gang, enableJobReady: yes-ish}]}]",
            "enableJobReady",
            "",
        ),
        ("actions: enqueue\ntiers: []", "tiers", "[]"),
        ("actions: enqueue\ntiers: [{plugins: []}]", "tiers[0].plugins", "[]"),
        ("actions: enqueue\ntiers: [{plugin: []}]", "tiers[0]", ""),
        ("actions: enqueue\ntier: []", "tier", ""),
        (
            "actions: enqueue\ntiers: [{plugins: [{name: gang}]}]\nmetrics: {address: x}",
            "metrics",
            "gpuq reads no metrics source",
        ),
        ("actions: [\n", "config", "'<yaml>'"),
        ("", "config", ""),
        ("- a\n- b\n", "config", ""),
    ],
)
def test_invalid_config_names_key_and_value(text: str, field: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.from_yaml(text)
    message = str(info.value)
    assert field in message
    assert value in message
    assert "expected" in message
    assert "\n" not in message


@settings(max_examples=200, deadline=None)
@given(OBJECTS, OBJECTS)
def test_fuzz_config_raises_only_config_errors(top: dict[str, object], arguments: dict[str, object]) -> None:
    only_gpuq_errors(SchedulerConfig.from_dict, top)
    for name in ("crossquota", "resource-strategy-fit"):
        data = {"actions": "allocate", "tiers": [{"plugins": [{"name": name, "arguments": arguments}]}]}
        only_gpuq_errors(SchedulerConfig.from_dict, data)
