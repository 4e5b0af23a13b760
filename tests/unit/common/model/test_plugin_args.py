"""Plugin arguments are one pydantic model each, read by ``Args.parse`` (common/model/plugin_args.py):
Volcano's keys as aliases, unknown keys refused, strict types, bounds, Volcano's flat keys regrouped,
and every problem of a plugin's arguments reported with the key the user wrote."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.binpack import BinpackArgs
from gpuq_k8s.common.model.config import ARGUMENTS
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.errors import ConfigError, ConfigErrors
from gpuq_k8s.common.model.plugin_args import PluginArgs

# The least each model's arguments need (crossquota requires gpu-resource-names).
REQUIRED: dict[str, dict[str, Any]] = {"crossquota": {"gpu-resource-names": "nvidia.com/gpu"}}
MODELS = sorted(ARGUMENTS.items())


@pytest.mark.parametrize(("name", "model"), MODELS, ids=[name for name, _ in MODELS])
def test_every_model_is_declared_the_one_way(name: str, model: type[PluginArgs]) -> None:
    """Frozen, unknown keys forbidden, strict, and named after the plugin it configures."""
    assert issubclass(model, PluginArgs) and name == model.PLUGIN
    config = model.model_config
    assert (config.get("frozen"), config.get("extra"), config.get("strict")) == (True, "forbid", True)
    # Every field is read by its Volcano key, never by its Python name (unless they are the same).
    for field_name, field in model.model_fields.items():
        assert field.alias, (name, field_name)
        if field.alias == field_name:
            continue
        with pytest.raises(ConfigError) as info:
            model.parse({**REQUIRED.get(name, {}), field_name: field.default})
        assert info.value.field == field_name


@pytest.mark.parametrize(("name", "model"), MODELS, ids=[name for name, _ in MODELS])
def test_every_problem_of_one_plugin_is_reported_with_its_key(name: str, model: type[PluginArgs]) -> None:
    arguments: dict[Any, Any] = {**REQUIRED.get(name, {}), "no-such": 1, "no-such-either": True, 3: "x"}
    with pytest.raises(ConfigErrors) as info:
        model.parse(arguments)
    assert sorted(e.field for e in info.value.errors) == ["3", "no-such", "no-such-either"]
    assert "an argument name (a string)" in info.value.lines()[0]
    assert model.parse(REQUIRED.get(name, {})) == model.parse(dict(REQUIRED.get(name, {})))  # defaults


def test_flat_keys_are_regrouped_and_refused_by_the_key_written() -> None:
    """``quota.cpu`` lands in ``quotas`` (in millicores), ``weight.memory`` in ``resource_weights``; a
    problem names ``quota.memory``, not the regrouped field; the pattern itself is no key."""
    base = {"gpu-resource-names": "nvidia.com/gpu", "quota-resources": "cpu,memory"}
    args = CrossQuotaArgs.parse({**base, "quota.cpu": "1.5", "weight.memory": "4"})
    assert args.quotas == {"cpu": 1500} and args.resource_weights == {"cpu": 10, "memory": 4}
    with pytest.raises(ConfigErrors) as info:
        CrossQuotaArgs.parse(
            {**base, "quota.cpu": "lots", "quota.memory": "-1Gi", "quota.<resource>": "1", "weight.gpu": 2}
        )
    assert [(e.field, e.value) for e in info.value.errors] == [
        ("quota.cpu", "lots"),
        ("quota.memory", "-1Gi"),
        ("quota.<resource>", "1"),
        ("weight.gpu", 2),
    ]
    assert "add 'gpu' there first" in info.value.lines()[-1]


def test_refusals_show_the_value_as_written() -> None:
    """A weight given as text is converted before its bounds are checked; the message quotes the text."""
    with pytest.raises(ConfigError) as info:
        BinpackArgs.parse({"binpack.weight": "9" * 19})
    assert info.value.value == "9" * 19
    assert (
        str(info.value)
        == f"binpack.weight: invalid value '{'9' * 19}': expected an integer from 0 to 1000000"
    )


def test_code_builds_a_model_by_field_name() -> None:
    args = BinpackArgs(weight=3, resources=("example.com/foo",), listed_weights={"example.com/foo": 2})
    assert args.resource_weights == {"cpu": 1, "memory": 1, "example.com/foo": 2}
    assert args == BinpackArgs.parse(
        {"binpack.weight": 3, "binpack.resources": "example.com/foo", "binpack.resources.example.com/foo": 2}
    )
