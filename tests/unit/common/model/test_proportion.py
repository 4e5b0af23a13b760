"""Volcano's proportion as a pure model (common/model/proportion.py): deserved shares by water-filling,
share, overused, allocatable, enqueueable, reclaimable. Amounts are millicores."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model import proportion as model
from gpuq_k8s.common.model.conformance import evictable
from tests.testing.builders import MakePod


def _queues(
    *specs: tuple[str, int, int], capability: dict[str, dict[str, int]] | None = None
) -> list[model.QueueAttr]:
    """(name, weight, cpu requested) per queue."""
    caps = capability or {}
    return [model.QueueAttr(n, weight=w, request={"cpu": r}, capability=caps.get(n, {})) for n, w, r in specs]


def _deserved(queues: list[model.QueueAttr], total: int) -> dict[str, float]:
    model.deserve(queues, {"cpu": total})
    return {q.name: round(q.deserved.get("cpu", 0.0)) for q in queues}


def test_equal_weights_share_equally() -> None:
    assert _deserved(_queues(("a", 1, 4000), ("b", 1, 4000)), 4000) == {"a": 2000, "b": 2000}


def test_weights_divide_the_cluster() -> None:
    assert _deserved(_queues(("a", 1, 8000), ("b", 3, 8000)), 4000) == {"a": 1000, "b": 3000}


def test_what_a_satisfied_queue_leaves_goes_to_the_others() -> None:
    assert _deserved(_queues(("a", 1, 1000), ("b", 1, 10000)), 4000) == {"a": 1000, "b": 3000}


def test_capability_caps_the_deserved_share() -> None:
    queues = _queues(("a", 1, 10000), ("b", 1, 10000), capability={"b": {"cpu": 1000}})
    assert _deserved(queues, 4000) == {"a": 3000, "b": 1000}


def test_guarantee_is_a_floor() -> None:
    queues = _queues(("a", 1, 4000), ("b", 1, 4000))
    queues[0].guarantee = {"cpu": 3000}
    assert _deserved(queues, 4000)["a"] >= 3000


def test_share_orders_queues_lower_first() -> None:
    a, b = _queues(("a", 1, 4000), ("b", 1, 4000))
    a.allocated, b.allocated = {"cpu": 1000}, {"cpu": 2000}
    model.deserve([a, b], {"cpu": 4000})
    assert a.share == pytest.approx(0.5)
    assert b.share == pytest.approx(1.0)
    assert model.compare_queues(a, b) == -1 and model.compare_queues(b, a) == 1


def test_overused_at_the_deserved_share() -> None:
    a, b = _queues(("a", 1, 4000), ("b", 1, 4000))
    a.allocated, b.allocated = {"cpu": 2000}, {"cpu": 1000}
    model.deserve([a, b], {"cpu": 4000})
    assert model.overused(a) and not model.overused(b)


def test_allocatable_within_capability_in_the_requested_resources() -> None:
    (a,) = _queues(("a", 1, 4000), capability={"a": {"cpu": 2000}})
    a.allocated = {"cpu": 1000}
    model.deserve([a], {"cpu": 8000, "memory": 10})
    assert model.allocatable(a, {"cpu": 1000}) and not model.allocatable(a, {"cpu": 2000})
    a.allocated = {"cpu": 5000}
    assert model.allocatable(a, {"memory": 1})  # cpu not asked: not compared


def test_enqueueable_counts_what_is_inqueue() -> None:
    (a,) = _queues(("a", 1, 4000), capability={"a": {"cpu": 2000}})
    model.deserve([a], {"cpu": 8000})
    assert model.enqueueable(a, {"cpu": 2000})
    a.inqueue = {"cpu": 1000}
    assert not model.enqueueable(a, {"cpu": 2000})


def test_reclaimable_takes_only_while_the_queue_stays_above_its_share() -> None:
    a, b = _queues(("a", 1, 3000), ("b", 1, 1000))
    a.allocated = {"cpu": 3000}
    model.deserve([a, b], {"cpu": 3000})
    victims = model.reclaimable([("a", {"cpu": 1000})] * 3, {"a": a, "b": b})
    assert victims == [0]  # a deserves 2000: one pod back brings it there
    assert model.reclaimable([("b", {"cpu": 1000})], {"a": a, "b": b}) == []


def test_conformance_spares_critical_and_kube_system_pods() -> None:
    assert evictable(MakePod("p", "apps").info())
    assert not evictable(MakePod("p", "kube-system").info())
    assert not evictable(MakePod("p", "apps").priority(2000000000, "system-cluster-critical").info())
    assert not evictable(MakePod("p", "apps").priority(2000001000, "system-node-critical").info())
