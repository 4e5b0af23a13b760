"""Label selectors (common/model/placement/label_selector.py): apimachinery's
``pkg/apis/meta/v1/helpers_test.go`` TestLabelSelectorAsSelector and ``pkg/labels`` matching, no mocks."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.label_selector import (
    EVERYTHING,
    NOTHING,
    parse_selector,
    selector_from_set,
    valid_key,
    valid_value,
)

MATCH_LABELS = {"foo": "bar"}
IN_EXPRESSION = [{"key": "baz", "operator": "In", "values": ["qux", "norf"]}]


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (None, "<none>"),
        ({}, ""),
        ({"matchLabels": MATCH_LABELS}, "foo=bar"),
        ({"matchExpressions": IN_EXPRESSION}, "baz in (norf,qux)"),
        ({"matchLabels": MATCH_LABELS, "matchExpressions": IN_EXPRESSION}, "baz in (norf,qux),foo=bar"),
    ],
)
def test_label_selector_as_selector(raw: Any, text: str) -> None:
    """TestLabelSelectorAsSelector: nil is Nothing, {} Everything, requirements sorted by key."""
    assert str(parse_selector(raw, "selector")) == text


def test_exists_with_values_is_refused_naming_the_field() -> None:
    """TestLabelSelectorAsSelector's error row: Exists takes no values."""
    raw = {"matchExpressions": [{"key": "baz", "operator": "Exists", "values": ["qux", "norf"]}]}
    with pytest.raises(InvalidValue) as err:
        parse_selector(raw, "spec.selector", "Pod/ns/p")
    assert str(err.value).startswith("Pod/ns/p: spec.selector.matchExpressions[0].values: invalid value")
    assert "no values for Exists" in str(err.value)


@pytest.mark.parametrize(
    ("raw", "field", "expected"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "In"}]},
            "matchExpressions[0].values",
            "at least one",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]},
            "[0].operator",
            "one of In",
        ),
        ({"matchExpressions": [{"key": "bad key", "operator": "Exists"}]}, "[0].key", "a label key"),
        ({"matchLabels": {"a": "{{x}}"}}, "matchLabels[a]", "a label value"),
        ({"matchLabels": ["a"]}, "matchLabels", "a map of label keys"),
        ({"matchLabel": {"a": "b"}}, "selector.matchLabel", "only matchLabels and matchExpressions"),
    ],
)
def test_malformed_selectors_name_the_field(raw: Any, field: str, expected: str) -> None:
    with pytest.raises(InvalidValue) as err:
        parse_selector(raw, "selector")
    assert field in err.value.field
    assert expected in err.value.expected


@pytest.mark.parametrize(
    ("raw", "labels", "matches"),
    [
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchLabels": {"a": "1"}}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": ""}, True),
        # matchLabels and matchExpressions are ANDed
        (
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
            {"a": "1"},
            False,
        ),
        ({}, {"anything": "x"}, True),
        (None, {"anything": "x"}, False),
    ],
)
def test_matching(raw: Any, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(raw, "selector").matches(labels) is matches


def test_equal_selectors_are_one_value() -> None:
    """The order terms are written in does not make two selectors (the pod index counts per selector)."""
    one = parse_selector({"matchLabels": {"a": "1", "b": "2"}}, "s")
    other = parse_selector(
        {"matchExpressions": [{"key": "b", "operator": "In", "values": ["2"]}], "matchLabels": {"a": "1"}},
        "s",
    )
    assert one == other and hash(one) == hash(other)
    assert selector_from_set({}) == EVERYTHING and EVERYTHING.empty and not NOTHING.empty


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("app", True),
        ("app.kubernetes.io/name", True),
        ("a/b/c", False),
        ("-a", False),
        ("", False),
        ("x" * 64, False),
    ],
)
def test_label_keys_as_apimachinery_validates_them(key: str, valid: bool) -> None:
    assert valid_key(key) is valid


@pytest.mark.parametrize(
    ("value", "valid"), [("", True), ("v1.2_3-x", True), ("{{.bad-value.}}", False), ("-a", False)]
)
def test_label_values_as_apimachinery_validates_them(value: str, valid: bool) -> None:
    assert valid_value(value) is valid
