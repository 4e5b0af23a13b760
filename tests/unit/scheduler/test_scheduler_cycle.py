"""Predicates, the cycle, gang and the in-memory backend, end to end without mocks."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.status import Code
from gpuq_k8s.scheduler.plugins.node_selection import compile_selection
from tests.testing.builders import GPU, MakeNode, MakePod, MakePodGroup, MakeQueue
from tests.testing.clock import FakeClock
from tests.testing.scheduler import make_scheduler

# A node with the default room (templates are copied: builders are values).
NODE = MakeNode().alloc(cpu="4", memory="8Gi", **{GPU: "2"})
POD = MakePod().req(cpu="1")


def _run(sched: Scheduler) -> None:
    sched.run_enqueue()
    while sched.schedule_one() is not None:
        pass
    sched.reject_waiting()


def _affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]
            }
        }
    }


NODES = [
    NODE.copy().name("a").labels({"zone": "z1", "gpus": "8"}).info(),
    NODE.copy().name("b").labels({"zone": "z2", "gpus": "2"}).info(),
    NODE.copy().name("c").labels({"gpus": "x"}).info(),
]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"nodeSelector": {"zone": "z2"}}, "b"),
        ({"affinity": _affinity({"key": "zone", "operator": "In", "values": ["z2", "z9"]})}, "b"),
        ({"affinity": _affinity({"key": "zone", "operator": "NotIn", "values": ["z1", "z2"]})}, "c"),
        ({"affinity": _affinity({"key": "zone", "operator": "DoesNotExist"})}, "c"),
        (
            {
                "affinity": _affinity(
                    {"key": "zone", "operator": "Exists"}, {"key": "gpus", "operator": "Lt", "values": ["4"]}
                )
            },
            "b",
        ),
        ({"affinity": _affinity({"key": "gpus", "operator": "Gt", "values": ["4"]})}, "a"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}
                            ]
                        }
                    }
                }
            },
            "c",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["nope"]}]},
                                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]},
                            ]
                        }
                    }
                }
            },
            "b",
        ),
    ],
)
def test_node_selection_operators(spec: dict[str, Any], expected: str) -> None:
    sched, backend = make_scheduler()
    for node in NODES:
        sched.set_node(node)
    sched.add_pod(POD.copy().spec(**spec).info())
    _run(sched)
    assert backend.bindings == {"ns/p": expected}


@pytest.mark.parametrize(
    ("nodes", "requests", "tolerations", "message"),
    [
        (
            [NODE.copy().name("a").info(), NODE.copy().name("b").info()],
            {"nvidia.com/gpu": "3"},
            [],
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. Can never fit under the current "
            "cluster: no node has 3 nvidia.com/gpu allocatable (the largest has 2).",
        ),
        (
            [MakeNode("a").alloc(cpu="4", pods="0").info()],
            {"cpu": "1"},
            [],
            "0/1 nodes are available: 1 Too many pods. Can never fit under the current cluster: "
            "no node has 1 pods allocatable (the largest has 0).",
        ),
        (
            [
                NODE.copy().name("a").taint("k", "NoSchedule", "v").info(),
                NODE.copy().name("b").unschedulable().info(),
                NODE.copy().name("c").not_ready().info(),
            ],
            {"cpu": "1"},
            [],
            "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 1 node(s) were not ready, "
            "1 node(s) were unschedulable.",
        ),
        (
            [NODE.copy().name("a").taint("k", "NoExecute", "v").info()],
            {"cpu": "8"},
            [{"operator": "Exists"}],
            "0/1 nodes are available: 1 Insufficient cpu. Can never fit under the current cluster: "
            "no node has 8 cpu allocatable (the largest has 4).",
        ),
        (
            [NODE.copy().name("a").taint("k", "NoSchedule", "v").info()],
            {"cpu": "8"},
            [{"key": "k", "operator": "Equal", "value": "other"}],
            "0/1 nodes are available: 1 node(s) had untolerated taint {k: v}. Can never fit under the "
            "current cluster: no node has 8 cpu allocatable (the largest has 4).",
        ),
    ],
)
def test_unschedulable_reasons_are_worded_like_kube_scheduler(
    nodes: list[NodeInfo], requests: dict[str, str], tolerations: list[dict[str, str]], message: str
) -> None:
    """kube-scheduler's FitError wording, then gpuq's outlook (common/model/outlook.py) when node
    resources stand in the way: more than any node has allocatable can never fit."""
    sched, backend = make_scheduler()
    for node in nodes:
        sched.set_node(node)
    sched.add_pod(MakePod().req(**requests).spec(tolerations=tolerations).info())
    _run(sched)
    assert backend.bindings == {}
    assert backend.conditions["ns/p"].message == message


def test_prefer_no_schedule_and_tolerated_taints_do_not_filter() -> None:
    sched, backend = make_scheduler()
    sched.set_node(NODE.copy().name("a").taint("soft", "PreferNoSchedule").info())
    sched.set_node(NODE.copy().name("b").taint("gpu", "NoSchedule", "yes").info())
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    sched.add_pod(POD.copy().name("p1").spec(tolerations=[toleration]).info())
    sched.add_pod(POD.copy().name("p2").spec(nodeSelector={}, tolerations=[]).info())
    _run(sched)
    assert backend.bindings["ns/p2"] == "a"
    assert backend.bindings["ns/p1"] == "a"  # tie on score: name order


def test_resources_are_counted_incrementally_and_released() -> None:
    sched, backend = make_scheduler()
    sched.set_node(MakeNode("a").alloc(cpu="2").info())
    for name in ("p1", "p2", "p3"):
        sched.add_pod(MakePod(name).req(cpu="1").info())
    _run(sched)
    assert sorted(backend.bindings) == ["ns/p1", "ns/p2"]
    assert "Insufficient cpu" in backend.conditions["ns/p3"].message
    sched.delete_pod("ns/p1")  # PodDeleted moves p3 to backoff
    _run(sched)
    assert "ns/p3" not in backend.bindings  # still backing off: no busy retry
    assert isinstance(sched.clock, FakeClock)
    sched.clock.now = sched.queue.next_backoff() or 0.0
    _run(sched)
    assert backend.bindings["ns/p3"] == "a"


def test_failed_bind_unreserves_and_requeues() -> None:
    sched, backend = make_scheduler()
    sched.set_node(MakeNode("a").alloc(cpu="1").info())
    backend.fail_binds.add("ns/p")
    sched.add_pod(MakePod("p").req(cpu="1").info())
    _run(sched)
    assert backend.bindings == {}
    assert "ns/p" not in sched.cluster.pods
    assert int(sched.cluster.requested[0].sum()) == 0


def test_invalid_affinity_is_an_error_naming_the_pod() -> None:
    pod = (
        POD.copy()
        .spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoreDuringExecution": {}}})
        .info()
    )
    with pytest.raises(
        InvalidValue,
        match=re.escape("Pod/ns/p: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoreDuringExecution"),
    ):
        compile_selection(pod)


def test_a_prefilter_plugins_invalid_input_is_labelled_with_the_plugin() -> None:
    """kube-scheduler's RunPreFilterPlugins (pkg/scheduler/framework/runtime/framework.go) sets the
    failing plugin's name on its Status; gpuq's framework does so for the InvalidValue a PreFilter
    raises: the attempt names ``predicates``, not the extension point, the message is the error's own,
    and the pod is parked under that plugin (the events it registered for move it)."""
    sched, backend = make_scheduler()
    sched.set_node(NODE.copy().name("a").info())
    bad: dict[str, Any] = {"nodeAffinity": {"requiredDuringSchedulingIgnoreDuringExecution": {}}}
    pod = POD.copy().name("p").spec(affinity=bad).info()
    with pytest.raises(InvalidValue) as invalid:
        compile_selection(pod)
    sched.add_pod(pod)
    sched.run_enqueue()
    attempt = sched.schedule_one()
    assert attempt is not None
    assert (attempt.status.code, attempt.status.plugin) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "predicates")
    assert attempt.status.message == str(invalid.value)
    assert backend.conditions["ns/p"].message == str(invalid.value)
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool == "unschedulable"
    assert queued.rejected_by == frozenset({"predicates"})


@pytest.mark.parametrize(("gpus_free", "bound"), [(4, 3), (2, 0)])
def test_gang_is_all_or_nothing(gpus_free: int, bound: int) -> None:
    sched, backend = make_scheduler()
    sched.set_node(MakeNode("a").alloc(cpu="8", **{GPU: str(gpus_free)}).info())
    sched.put_object(MakePodGroup("pg").min_member(3).obj())
    for i in range(3):
        sched.add_pod(MakePod(f"w{i}").req(**{GPU: "1"}).group("pg").info())
    _run(sched)
    assert len(backend.bindings) == bound
    if bound:
        assert sched.podgroups.groups["ns/pg"].phase == "Running"
    else:
        assert sched.cluster.pods == {}
        assert "only 2 of minMember 3" in backend.conditions["ns/w0"].message


def test_gang_with_too_few_pods_never_starts() -> None:
    sched, backend = make_scheduler()
    sched.set_node(NODE.copy().name("a").info())
    sched.put_object(MakePodGroup("pg").min_member(3).obj())
    sched.add_pod(POD.copy().name("w0").group("pg").info())
    _run(sched)
    assert backend.bindings == {}
    assert "PodGroup ns/pg has 1 pod(s), fewer than minMember 3" in backend.conditions["ns/w0"].message


def test_pods_seen_before_their_podgroup_wait_for_it_then_go_through_enqueue_as_a_gang() -> None:
    """Pods and PodGroups arrive on separate watches: a member seen first must not start alone
    (as Volcano and coscheduling, it waits for its PodGroup)."""
    sched, backend = make_scheduler()
    sched.set_node(MakeNode("a").alloc(cpu="8", **{GPU: "4"}).info())
    member = MakePod().req(**{GPU: "1"}).group("pg")
    sched.add_pod(member.copy().name("w0").info())
    _run(sched)
    assert backend.bindings == {}
    assert backend.conditions["ns/w0"].message.endswith("PodGroup ns/pg not found: its pods wait for it.")
    sched.add_pod(member.copy().name("w1").info())
    sched.put_object(MakePodGroup("pg").min_member(2).obj())
    assert sched.queue.get("ns/w0") is None  # held for enqueue with the group's other pods
    _run(sched)
    assert sorted(backend.bindings) == ["ns/w0", "ns/w1"]
    assert sched.podgroups.groups["ns/pg"].phase == "Running"


def test_a_queue_with_a_negative_capability_amount_still_limits_its_pods() -> None:
    """Found in review: refusing such a Queue removed it, and its pods then ran unlimited."""
    sched, backend = make_scheduler("capacity-card")
    sched.set_node(MakeNode("n").alloc(cpu="8", memory="8Gi").info())
    sched.put_object(MakeQueue("q").capability(cpu="1", memory="-1").obj())
    for i in range(2):
        sched.add_pod(MakePod(f"p{i}").req(cpu="2").queue("q").info())
    _run(sched)
    assert backend.bindings == {}
    assert "quota exceeded in Queue/q for cpu" in backend.conditions["ns/p0"].message


def test_pods_of_an_invalid_podgroup_are_told_why_they_wait() -> None:
    """Found in review: they were told their PodGroup was not found, and nothing said why."""
    sched, backend = make_scheduler()
    sched.set_node(NODE.copy().name("a").info())
    bad = MakePodGroup("pg").min_member(-1).obj()  # predates the webhook (the CRD schema would refuse it)
    with pytest.raises(InvalidValue, match=r"spec\.minMember"):
        sched.put_object(bad)
    sched.add_pod(POD.copy().name("w0").group("pg").info())
    _run(sched)
    assert backend.bindings == {}
    message = backend.conditions["ns/w0"].message
    assert "PodGroup ns/pg is invalid:" in message and "spec.minMember" in message
    sched.put_object(MakePodGroup("pg").min_member(1).obj())  # fixed: the pod goes through enqueue and runs
    _run(sched)
    assert list(backend.bindings) == ["ns/w0"]


def test_pods_held_for_a_deleted_podgroup_go_back_to_the_queue() -> None:
    sched, backend = make_scheduler("capacity-card")
    sched.set_node(NODE.copy().name("a").info())
    sched.put_object(MakeQueue("closed").state("Closed").obj())
    sched.put_object(
        MakePodGroup("pg").min_member(1).queue("closed").obj()
    )  # enqueue refuses: the pod is held
    sched.add_pod(POD.copy().name("w0").group("pg").info())
    _run(sched)
    assert sched.queue.get("ns/w0") is None and backend.bindings == {}
    sched.objects.delete(kinds.POD_GROUP, "ns", "pg")
    _run(sched)
    assert backend.conditions["ns/w0"].message.endswith("PodGroup ns/pg not found: its pods wait for it.")
