"""Issue 12, UPDATE ratchets (design.md Semantics 13): an UPDATE is judged on what it changes only.

Each object below was invalid before the webhook existed (the apiserver holds it; a CREATE of it is
refused). Deleting it, removing its finalizers, or changing metadata other than gpuq's annotations is
admitted; changing its valid parts is admitted; a change that introduces a problem is refused."""

from __future__ import annotations

from typing import Any

import pytest

from common.model import annotations as ann
from tests.builders import MakeElasticQuota, MakeGPUResourceQuota, MakePodGroup, MakeQueue
from webhook.admission import validate
from webhook.view import ELASTIC_QUOTA, GPU_RESOURCE_QUOTA, POD_GROUP, QUEUE, StaticView

OPEN = MakeQueue("open").card_quota('{"NVIDIA-A100": 4}')
VIEW = StaticView([OPEN.obj()])
GroupKind = tuple[str, str]

# (kind, an invalid object as the apiserver holds it, a change to its valid parts)
INVALID: dict[str, tuple[GroupKind, Any, Any]] = {
    "queue-malformed-card-quota": (
        QUEUE,
        MakeQueue("q").card_quota("{nope").finalizers("example.com/keep"),
        lambda b: b.capability(cpu="8"),
    ),
    "podgroup-malformed-card-request": (
        POD_GROUP,
        MakePodGroup().queue("open").card_request("{nope").min_member(1).finalizers("example.com/keep"),
        lambda b: b.min_member(2),
    ),
    "elasticquota-min-over-max": (
        ELASTIC_QUOTA,
        MakeElasticQuota().min(cpu="4").max(cpu="2").finalizers("example.com/keep"),
        lambda b: b.max(memory="8Gi"),
    ),
    "gpuresourcequota-threshold-over-100": (
        GPU_RESOURCE_QUOTA,
        MakeGPUResourceQuota().total(alertThresholdPercent=101).finalizers("example.com/keep"),
        lambda b: b.total(maxWorkers=3),
    ),
}
CASES = sorted(INVALID)


def _check(kind: GroupKind, new: dict[str, Any], old: dict[str, Any] | None, allowed: bool) -> None:
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
    _check(QUEUE, queue.copy().card_quota("{nope").obj(), queue.obj(), False)
    group = MakePodGroup().queue("open").min_member(1)
    _check(POD_GROUP, group.copy().card_request("{nope").obj(), group.obj(), False)
    _check(POD_GROUP, group.copy().queue("missing").obj(), group.obj(), False)
    elastic = MakeElasticQuota().min(cpu="1").max(cpu="2")
    _check(ELASTIC_QUOTA, elastic.copy().min(cpu="3").obj(), elastic.obj(), False)
    gpu = MakeGPUResourceQuota().total(alertThresholdPercent=80)
    _check(GPU_RESOURCE_QUOTA, gpu.copy().total(alertThresholdPercent=101).obj(), gpu.obj(), False)


def test_a_changed_problem_in_an_invalid_object_is_refused() -> None:
    """The old problem does not excuse a new value of the same field."""
    kind, invalid, _ = INVALID["elasticquota-min-over-max"]
    _check(kind, invalid.copy().min(cpu="5").obj(), invalid.obj(), False)
    queue = MakeQueue("q").card_quota("{nope")
    _check(QUEUE, queue.copy().card_quota("{still nope").obj(), queue.obj(), False)


def test_a_change_to_gpuq_annotations_is_judged() -> None:
    """gpuq's own annotations are not 'metadata only': a malformed card request is refused."""
    group = MakePodGroup().queue("open").min_member(1)
    new = group.copy().annotation(ann.CARD_REQUEST, "{nope").obj()
    _check(POD_GROUP, new, group.obj(), False)
