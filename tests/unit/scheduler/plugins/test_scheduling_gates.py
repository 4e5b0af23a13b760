"""SchedulingGates (scheduler/plugins/scheduling_gates.py, PreEnqueue; the queue's gated set in
scheduler/queue.py). Ported from kube-scheduler v1.36 ``framework/plugins/schedulinggates/
scheduling_gates_test.go``: TestPreEnqueue and Test_isSchedulableAfterPodChange, whose QueueSkip for
another pod's update and Queue for the pod's own are the queue's: another pod's gates coming off moves
nothing, the pod's own update is asked again."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.scheduling_gates import waiting_for
from gpuq_k8s.common.model.pod_spec import scheduling_gates
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.status import Code, Status
from gpuq_k8s.scheduler.plugins.scheduling_gates import SchedulingGates
from gpuq_k8s.scheduler.queue import GATED
from tests.testing.builders import MakeNode, MakePod
from tests.testing.scheduler import make_scheduler

NODE = MakeNode("n1").alloc(cpu="4", memory="8Gi", pods="10")

# TestPreEnqueue
PRE_ENQUEUE = [
    ("pod does not carry scheduling gates", MakePod("p"), Status.success()),
    (
        "pod carries scheduling gates",
        MakePod("p").scheduling_gates("foo", "bar"),
        Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("waiting for scheduling gates: [foo bar]",)),
    ),
]


@pytest.mark.parametrize(("name", "pod", "want"), PRE_ENQUEUE, ids=[c[0] for c in PRE_ENQUEUE])
def test_pre_enqueue(name: str, pod: MakePod, want: Status) -> None:
    sched, _ = make_scheduler()
    plugin = sched.framework.plugin(plugin_names.SCHEDULING_GATES)
    assert isinstance(plugin, SchedulingGates)
    assert plugin.pre_enqueue(pod.info()) == want


def test_the_framework_runs_it_whatever_the_configuration_names() -> None:
    """No tier names SchedulingGates: it is on all the same, with its plugin named in the refusal."""
    config = 'actions: "allocate"\ntiers:\n- plugins:\n  - name: priority\n'
    sched, _ = make_scheduler(config=config)
    status = sched.framework.run_pre_enqueue(MakePod("p").scheduling_gates("foo").info())
    assert (
        status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and status.plugin == plugin_names.SCHEDULING_GATES
    )


def test_a_gated_pod_is_never_attempted_and_leaves_the_set_when_its_gates_are_removed() -> None:
    sched, backend = make_scheduler()
    sched.set_node(NODE.info())
    gated = MakePod("p").req(cpu="1").scheduling_gates("example.com/a", "example.com/b")
    sched.add_pod(gated.info())
    assert sched.schedule_one() is None  # nothing ready: the only pod is gated
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool == GATED and queued.attempts == 0
    assert queued.message == "waiting for scheduling gates: [example.com/a example.com/b]"
    # kube-scheduler writes nothing for a gated pod (the apiserver set SchedulingGated at creation).
    assert not backend.conditions and not backend.events
    # One gate removed: still gated, with the gate left.
    sched.add_pod(gated.scheduling_gates("example.com/b").info())
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool == GATED
    assert queued.message == "waiting for scheduling gates: [example.com/b]"
    assert sched.schedule_one() is None
    # The last gate removed (Test_isSchedulableAfterPodChange "queue-on-the-unsched-pod-updated").
    sched.add_pod(gated.scheduling_gates().info())
    attempt = sched.schedule_one()
    assert attempt is not None and attempt.node == "n1"


def test_another_pods_gates_coming_off_moves_nothing() -> None:
    """Test_isSchedulableAfterPodChange "skip-queue-on-other-pod-updated"."""
    sched, _ = make_scheduler()
    sched.set_node(NODE.info())
    sched.add_pod(MakePod("p").req(cpu="1").scheduling_gates("foo", "bar").uid("uid0").info())
    other = MakePod("p1").req(cpu="1").uid("uid1")
    sched.add_pod(other.copy().scheduling_gates("foo", "bar").info())
    sched.add_pod(other.scheduling_gates("foo").info())
    assert [q.pod.name for q in sched.queue.pods(GATED)] == ["p", "p1"]
    assert sched.schedule_one() is None


def test_cluster_events_leave_gated_pods_gated() -> None:
    """A node added, a pod deleted, the unschedulable flush: none of them tries a gated pod."""
    sched, _ = make_scheduler()
    sched.add_pod(MakePod("p").req(cpu="1").scheduling_gates("foo").info())
    sched.set_node(NODE.info())
    sched.add_pod(MakePod("running").req(cpu="1").node("n1").info())
    sched.delete_pod("ns/running")
    assert sched.queue.flush_unschedulable(0.0) == 0
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool == GATED
    assert sched.schedule_one() is None


def test_gates_are_read_with_the_field_named_when_malformed() -> None:
    assert scheduling_gates({"schedulingGates": [{"name": "a"}, {"name": "b"}]}) == ("a", "b")
    assert waiting_for(("a",)) == "waiting for scheduling gates: [a]"
    obj = MakePod("p", "ns").obj()
    obj["spec"]["schedulingGates"] = [{"name": ""}]
    with pytest.raises(InvalidValue, match=r"Pod/ns/p: spec.schedulingGates\[0\].name: invalid value ''"):
        PodInfo.from_dict(obj)
