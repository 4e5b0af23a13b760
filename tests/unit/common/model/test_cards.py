"""Card discovery, the catalog and the card annotations.

capacity-card.md "Node Card Discovery" and "API Design"; design.md Semantics 2, 3 and 9.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuq_k8s.common.model.annotations import CARD_NAME, CARD_QUOTA, CARD_REQUEST
from gpuq_k8s.common.model.cards.amounts import parse_card_quota, parse_card_request
from gpuq_k8s.common.model.cards.card_type import CardType
from gpuq_k8s.common.model.cards.catalog import (
    CardCatalog,
    card_names_resources,
    card_names_share_resource,
    pod_card_resources,
)
from gpuq_k8s.common.model.cards.discovery import NodeCards, discover_cards
from gpuq_k8s.common.model.cards.names import normalise_card_names, parse_card_names
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.events import INVALID_ANNOTATION
from gpuq_k8s.common.model.resources import Resources
from tests.testing.builders import MakeNode

A100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81920",
}


# -- discovery: the spec's complete examples


def test_whole_card_complete_example() -> None:
    """spec "3. Whole Cards": nvidia.com/gpu.product NVIDIA-A100 + allocatable nvidia.com/gpu 8."""
    cards = discover_cards(MakeNode().labels(A100_LABELS).alloc({"nvidia.com/gpu": "8", "cpu": "64"}).info())
    assert cards.cards == (
        CardType("NVIDIA-A100", "whole", "NVIDIA-A100", "nvidia.com/gpu", 8, memory_mib=81920),
    )
    assert cards.problems == ()


def test_mps_complete_example() -> None:
    """spec "1. MPS Shared Cards": 81920 MB, 8 replicas, 64 shared -> NVIDIA-A100/mps-80g*1/8 x 64."""
    labels = {**A100_LABELS, "nvidia.com/gpu.replicas": "8"}
    cards = discover_cards(MakeNode().labels(labels).alloc({"nvidia.com/gpu.shared": "64"}).info())
    assert cards.names == ("NVIDIA-A100/mps-80g*1/8",)
    mps = cards.by_resource("nvidia.com/gpu.shared")
    assert mps is not None and (mps.kind, mps.count, mps.replicas, mps.memory_mib) == ("mps", 64, 8, 81920)
    assert cards.problems == ()


def test_mig_complete_example() -> None:
    """spec "2. MIG Partition Cards": mig-1g.5gb x 7 and mig-2g.10gb x 4, product label alone is enough."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/mig-1g.5gb.count": "7"}
    allocatable = {"nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-2g.10gb": "4"}
    cards = discover_cards(MakeNode().labels(labels).alloc(**allocatable).info())
    assert [(c.name, c.kind, c.resource, c.count, c.mig_profile) for c in cards.cards] == [
        ("NVIDIA-A100/mig-1g.5gb-mixed", "mig", "nvidia.com/mig-1g.5gb", 7, "1g.5gb"),
        ("NVIDIA-A100/mig-2g.10gb-mixed", "mig", "nvidia.com/mig-2g.10gb", 4, "2g.10gb"),
    ]
    assert cards.problems == ()


def test_label_and_resource_example_finds_all_three_kinds() -> None:
    """spec "Node Label and Resource Examples": whole, MPS and MIG on one node, none mistaken for another."""
    labels = {**A100_LABELS, "nvidia.com/gpu.replicas": "8", "nvidia.com/mig-1g.5gb.count": "7"}
    allocatable = {"nvidia.com/gpu": "8", "nvidia.com/gpu.shared": "64", "nvidia.com/mig-1g.5gb": "7"}
    cards = discover_cards(MakeNode().labels(labels).alloc(**allocatable).info())
    assert {c.resource: c.name for c in cards.cards} == {
        "nvidia.com/gpu": "NVIDIA-A100",
        "nvidia.com/gpu.shared": "NVIDIA-A100/mps-80g*1/8",
        "nvidia.com/mig-1g.5gb": "NVIDIA-A100/mig-1g.5gb-mixed",
    }


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        ("81920", "80g"),  # 80 GiB exactly
        ("81559", "80g"),  # H100 80GB as GPU feature discovery reports it
        ("40960", "40g"),
        ("1536", "2g"),  # 1.5 rounds half away from zero (round() would give 2 too)
        ("2560", "3g"),  # 2.5: half away from zero, not banker's rounding's 2
        ("1535", "1g"),
    ],
)
def test_mps_memory_rounds_half_away_from_zero(memory: str, expected: str) -> None:
    """design.md Semantics 2 and 9: memory label in MiB, GiB rounded half away from zero."""
    labels = {"nvidia.com/gpu.product": "P", "nvidia.com/gpu.memory": memory, "nvidia.com/gpu.replicas": "2"}
    cards = discover_cards(MakeNode().labels(labels).alloc({"nvidia.com/gpu.shared": "4"}).info())
    assert cards.names == (f"P/mps-{expected}*1/2",)


