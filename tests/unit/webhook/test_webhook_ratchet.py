"""Issue 12, UPDATE ratchets (design.md Semantics 13): an UPDATE is judged on what it changes only.

Each object below was invalid before the webhook existed (the apiserver holds it; a CREATE of it is
refused). Deleting it, removing its finalizers, or changing metadata other than gpuq's annotations is
admitted; changing its valid parts is admitted; a change that introduces a problem is refused."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.webhook.admission import validate
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota, MakePodGroup, MakeQueue

OPEN = MakeQueue("open").card_quota('{"NVIDIA-A100": 4}')
VIEW = StaticView([OPEN.obj()])

# (kind, an invalid object as the apiserver holds it, a change to its valid parts)
INVALID: dict[str, tuple[Kind, Any, Any]] = {
    "queue-malformed-card-quota": (
        kinds.QUEUE,
        MakeQueue("q").card_quota("{nope").finalizers("example.com/keep"),
        lambda b: b.capability(cpu="8"),
    ),
    "podgroup-malformed-card-request": (
        kinds.POD_GROUP,
        MakePodGroup().queue("open").card_request("{nope").min_member(1).finalizers("example.com/keep"),
        lambda b: b.min_member(2),
    ),
    "elasticquota-min-over-max": (
        kinds.ELASTIC_QUOTA,
        MakeElasticQuota().min(cpu="4").max(cpu="2").finalizers("example.com/keep"),
        lambda b: b.max(memory="8Gi"),
    ),
    "gpuresourcequota-threshold-over-100": (
        kinds.GPU_RESOURCE_QUOTA,
        MakeGPUResourceQuota().total(alertThresholdPercent=101).finalizers("example.com/keep"),
        lambda b: b.total(maxWorkers=3),
    ),
}
CASES = sorted(INVALID)


def _check(kind: Kind, new: dict[str, Any], old: dict[str, Any] | None, allowed: bool) -> None:
    decision = validate(kind, "UPDATE", new, VIEW, old=old)
    assert decision.allowed is allowed, decision.message


@pytest.mark.parametrize("case", CASES)
def test_the_object_is_invalid_at_create(case: str) -> None:
    kind, invalid, _ = INVALID[case]
    decision = validate(kind, "CREATE", invalid.obj(), VIEW)
    assert not decision.allowed and decision.message


@pytest.mark.parametrize("case", CASES)
def test_an_object_being_deleted_is_always_admitted(case: str) -> None:
    kind, invalid, change = INVALID[case]
    old = invalid.copy().deleting()
    _check(kind, old.copy().finalizers().obj(), old.obj(), True)
    # Whatever the change, and with no old object at all (gpuq simulate --admission).
    _check(kind, change(old.copy()).obj(), old.obj(), True)
    _check(kind, old.copy().finalizers().obj(), None, True)


@pytest.mark.parametrize("case", CASES)
def test_metadata_only_updates_are_admitted(case: str) -> None:
    kind, invalid, _ = INVALID[case]
    old = invalid.obj()
    _check(kind, invalid.copy().finalizers().obj(), old, True)
    _check(kind, invalid.copy().label("team", "a").obj(), old, True)
    _check(kind, invalid.copy().annotation("example.com/owner", "x").obj(), old, True)


@pytest.mark.parametrize("case", CASES)
def test_valid_parts_of_an_invalid_object_can_change(case: str) -> None:
    kind, invalid, change = INVALID[case]
    _check(kind, change(invalid.copy()).obj(), invalid.obj(), True)


def test_a_change_that_introduces_a_problem_is_refused() -> None:
    queue = MakeQueue("q").card_quota('{"NVIDIA-A100": 2}')
    _check(kinds.QUEUE, queue.copy().card_quota("{nope").obj(), queue.obj(), False)
    group = MakePodGroup().queue("open").min_member(1)
    _check(kinds.POD_GROUP, group.copy().card_request("{nope").obj(), group.obj(), False)
    _check(kinds.POD_GROUP, group.copy().queue("missing").obj(), group.obj(), False)
    elastic = MakeElasticQuota().min(cpu="1").max(cpu="2")
    _check(kinds.ELASTIC_QUOTA, elastic.copy().min(cpu="3").obj(), elastic.obj(), False)
    gpu = MakeGPUResourceQuota().total(alertThresholdPercent=80)
    _check(kinds.GPU_RESOURCE_QUOTA, gpu.copy().total(alertThresholdPercent=101).obj(), gpu.obj(), False)


def test_a_changed_problem_in_an_invalid_object_is_refused() -> None:
    """The old problem does not excuse a new value of the same field."""
    kind, invalid, _ = INVALID["elasticquota-min-over-max"]
    _check(kind, invalid.copy().min(cpu="5").obj(), invalid.obj(), False)
    queue = MakeQueue("q").card_quota("{nope")
    _check(kinds.QUEUE, queue.copy().card_quota("{still nope").obj(), queue.obj(), False)


def test_a_change_to_gpuq_annotations_is_judged() -> None:
    """gpuq's own annotations are not 'metadata only': a malformed card request is refused."""
    group = MakePodGroup().queue("open").min_member(1)
    new = group.copy().annotation(ann.CARD_REQUEST, "{nope").obj()
    _check(kinds.POD_GROUP, new, group.obj(), False)


