"""The structural-schema validator simulate holds custom resources to (scheduler/simulate/schema.py):
its keywords on small schemas of its own, then the shipped CRDs (deploy/crds) on real objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.scheduler.simulate.schema import (
    CRD_DIRECTORY,
    CustomResourceDefinition,
    check_custom_resource,
    load_crds,
    validate,
)
from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota, MakePodGroup, MakeQueue
from tests.testing.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"

QUANTITY = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": r"^(\+|-)?[0-9]+(\.[0-9]*)?([KMGTPE]i|[mkMGTPE])?$",
    "x-kubernetes-int-or-string": True,
}
SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["size"],
    "properties": {
        "size": {"type": "integer", "format": "int32", "minimum": 1},
        "ratio": {"type": "number", "exclusiveMaximum": True, "maximum": 1},
        "mode": {"type": "string", "enum": ["hard", "soft"]},
        "note": {"type": "string", "nullable": True, "maxLength": 5},
        "limits": {"type": "object", "additionalProperties": QUANTITY},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 2},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "when": {"type": "string", "format": "date-time"},
        "big": {"type": "integer", "format": "int64"},
        "flag": {"type": "boolean"},
        "conditions": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": {"type": "object", "properties": {"type": {"type": "string"}}},
        },
    },
}


def problems(value: Any, schema: dict[str, Any] = SPEC) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in validate(schema, value, "spec")]


def test_a_valid_object_has_no_problems() -> None:
    value = {
        "size": 3,
        "ratio": 0.5,
        "mode": "soft",
        "note": None,
        "limits": {"cpu": "500m", "nvidia.com/gpu": 2},
        "tags": ["a", "b"],
        "extra": {"anything": {"goes": [1, 2]}},
        "when": "2024-05-01T10:00:00Z",
        "big": 2**40,
        "flag": False,
        "conditions": [{"type": "Ready"}, {"type": "Other"}],
    }
    assert problems(value) == []


def test_unknown_fields_are_refused_where_the_schema_does_not_preserve_them() -> None:
    assert problems({"size": 1, "sise": 2, "extra": {"free": 1}}) == [("spec.sise", "unknown field")]
    assert problems({"size": 1}, {"type": "object", "additionalProperties": False}) == [
        ("spec.size", "unknown field")
    ]
    assert problems({"size": 1}, {"type": "object", "additionalProperties": True}) == []


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [
        ({"size": "3"}, "spec.size", "invalid value '3': expected an integer"),
        ({"size": True}, "spec.size", "invalid value True: expected an integer"),
        ({"size": 0}, "spec.size", "invalid value 0: expected a number at least 1"),
        ({"size": 2**31}, "spec.size", "expected an integer from -2147483648 to 2147483647 (int32)"),
        ({"size": 1, "big": 2**63}, "spec.big", "(int64)"),
        ({"size": 1, "ratio": 1}, "spec.ratio", "invalid value 1: expected a number less than 1"),
        ({"size": 1, "mode": "firm"}, "spec.mode", "invalid value 'firm': expected one of hard, soft"),
        ({"size": 1, "note": "toolong"}, "spec.note", "expected at most 5 characters"),
        (
            {"size": 1, "limits": {"cpu": "lots"}},
            "spec.limits[cpu]",
            "invalid value 'lots': expected a string",
        ),
        ({"size": 1, "limits": {"cpu": 1.5}}, "spec.limits[cpu]", "expected an integer or a string"),
        ({"size": 1, "tags": ["a", ""]}, "spec.tags[1]", "expected at least 1 characters"),
        ({"size": 1, "tags": ["a", "b", "c"]}, "spec.tags", "has 3 items: expected at most 2"),
        ({"size": 1, "tags": "a"}, "spec.tags", "invalid value 'a': expected a list"),
        ({"size": 1, "when": "yesterday"}, "spec.when", "expected an RFC 3339 date-time"),
        ({"size": 1, "flag": "yes"}, "spec.flag", "expected a boolean"),
        ({"size": 1, "conditions": [{"type": "A"}, {"type": "A"}]}, "spec.conditions[1]", "duplicate entry"),
        ({}, "spec.size", "missing: required by the CRD schema"),
        ({"size": None}, "spec.size", "missing: required by the CRD schema"),
    ],
)
def test_each_keyword_names_the_field_the_value_and_what_was_expected(
    value: dict[str, Any], path: str, fragment: str
) -> None:
    found = problems(value)
    assert len(found) == 1, found
    assert found[0][0] == path and fragment in found[0][1]


def test_json_numbers_and_nulls_as_the_apiserver_reads_them() -> None:
    # 2.0 is an integer in JSON; a null in a field that is not nullable is pruned (as if absent).
    assert problems({"size": 2.0, "mode": None}) == []
    assert problems({"size": 2.5}) == [("spec.size", "invalid value 2.5: expected an integer")]
    assert problems(None) == [("spec", "invalid value None: expected an object (not null)")]


def test_every_problem_is_reported_not_just_the_first() -> None:
    found = problems({"size": 0, "mode": "firm", "bogus": 1})
    assert sorted(path for path, _ in found) == ["spec.bogus", "spec.mode", "spec.size"]


def test_combinators() -> None:
    one_of = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert problems(2, one_of) == [
        ("spec", "invalid value 2: expected a value matching exactly one of: an integer, a number")
    ]
    assert problems(2.5, one_of) == []
    assert problems(2, {"not": {"type": "integer"}})[0][1].startswith("invalid value 2: expected a value not")
    assert problems(5, {"allOf": [{"minimum": 1}, {"maximum": 4}]}) == [
        ("spec", "invalid value 5: expected a number at most 4")
    ]


# -- the shipped CRDs -------------------------------------------------------------------------------


def test_the_shipped_crds_are_loaded_by_kind() -> None:
    crds = load_crds()
    assert set(crds) == {"Queue", "PodGroup", "ElasticQuota", "GPUResourceQuota"}
    assert not crds["Queue"].namespaced and crds["PodGroup"].namespaced
    assert set(crds["GPUResourceQuota"].schemas) == {"tensor-fusion.ai/v1"}


def test_a_missing_crd_directory_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no such directory") as err:
        load_crds(tmp_path / "nowhere")
    assert "\n" not in str(err.value)


def _rendered(obj: dict[str, Any]) -> list[str]:
    crd: CustomResourceDefinition = load_crds()[obj["kind"]]
    return [p.render("X") for p in check_custom_resource(crd, obj)]


@pytest.mark.parametrize(
    "obj",
    [
        MakeQueue("q").card_quota('{"NVIDIA-A100": 4}').capability(cpu="8", memory="32Gi").weight(3).obj(),
        MakeQueue("q").state("Closed").obj(),
        MakePodGroup("g").queue("q").min_member(2).min_resources(cpu="4").phase("Inqueue").obj(),
        MakeElasticQuota("eq").min(cpu="2").max(cpu="4", **{"nvidia.com/gpu": "2"}).obj(),
        MakeGPUResourceQuota("gq").total(maxWorkers=10, alertThresholdPercent=80).single(maxGPUCount=1).obj(),
    ],
)
def test_builder_objects_are_valid_custom_resources(obj: dict[str, Any]) -> None:
    assert _rendered(obj) == []


def test_every_custom_resource_of_the_examples_is_valid() -> None:
    crds = load_crds()
    checked = 0
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") in crds:
                assert _rendered(doc) == [], path
                checked += 1
    assert checked >= 20


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"apiVersion": "tensor-fusion.ai/v2"},
            "X: apiVersion: invalid value 'tensor-fusion.ai/v2': expected",
        ),
        ({"apiVersion": None}, "X: apiVersion: missing: expected tensor-fusion.ai/v1"),
        ({"metadata": {"name": "q", "namespace": "ml", "labelz": {}}}, "X: metadata.labelz: unknown field"),
        ({"metadata": {"name": "Q_1", "namespace": "ml"}}, "X: metadata.name: invalid value 'Q_1'"),
        (
            {"metadata": {"name": "q", "namespace": "ml", "labels": {"a": 1}}},
            "X: metadata.labels[a]: invalid",
        ),
        (
            {"metadata": {"name": "q", "namespace": "ml", "annotations": {"bad key": "v"}}},
            "X: metadata.annotations: invalid value 'bad key'",
        ),
        (
            {"spec": {"total": {"requests": {"tflops": "-5", "vram": "1Gi"}}}},
            "X: spec.total.requests.tflops: invalid value '-5'",
        ),
        (
            {"spec": {"total": {"alertThresholdPercent": 101}}},
            "X: spec.total.alertThresholdPercent: invalid value 101: expected a number at most 100",
        ),
    ],
)
def test_what_the_apiserver_refuses_in_a_gpu_resource_quota(change: dict[str, Any], expected: str) -> None:
    obj = MakeGPUResourceQuota("q", "ml").obj() | change
    if obj["apiVersion"] is None:
        del obj["apiVersion"]
    found = _rendered(obj)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_simulate_validates_with_the_crds_the_repository_ships() -> None:
    """The package's copies (what pip and the image install) are deploy/crds, file for file."""
    shipped = REPO_ROOT / "deploy" / "crds"
    copies = {path.name: path.read_text() for path in CRD_DIRECTORY.glob("*.yaml")}
    originals = {
        path.name: path.read_text() for path in shipped.glob("*.yaml") if path.name != "kustomization.yaml"
    }
    assert copies == originals
    assert len(copies) == 4
