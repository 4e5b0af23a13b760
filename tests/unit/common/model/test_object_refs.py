"""design.md "Object references": cluster-scoped objects are ``Kind/name`` (``Queue/team-a``, ``Node/n1``),
namespaced ones ``Kind/namespace/name``, in messages, events and simulate output alike."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.capacity_card.quota import queue_quota
from gpuq_k8s.common.model.capacity_card.refusals import empty_capability, queue_closed
from gpuq_k8s.common.model.crd import PodGroup, Queue
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.wire import object_ref, split_ref
from gpuq_k8s.webhook.shape import check_shape
from tests.testing.builders import MakeNode, MakePod, MakePodGroup, MakeQueue


@pytest.mark.parametrize(
    ("kind", "namespace", "name", "ref"),
    [
        ("Queue", "", "team-a", "Queue/team-a"),
        ("Node", "", "n1", "Node/n1"),
        ("PriorityClass", "", "high", "PriorityClass/high"),
        ("Pod", "ns", "p", "Pod/ns/p"),
        ("GPUResourceQuota", "ml", "q", "GPUResourceQuota/ml/q"),
    ],
)
def test_object_ref_and_split_ref_round_trip(kind: str, namespace: str, name: str, ref: str) -> None:
    assert object_ref(kind, namespace, name) == ref
    assert split_ref(ref) == (kind, namespace, name)


def test_every_ref_producer_names_cluster_scoped_objects_without_a_double_slash() -> None:
    assert Queue.from_dict(MakeQueue("team-a").obj()).ref == "Queue/team-a"
    assert PodGroup.from_dict(MakePodGroup("pg", "ns").obj()).ref == "PodGroup/ns/pg"
    assert NodeInfo.from_dict(MakeNode("n1").obj()).ref == "Node/n1"
    assert MakePod("p", "ns").info().ref == "Pod/ns/p"
    assert (kinds.QUEUE.ref("ignored", "q"), kinds.NODE.ref("", "n1"), kinds.POD.ref("ns", "p")) == (
        "Queue/q",
        "Node/n1",
        "Pod/ns/p",
    )
    # a cluster-scoped kind is named without its (meaningless) namespace
    assert kinds.QUEUE.ref("default", "q") == "Queue/q"
    assert kinds.POD_GROUP.ref("ns", "pg") == "PodGroup/ns/pg"


def test_errors_name_a_queue_and_a_node_as_kind_slash_name() -> None:
    with pytest.raises(InvalidValue) as queue_err:
        Queue.from_dict(MakeQueue("team-a").weight(0).obj())
    assert str(queue_err.value).startswith("Queue/team-a: spec.weight")
    node = MakeNode("n1").obj()
    node["status"]["allocatable"]["cpu"] = "lots"
    with pytest.raises(InvalidValue) as node_err:
        NodeInfo.from_dict(node)
    assert str(node_err.value).startswith("Node/n1: status.allocatable[cpu]")


def test_refusals_and_events_name_the_queue_as_kind_slash_name() -> None:
    quota = queue_quota(Queue.from_dict(MakeQueue("default").obj()))
    assert empty_capability(quota).message.startswith("Queue/default has no capability")
    assert queue_closed("team-a", "nothing new").message.startswith("Queue/team-a is closed")
    bad = queue_quota(Queue.from_dict(MakeQueue("team-a").card_quota("{not json").obj()))
    assert [e.obj for e in bad.events] == ["Queue/team-a"]
    assert "//" not in "".join(e.message for e in bad.events)


@pytest.mark.parametrize(
    ("kind", "metadata", "where"),
    [
        ("Pod", {"name": "p", "namespace": "ml"}, "Pod/ml/p"),
        ("Queue", {"name": "q"}, "Queue/q"),
    ],
)
def test_webhook_shape_errors_name_the_object(kind: str, metadata: dict[str, str], where: str) -> None:
    with pytest.raises(InvalidValue) as err:
        check_shape({"metadata": metadata, "spec": []}, kind)
    assert err.value.where == where and err.value.field == "spec"