def _refused_for(kind: Kind, new: dict[str, Any], old: dict[str, Any], field: str) -> None:
    decision = validate(kind, "UPDATE", new, VIEW, old=old)
    assert not decision.allowed, "a new problem was masked by the old one"
    assert field in decision.message, decision.message


def test_a_new_problem_behind_an_old_one_is_reported() -> None:
    """The checks stop at their first problem. An old, unchanged problem met first (spec.min[cpu] sorts
    before spec.min[memory]; a negative count is checked before the alert threshold) must not hide a new
    problem the change introduces in a field checked after it: the refusal names the new problem."""
    elastic = MakeElasticQuota().min(cpu="4").max(cpu="2").finalizers("example.com/keep")
    worse = elastic.copy().min(cpu="4", memory="16Gi").max(cpu="2", memory="8Gi")
    _refused_for(kinds.ELASTIC_QUOTA, worse.obj(), elastic.obj(), "spec.min[memory]")
    gpu = MakeGPUResourceQuota().total(maxWorkers=-1, alertThresholdPercent=80)
    _refused_for(
        kinds.GPU_RESOURCE_QUOTA,
        gpu.copy().total(maxWorkers=-1, alertThresholdPercent=101).obj(),
        gpu.obj(),
        "alertThresholdPercent",
    )


def test_two_old_problems_still_let_valid_changes_through() -> None:
    """Setting aside one old problem may uncover another old one: that is set aside too."""
    elastic = MakeElasticQuota().min(cpu="4", memory="16Gi").max(cpu="2", memory="8Gi")
    changed = elastic.copy().max(cpu="2", memory="8Gi", **{"nvidia.com/gpu": "4"})
    _check(kinds.ELASTIC_QUOTA, changed.obj(), elastic.obj(), True)
    worse = (
        elastic.copy()
        .min(cpu="4", memory="16Gi", **{"nvidia.com/gpu": "8"})
        .max(cpu="2", memory="8Gi", **{"nvidia.com/gpu": "4"})
    )
    _refused_for(kinds.ELASTIC_QUOTA, worse.obj(), elastic.obj(), "spec.min[nvidia.com/gpu]")


def test_an_unchanged_malformed_card_request_neither_blocks_nor_hides_a_queue_change() -> None:
    group = MakePodGroup().queue("open").card_request("{nope").min_member(1)
    moved = MakeQueue("other").card_quota('{"NVIDIA-A100": 4}')
    view = StaticView([OPEN.obj(), moved.obj()])
    decision = validate(kinds.POD_GROUP, "UPDATE", group.copy().queue("other").obj(), view, old=group.obj())
    assert decision.allowed, decision.message
    decision = validate(kinds.POD_GROUP, "UPDATE", group.copy().queue("missing").obj(), view, old=group.obj())
    assert not decision.allowed and "spec.queue" in decision.message and "'missing'" in decision.message
