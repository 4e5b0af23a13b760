"""How plugin verdicts combine across tiers (scheduler/framework/tiers.py), as Volcano's session combines
them (volcano-sh/volcano pkg/scheduler/framework/session_plugins.go)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework import tiers
from gpuq_k8s.scheduler.framework.status import Status
from tests.testing.builders import MakePod

A, B, C, D = (MakePod(name).info() for name in "abcd")
ALL = (A, B, C, D)


def _victims(layout: Sequence[Sequence[str]], answers: Mapping[str, Sequence[PodInfo] | None]) -> list[str]:
    return [p.name for p in tiers.victims(layout, lambda plugin: answers[plugin])]


def test_victims_intersect_within_a_tier() -> None:
    assert _victims([["x", "y"]], {"x": [A, B, C], "y": [B, C, D]}) == ["b", "c"]


def test_a_later_tier_is_asked_only_when_an_earlier_one_had_no_say() -> None:
    answers = {"x": [A], "y": [B, C]}
    assert _victims([["x"], ["y"]], answers) == ["a"]
    assert _victims([["abstains"], ["y"]], {**answers, "abstains": None}) == ["b", "c"]


def test_an_empty_answer_ends_its_tier_and_the_next_tier_decides() -> None:
    answers: dict[str, Sequence[PodInfo] | None] = {"x": [], "y": [A, B], "z": [C]}
    assert _victims([["x", "y"], ["z"]], answers) == ["c"]
    # An intersection that comes out empty has no say either (nothing every plugin allowed).
    assert _victims([["y", "z"]], answers) == []
    assert _victims([["y", "z"], ["x"], ["abstains"]], {**answers, "abstains": None}) == []


def test_order_takes_the_first_non_zero_verdict() -> None:
    verdicts = {"x": 0, "y": 1, "z": -1}
    assert tiers.order([["x"], ["y", "z"]], lambda p: verdicts[p]) == 1
    assert tiers.order([["x"], ["z", "y"]], lambda p: verdicts[p]) == -1
    assert tiers.order([["x"]], lambda p: verdicts[p]) == 0


def test_first_names_the_plugin_that_decides() -> None:
    overused = {"x": False, "y": True, "z": True}
    assert tiers.first([["x"], ["y", "z"]], lambda p: overused[p]) == "y"
    assert tiers.first([["x"]], lambda p: overused[p]) is None


def test_starving_is_decided_by_the_first_tier_with_a_plugin() -> None:
    says = {"x": True, "y": False, "z": True}
    assert tiers.starving([[], ["x", "z"], ["y"]], lambda p: says[p]) is True
    assert tiers.starving([["x", "y"], ["z"]], lambda p: says[p]) is False
    assert tiers.starving([], lambda p: says[p]) is False


def test_enqueueable_rejects_at_once_and_a_permitting_tier_admits() -> None:
    statuses = {"permit": Status.success(), "abstain": Status.skip(), "reject": Status.unschedulable("no")}
    assert tiers.enqueueable([["abstain", "reject"]], lambda p: statuses[p]).is_rejected
    assert tiers.enqueueable([["permit"], ["reject"]], lambda p: statuses[p]).is_success
    assert tiers.enqueueable([["abstain"], ["reject"]], lambda p: statuses[p]).is_rejected
    assert tiers.enqueueable([["abstain"]], lambda p: statuses[p]).is_success