def test_discovery_answers_the_same_node_again_without_rediscovering() -> None:
    """Each plugin that keeps card types discovers the node it is told of, one after the other: the
    same frozen NodeInfo asked again gets the very same NodeCards; any other node, even an equal
    one, is discovered afresh, so an answer never outlives the node it was for."""
    a100 = MakeNode("a").labels(A100_LABELS).alloc({"nvidia.com/gpu": "8"}).info()
    plain = MakeNode("b").alloc({"cpu": "8"}).info()
    first = discover_cards(a100)
    assert discover_cards(a100) is first
    assert discover_cards(plain).cards == ()  # another node in between: its own answer
    again = discover_cards(a100)
    assert again == first and again.names == ("NVIDIA-A100",)
    changed = MakeNode("a").labels(A100_LABELS).alloc({"nvidia.com/gpu": "4"}).info()
    assert discover_cards(changed).cards[0].count == 4  # the same name, a new object: rediscovered
    assert discover_cards(a100).cards[0].count == 8


def test_whole_card_needs_only_the_product_label() -> None:
    """Semantics 2: no .count or .memory needed for whole cards (upstream wanted both)."""
    cards = discover_cards(
        MakeNode().labels({"nvidia.com/gpu.product": "Tesla-T4"}).alloc({"nvidia.com/gpu": 4}).info()
    )
    assert [(c.name, c.count, c.memory_mib) for c in cards.cards] == [("Tesla-T4", 4, None)]


def test_non_nvidia_prefix_follows_the_generic_rule() -> None:
    labels = {"huawei.com/ascend-910.product": "Ascend-910B"}
    cards = discover_cards(
        MakeNode().labels(labels).alloc({"huawei.com/ascend-910": "8", "huawei.com/other": "1"}).info()
    )
    assert [(c.name, c.resource, c.count) for c in cards.cards] == [
        ("Ascend-910B", "huawei.com/ascend-910", 8)
    ]


