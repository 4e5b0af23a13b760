"""Volcano Queue / PodGroup models and the queue a pod belongs to (design.md Semantics 7)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.crd import PodGroup, Queue
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.queues import queue_of
from tests.testing.builders import MakePod, MakePodGroup

QUEUE: dict[str, Any] = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "Queue",
    "metadata": {"name": "team-a", "annotations": {"volcano.sh/card.quota": '{"NVIDIA-A100": 5}'}},
    "spec": {
        "weight": 3,
        "capability": {"cpu": "100", "memory": "500Gi"},
        "deserved": {"cpu": "50"},
        "guarantee": {"resource": {"cpu": "10"}},
        "reclaimable": True,
        "parent": "root",
        "priority": 2,
        "extendClusters": [{"name": "c1", "weight": 1}],  # not used by gpuq, must not break loading
        "affinity": {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g"]}},
        "dequeueStrategy": "traverse",
    },
    "status": {"state": "Open", "allocated": {"cpu": "4"}, "running": 1, "reservation": {}},
}


def test_queue_fields_as_upstream() -> None:
    queue = Queue.from_dict(QUEUE)
    assert (queue.name, queue.ref, queue.spec.weight, queue.spec.parent, queue.spec.priority) == (
        "team-a",
        "Queue/team-a",
        3,
        "root",
        2,
    )
    assert queue.spec.capability == {"cpu": 100_000, "memory": 500 * 2**30}
    assert queue.spec.deserved == {"cpu": 50_000}
    assert queue.spec.guarantee.resource == {"cpu": 10_000}
    assert queue.spec.reclaimable is True
    assert queue.status.allocated == {"cpu": 4000}
    assert queue.annotations["volcano.sh/card.quota"] == '{"NVIDIA-A100": 5}'
    assert queue.open


def test_queue_defaults() -> None:
    queue = Queue.from_dict({"metadata": {"name": "q"}})
    assert (queue.spec.weight, queue.status.state, queue.open) == (1, "", True)
    assert queue.spec.capability.is_zero()


@pytest.mark.parametrize(
    ("state", "is_open"), [("Open", True), ("Unknown", True), ("Closed", False), ("Closing", False)]
)
def test_closed_and_closing_queues_take_nothing_new(state: str, is_open: bool) -> None:
    """Semantics 7: Closed or Closing take nothing new; absent state = Open."""
    assert Queue.from_dict({"metadata": {"name": "q"}, "status": {"state": state}}).open is is_open


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"metadata": {"name": "q"}, "spec": {"weight": "2"}}, "spec.weight"),
        ({"metadata": {"name": "q"}, "spec": {"weight": 0}}, "spec.weight"),
        ({"metadata": {"name": "q"}, "spec": {"reclaimable": "yes"}}, "spec.reclaimable"),
        ({"metadata": {"name": "q"}, "spec": {"capability": {"cpu": "lots"}}}, "spec.capability.cpu"),
        ({"metadata": {"name": "q"}, "spec": {"capability": ["cpu"]}}, "spec.capability"),
        ({"metadata": {"name": "q"}, "status": {"state": "Paused"}}, "status.state"),
        ({"metadata": {"name": "q", "annotations": {"a": 1}}}, "metadata.annotations.a"),
        ({"metadata": {}}, "metadata.name"),
    ],
)
def test_queue_errors_name_object_and_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        Queue.from_dict(obj)
    assert caught.value.field == field
    assert caught.value.where.startswith("Queue/")


def test_podgroup_fields_as_upstream() -> None:
    group = PodGroup.from_dict(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml", "annotations": {"volcano.sh/card.request": "{}"}},
            "spec": {
                "minMember": 4,
                "minTaskMember": {"worker": 4},
                "queue": "team-a",
                "priorityClassName": "high",
                "minResources": {"cpu": "8", "nvidia.com/gpu": "4"},
                "networkTopology": {"mode": "hard"},
                "subGroupPolicy": [],
            },
            "status": {
                "phase": "Inqueue",
                "conditions": [
                    {"type": "Scheduled", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
                ],
                "running": 2,
            },
        }
    )
    assert (group.key, group.ref, group.queue, group.phase) == (
        "ml/pg",
        "PodGroup/ml/pg",
        "team-a",
        "Inqueue",
    )
    assert group.spec.minResources == {"cpu": 8000, "nvidia.com/gpu": 4000}
    assert group.spec.minTaskMember == {"worker": 4}
    assert group.status.conditions[0].type == "Scheduled"


def test_podgroup_defaults() -> None:
    group = PodGroup.from_dict({"metadata": {"name": "pg"}})
    assert (group.key, group.queue, group.phase, group.spec.minMember, group.spec.minResources) == (
        "default/pg",
        "default",
        "Pending",
        0,
        None,
    )


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minMember": -1}, "spec.minMember"),
        ({"minMember": 1.5}, "spec.minMember"),
        ({"minMember": 2**31}, "spec.minMember"),  # int32 in the CRD
        ({"minTaskMember": {"worker": 2**31}}, "spec.minTaskMember.worker"),
        ({"queue": 5}, "spec.queue"),
        ({"minResources": {"cpu": "x"}}, "spec.minResources.cpu"),
    ],
)
def test_podgroup_errors(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        PodGroup.from_dict({"metadata": {"name": "pg", "namespace": "ml"}, "spec": spec})
    assert (caught.value.field, caught.value.where) == (field, "PodGroup/ml/pg")


GROUPS = {"ml/pg": MakePodGroup("pg", "ml").queue("team-a").model()}


@pytest.mark.parametrize(
    ("annotations", "queue"),
    [
        ({"scheduling.k8s.io/group-name": "pg"}, "team-a"),
        ({"scheduling.k8s.io/group-name": "pg", "scheduling.volcano.sh/queue-name": "other"}, "team-a"),
        ({"scheduling.volcano.sh/queue-name": "cr-queue1"}, "cr-queue1"),
        ({"scheduling.k8s.io/group-name": "missing", "scheduling.volcano.sh/queue-name": "b"}, "b"),
        ({"scheduling.k8s.io/group-name": "missing"}, "default"),
        ({}, "default"),
    ],
)
def test_queue_of(annotations: dict[str, str], queue: str) -> None:
    """Semantics 7: PodGroup's spec.queue, else the queue-name annotation, else default."""
    assert queue_of(MakePod("p", "ml").annotations(annotations).info(), GROUPS) == queue


def test_queue_of_ignores_a_group_in_another_namespace() -> None:
    other = MakePod("p", "other").group("pg").info()
    assert queue_of(other, GROUPS) == "default"


def test_negative_amounts_the_crd_schema_admits_are_read_not_refused() -> None:
    """The Queue and PodGroup CRD patterns allow a sign, so the apiserver stores ``-1``. Refusing the
    object would drop the Queue's limits (or strand the PodGroup's pods): it is read as written, and
    the quota rules treat a negative amount as none available (Semantics 3)."""
    queue = Queue.from_dict({"metadata": {"name": "q"}, "spec": {"capability": {"cpu": "1", "memory": "-1"}}})
    assert queue.spec.capability == {"cpu": 1000, "memory": -1}
    group = PodGroup.from_dict(
        {
            "metadata": {"name": "g", "namespace": "a"},
            "spec": {"minMember": 1, "minResources": {"memory": "-1"}},
        }
    )
    assert group.spec.minMember == 1
