"""The Reserve-path shortcuts of the second performance pass change nothing observable.

``PodInfo.key`` is computed once, ``PodInfo.with_node_name`` is ``dataclasses.replace`` without the
constructor, and ``CapacityCard.reserve`` reuses the tracked pod's card demand: each is checked
against the slow form it replaces.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuq_k8s.common.model.capacity_card.demand import pod_card_demand
from gpuq_k8s.common.model.capacity_card.engine import CapacityCard
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.pods import PodInfo
from tests.testing.builders import MakeQueue
from tests.testing.capacity_card import NODES, card_pod
from tests.testing.capacity_card import POD as CARD_POD

POD = PodInfo.from_dict(
    {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
)


@pytest.mark.parametrize("node", ["n1", "", "other"])
def test_with_node_name_equals_replace(node: str) -> None:
    fast = POD.with_node_name(node)
    slow = replace(POD, node_name=node)
    assert fast == slow
    assert repr(fast) == repr(slow)
    assert fast.key == slow.key == "ns/p"
    assert fast.node_name == node and POD.node_name == ""


def test_with_node_name_of_the_same_node_is_the_pod_itself() -> None:
    bound = POD.with_node_name("n1")
    assert bound.with_node_name("n1") is bound
    assert bound.with_node_name("").with_node_name("n1") == bound


def test_key_is_recomputed_by_replace_and_not_a_field() -> None:
    moved = replace(POD, namespace="other", name="q")
    assert moved.key == "other/q"
    assert POD.key == "ns/p"
    assert "_key" not in repr(POD)
    assert replace(POD, uid="u") == POD  # the cached key takes no part in equality
    with pytest.raises(TypeError):
        PodInfo("ns", "p", _key="x")  # type: ignore[call-arg]


QUOTA = '{"NVIDIA-A100": 8, "NVIDIA-H100": 8}'


def _engine() -> CapacityCard:
    engine = CapacityCard()
    engine.set_nodes(NODES)
    engine.set_queue(MakeQueue("team-a").card_quota(QUOTA).model())
    return engine


@pytest.mark.parametrize(
    ("card_name", "gpu", "node"),
    [("NVIDIA-A100", 2, "a1"), ("NVIDIA-A100|NVIDIA-H100", 1, "h1"), (None, 1, "a2"), (None, 0, "c1")],
)
def test_reserve_reusing_the_tracked_demand_charges_as_a_fresh_engine(
    card_name: str | None, gpu: int, node: str
) -> None:
    pod = card_pod(CARD_POD.copy(), card_name, gpu)
    tracked = _engine()
    tracked.set_pod(pod)  # pending: its demand is derived here and reused by reserve
    untracked = _engine()
    assert tracked.reserve(pod.with_node_name(node), node) == untracked.reserve(pod, node)
    assert tracked.charged_card_type(pod) == untracked.charged_card_type(pod)
    assert tracked.shares() == untracked.shares()


def test_reserve_rederives_the_demand_when_the_pod_changed() -> None:
    engine = _engine()
    engine.set_pod(CARD_POD.copy().card("NVIDIA-A100").gpus(1).info())
    changed = CARD_POD.copy().card("NVIDIA-H100").gpus(2).info()
    charge = engine.reserve(changed, "h1")
    assert engine.charged_card_type(changed) == "NVIDIA-H100"
    assert charge == _engine().reserve(changed, "h1")


def test_task_check_of_an_unreadable_card_name_still_fails_after_reuse() -> None:
    engine = _engine()
    pod = CARD_POD.copy().card("NVIDIA-V100").gpus(1).info()
    engine.set_pod(pod)
    copy = replace(pod)  # not the tracked object: the demand (an error) is reused
    check = engine.task_check(copy)
    fresh = _engine().task_check(copy)
    assert check.failure is not None and fresh.failure is not None
    assert not check.ok
    assert check.failure.message == fresh.failure.message
    with pytest.raises(InvalidAnnotation):
        pod_card_demand(copy, engine.catalog)