def test_prefix_resources_are_not_whole_cards() -> None:
    """nvidia.com/gpu.shared and nvidia.com/mig-* start with the nvidia.com prefix but are not A100s."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100"}  # no memory/replicas: MPS not discoverable
    allocatable = {"nvidia.com/gpu.shared": "8", "nvidia.com/mig-1g.5gb": "7", "nvidia.com/foo": "1"}
    cards = discover_cards(MakeNode().labels(labels).alloc(**allocatable).info())
    assert cards.names == ("NVIDIA-A100/mig-1g.5gb-mixed",)
    assert cards.by_name("NVIDIA-A100") is None


def test_zero_allocatable_keeps_the_card_type_with_count_zero() -> None:
    cards = discover_cards(MakeNode().labels(A100_LABELS).alloc({"nvidia.com/gpu": "0"}).info())
    assert [(c.name, c.count) for c in cards.cards] == [("NVIDIA-A100", 0)]


def test_product_label_without_resource_is_no_card() -> None:
    assert discover_cards(MakeNode().labels(A100_LABELS).alloc({"cpu": "8"}).info()).cards == ()


def test_node_without_labels_has_no_cards() -> None:
    assert discover_cards(MakeNode().alloc({"nvidia.com/gpu": "8"}).info()) == NodeCards("n1")


@pytest.mark.parametrize(
    ("labels", "allocatable", "names", "problem_fields"),
    [
        pytest.param(
            {"nvidia.com/gpu.product": "A", "nvidia.com/gpu.replicas": "8"},
            {"nvidia.com/gpu.shared": "8"},
            (),
            ["nvidia.com/gpu.memory"],
            id="mps-without-memory",
        ),
        pytest.param(
            {"nvidia.com/gpu.product": "A", "nvidia.com/gpu.memory": "81920"},
            {"nvidia.com/gpu.shared": "8"},
            (),
            ["nvidia.com/gpu.replicas"],
            id="mps-without-replicas",
        ),
        pytest.param(
            {"nvidia.com/gpu.product": "A", "nvidia.com/gpu.memory": "80GB", "nvidia.com/gpu.replicas": "8"},
            {"nvidia.com/gpu.shared": "8", "nvidia.com/gpu": "1"},
            ("A",),
            ["nvidia.com/gpu.memory"],
            id="non-integer-memory-still-whole-card",
        ),
        pytest.param(
            {"nvidia.com/gpu.product": "A", "nvidia.com/gpu.memory": "1024", "nvidia.com/gpu.replicas": "0"},
            {"nvidia.com/gpu.shared": "8"},
            (),
            ["nvidia.com/gpu.replicas"],
            id="zero-replicas",
        ),
        pytest.param(
            {}, {"nvidia.com/mig-1g.5gb": "7"}, (), ["nvidia.com/gpu.product"], id="mig-without-product"
        ),
        pytest.param(
            {"nvidia.com/gpu.product": "A", "nvidia.com/gpu.count": "eight"},
            {"nvidia.com/gpu": "8"},
            ("A",),
            ["nvidia.com/gpu.count"],
            id="bad-count-label-reported-card-kept",
        ),
    ],
)
def test_label_problems_are_data_not_exceptions(
    labels: dict[str, str], allocatable: dict[str, str], names: tuple[str, ...], problem_fields: list[str]
) -> None:
    """Semantics 3: a bad label becomes a Warning event on the node; discovery goes on."""
    cards = discover_cards(MakeNode().labels(labels).alloc(**allocatable).info())
    assert cards.names == names
    assert [p.field for p in cards.problems] == problem_fields
    events = cards.events()
    assert [(e.obj, e.type, e.reason) for e in events] == [("Node/n1", "Warning", INVALID_ANNOTATION)] * len(
        problem_fields
    )
    assert all(p.where == "Node/n1" for p in cards.problems)


# -- catalog


def test_catalog_maps_names_and_resources_and_totals() -> None:
    """spec "Plugin Initialization": card name -> resource, and the cluster total per card type."""
    a = discover_cards(MakeNode("a").labels(A100_LABELS).alloc({"nvidia.com/gpu": "4"}).info())
    b = discover_cards(MakeNode("b").labels(A100_LABELS).alloc({"nvidia.com/gpu": "4"}).info())
    h = discover_cards(
        MakeNode("h").labels({"nvidia.com/gpu.product": "NVIDIA-H100"}).alloc({"nvidia.com/gpu": "8"}).info()
    )
    mig = discover_cards(
        MakeNode("m")
        .labels({"nvidia.com/gpu.product": "NVIDIA-A100"})
        .alloc({"nvidia.com/mig-1g.5gb": "7"})
        .info()
    )
    catalog = CardCatalog.build([a, b, h, mig])
    assert catalog.names == ("NVIDIA-A100", "NVIDIA-A100/mig-1g.5gb-mixed", "NVIDIA-H100")
    assert catalog.resource_of("NVIDIA-H100") == "nvidia.com/gpu"
    assert catalog.resource_of("nope") is None
    assert catalog.names_for_resource("nvidia.com/gpu") == ("NVIDIA-A100", "NVIDIA-H100")
    assert set(catalog.resources) == {"nvidia.com/gpu", "nvidia.com/mig-1g.5gb"}
    assert catalog.capacity == {
        "NVIDIA-A100": 8000,
        "NVIDIA-H100": 8000,
        "NVIDIA-A100/mig-1g.5gb-mixed": 7000,
    }
    has = catalog.node_matrix([a, h, mig, NodeCards("cpu")])
    assert has.tolist() == [
        [True, False, False],
        [False, False, True],
        [False, True, False],
        [False, False, False],
    ]
    assert has.dtype == np.bool_


def test_catalog_reports_a_name_with_two_resources() -> None:
    one = discover_cards(
        MakeNode("a").labels({"nvidia.com/gpu.product": "X"}).alloc({"nvidia.com/gpu": "1"}).info()
    )
    two = discover_cards(
        MakeNode("b").labels({"example.com/acc.product": "X"}).alloc({"example.com/acc": "1"}).info()
    )
    catalog = CardCatalog.build([two, one])
    assert catalog.resource_of("X") == "nvidia.com/gpu"
    assert [p.where for p in catalog.problems] == ["Node/b"]
    assert catalog.capacity == {"X": 1000}


def test_share_resource_and_pod_card_resources() -> None:
    """spec "Single-Instance Multi-Card Request": alternatives must share one Kubernetes resource."""
    labels = {**A100_LABELS, "nvidia.com/gpu.replicas": "2"}
    a = discover_cards(
        MakeNode("a").labels(labels).alloc({"nvidia.com/gpu": "8", "nvidia.com/gpu.shared": "16"}).info()
    )
    h = discover_cards(
        MakeNode("h").labels({"nvidia.com/gpu.product": "NVIDIA-H100"}).alloc({"nvidia.com/gpu": "8"}).info()
    )
    catalog = CardCatalog.build([a, h])
    assert card_names_share_resource(("NVIDIA-A100", "NVIDIA-H100"), catalog)
    assert not card_names_share_resource(("NVIDIA-A100", "NVIDIA-A100/mps-80g*1/2"), catalog)
    assert card_names_resources(("NVIDIA-A100", "T4"), catalog) == {"nvidia.com/gpu"}
    assert [name for name in ("NVIDIA-A100", "T4") if name not in catalog] == ["T4"]
    requests = Resources(
        {"cpu": 1000, "nvidia.com/gpu": 1000, "example.com/foo": 1000, "nvidia.com/gpu.shared": 0}
    )
    assert pod_card_resources(requests, catalog) == {"nvidia.com/gpu": 1000}


# -- A|B|C


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NVIDIA-A100", ("NVIDIA-A100",)),
        ("NVIDIA-A100|NVIDIA-H100|NVIDIA-T4", ("NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4")),
        ("NVIDIA-A100/mps-80g*1/8", ("NVIDIA-A100/mps-80g*1/8",)),
        (
            "NVIDIA-H200/mig-1g.18gb-mixed|NVIDIA-H200/mig-2g.36gb-mixed",
            ("NVIDIA-H200/mig-1g.18gb-mixed", "NVIDIA-H200/mig-2g.36gb-mixed"),
        ),
    ],
)
def test_parse_card_names(text: str, expected: tuple[str, ...]) -> None:
    assert parse_card_names(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("A||B", "alternative 2 is empty"),
        ("|A", "alternative 1 is empty"),
        ("A|", "alternative 2 is empty"),
        ("A|A", "repeated"),
        ("A | B", "whitespace"),
        ("NVIDIA A100", "whitespace"),
        (" A", "whitespace"),
        ("A\tB", "whitespace"),
        (5, "card type name"),
    ],
)
def test_parse_card_names_rejects(text: Any, problem: str) -> None:
    with pytest.raises(InvalidAnnotation) as caught:
        parse_card_names(text, "Pod/ns/p")
    err = caught.value
    assert (err.where, err.field, err.value) == ("Pod/ns/p", CARD_NAME, text)
    assert problem in str(err)


@pytest.mark.parametrize(
    ("text", "expected"),
    [(" A | B ", "A|B"), ("A|B", "A|B"), ("A", "A"), ("A||B", "A||B"), ("NVIDIA A100", "NVIDIA A100")],
)
def test_normalise_card_names(text: str, expected: str) -> None:
    assert normalise_card_names(text) == expected


@given(st.lists(st.from_regex(r"[A-Za-z0-9./*-]{1,12}", fullmatch=True), min_size=1, max_size=5, unique=True))
def test_normalised_names_parse_back(names: list[str]) -> None:
    text = " | ".join(names)
    assert parse_card_names(normalise_card_names(text)) == tuple(names)


# -- JSON annotations


def test_card_quota_spec_example() -> None:
    """spec "Queue Annotations for Card Quotas"."""
    text = '{\n  "NVIDIA-A100": 10,\n  "NVIDIA-H100": 5,\n  "NVIDIA-A100/mps-80g*1/8": 16\n}'
    assert parse_card_quota(text) == {
        "NVIDIA-A100": 10000,
        "NVIDIA-H100": 5000,
        "NVIDIA-A100/mps-80g*1/8": 16000,
    }
    assert parse_card_quota("{}") == {}


def test_card_request_keys_may_be_alternatives() -> None:
    """spec "Example 2": card.request {"NVIDIA-A100|NVIDIA-H100": 4}."""
    assert parse_card_request('{"NVIDIA-A100|NVIDIA-H100": 4, "T4": 0}') == {
        "NVIDIA-A100|NVIDIA-H100": 4000,
        "T4": 0,
    }


MALFORMED = [
    pytest.param("", "invalid JSON", id="empty"),
    pytest.param("{", "invalid JSON", id="truncated"),
    pytest.param("[1]", "not a JSON array", id="array"),
    pytest.param('"A"', "not a JSON string", id="string"),
    pytest.param("4", "not a JSON number", id="number"),
    pytest.param('{"A": 1.5}', "non-negative integer", id="float"),
    pytest.param('{"A": 2.0}', "non-negative integer", id="integral-float"),
    pytest.param('{"A": -1}', "non-negative integer", id="negative"),
    pytest.param('{"A": "4"}', "non-negative integer", id="string-count"),
    pytest.param('{"A": true}', "non-negative integer", id="bool"),
    pytest.param('{"A": null}', "non-negative integer", id="null"),
    pytest.param('{"A": 10000000000}', "at most", id="absurd"),
    pytest.param('{"A": 1, "A": 2}', "appears twice", id="duplicate-key"),
    pytest.param('{"": 1}', "empty", id="empty-key"),
    pytest.param('{"A B": 1}', "whitespace", id="space-in-key"),
    pytest.param('{"A||B": 1}', "empty", id="empty-alternative"),
]


@pytest.mark.parametrize(("text", "problem"), MALFORMED)
@pytest.mark.parametrize(
    ("parse", "key"), [(parse_card_quota, CARD_QUOTA), (parse_card_request, CARD_REQUEST)]
)
def test_malformed_card_annotations(parse: Any, key: str, text: str, problem: str) -> None:
    """Every malformed value names the object, the annotation, the value and what was expected."""
    with pytest.raises(InvalidAnnotation) as caught:
        parse(text, "Queue/team-a")
    err = caught.value
    assert err.where == "Queue/team-a"
    assert err.field.startswith(key)
    assert problem in str(err)


def test_card_quota_rejects_composite_keys() -> None:
    with pytest.raises(InvalidAnnotation, match="single card type"):
        parse_card_quota('{"A|B": 4}', "Queue/q")


def test_card_request_rejects_the_same_set_twice() -> None:
    with pytest.raises(InvalidAnnotation, match="names the same"):
        parse_card_request('{"A|B": 4, "B|A": 2}', "PodGroup/ns/pg")


@given(
    st.dictionaries(st.from_regex(r"[A-Za-z0-9-]{1,10}", fullmatch=True), st.integers(0, 10**6), max_size=6)
)
def test_card_quota_round_trips_any_valid_object(quota: dict[str, int]) -> None:
    assert parse_card_quota(json.dumps(quota)) == {k: v * 1000 for k, v in quota.items()}
