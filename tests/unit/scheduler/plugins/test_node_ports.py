"""NodePorts (scheduler/plugins/node_ports.py): PreFilter, the vectorised Filter over the ports bound
and assumed pods hold, and its queueing hint. Ported from kube-scheduler v1.36
``framework/plugins/nodeports/node_ports_test.go``: TestNodePorts, TestFits and
Test_isSchedulableAfterPodDeleted, case by case."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.placement.node_ports import NO_FREE_PORTS
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent
from gpuq_k8s.scheduler.framework.status import Code
from gpuq_k8s.scheduler.plugins.node_ports import NodePorts
from tests.testing.builders import MakeNode, MakePod
from tests.testing.scheduler import make_scheduler

NODE = MakeNode("m1").alloc(cpu="8", memory="8Gi", pods="110")


def new_pod(name: str, *ports: str) -> MakePod:
    """kube's ``newPod``: a pod whose container declares ``PROTOCOL/IP/PORT`` host ports."""
    pod = MakePod(name)
    for spec in ports:
        protocol, ip, port = spec.split("/")
        pod.host_port(int(port), protocol, ip)
    return pod


def _setup(*existing: MakePod) -> tuple[Scheduler, NodePorts]:
    sched, _ = make_scheduler()
    sched.set_node(NODE.info())
    for i, pod in enumerate(existing):
        sched.add_pod(pod.copy().name(f"existing-{i}").node("m1").info())
    plugin = sched.framework.plugin(plugin_names.NODE_PORTS)
    assert isinstance(plugin, NodePorts)
    return sched, plugin


def _verdict(pod: MakePod, *existing: MakePod) -> str | None:
    """ "skip" (PreFilter skipped the pod), None (the node fits) or the node's reason."""
    sched, plugin = _setup(*existing)
    info = pod.info()
    state = CycleState()
    if plugin.pre_filter(state, info).code is Code.SKIP:
        return "skip"
    result = plugin.filter(state, info)
    row = sched.cluster.row_of["m1"]
    reasons = [message for mask, message in result.reasons() if mask[row]]
    assert bool(result.passed[row]) is (not reasons)
    assert result.unresolvable is None  # a port conflict is Unschedulable: eviction frees the port
    return reasons[0] if reasons else None


SIDECAR_8001 = MakePod("p").sidecar({}).host_port(8001, "TCP", init=0)
INIT_8001 = MakePod("p").init_container({}).host_port(8001, "TCP", init=0)

# TestNodePorts: (name, pod, the node's existing pod, want)
NODE_PORTS = [
    ("skip filter", MakePod("p"), None, "skip"),
    ("other port", new_pod("m1", "UDP/127.0.0.1/8080"), new_pod("m1", "UDP/127.0.0.1/9090"), None),
    (
        "same udp port",
        new_pod("m1", "UDP/127.0.0.1/8080"),
        new_pod("m1", "UDP/127.0.0.1/8080"),
        NO_FREE_PORTS,
    ),
    (
        "same tcp port",
        new_pod("m1", "TCP/127.0.0.1/8080"),
        new_pod("m1", "TCP/127.0.0.1/8080"),
        NO_FREE_PORTS,
    ),
    ("different host ip", new_pod("m1", "TCP/127.0.0.1/8080"), new_pod("m1", "TCP/127.0.0.2/8080"), None),
    ("different protocol", new_pod("m1", "UDP/127.0.0.1/8080"), new_pod("m1", "TCP/127.0.0.1/8080"), None),
    (
        "second udp port conflict",
        new_pod("m1", "UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"),
        new_pod("m1", "UDP/127.0.0.1/8080"),
        NO_FREE_PORTS,
    ),
    (
        "first tcp port conflict",
        new_pod("m1", "TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
        new_pod("m1", "TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"),
        NO_FREE_PORTS,
    ),
    (
        "first tcp port conflict due to 0.0.0.0 hostIP",
        new_pod("m1", "TCP/0.0.0.0/8001"),
        new_pod("m1", "TCP/127.0.0.1/8001"),
        NO_FREE_PORTS,
    ),
    (
        "TCP hostPort conflict due to 0.0.0.0 hostIP",
        new_pod("m1", "TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"),
        new_pod("m1", "TCP/127.0.0.1/8001"),
        NO_FREE_PORTS,
    ),
    (
        "second tcp port conflict to 0.0.0.0 hostIP",
        new_pod("m1", "TCP/127.0.0.1/8001"),
        new_pod("m1", "TCP/0.0.0.0/8001"),
        NO_FREE_PORTS,
    ),
    (
        "second different protocol",
        new_pod("m1", "UDP/127.0.0.1/8001"),
        new_pod("m1", "TCP/0.0.0.0/8001"),
        None,
    ),
    (
        "UDP hostPort conflict due to 0.0.0.0 hostIP",
        new_pod("m1", "UDP/127.0.0.1/8001"),
        new_pod("m1", "TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"),
        NO_FREE_PORTS,
    ),
    ("non-sidecar initContainer using hostPort", INIT_8001, new_pod("m1", "TCP/0.0.0.0/8001"), "skip"),
    (
        "TCP hostPort conflict from sidecar initContainer",
        SIDECAR_8001,
        new_pod("m1", "TCP/0.0.0.0/8001"),
        NO_FREE_PORTS,
    ),
]


@pytest.mark.parametrize(("name", "pod", "existing", "want"), NODE_PORTS, ids=[c[0] for c in NODE_PORTS])
def test_node_ports(name: str, pod: MakePod, existing: MakePod | None, want: str | None) -> None:
    assert _verdict(pod, *(() if existing is None else (existing,))) == want


# TestFits: (desc, pod, the node's existing pod, fits)
FITS = [
    ("non-conflicting ports", new_pod("p", "TCP/127.0.0.1/80"), new_pod("p1", "TCP/127.0.0.1/9090"), True),
    (
        "multiple non-conflicting ports",
        new_pod("p", "TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"),
        new_pod("p1", "TCP/127.0.0.1/9090", "TCP/127.0.0.1/9191", "TCP/127.0.1.1/8080"),
        True,
    ),
    (
        "same ports on different protocols",
        new_pod("m1", "TCP/127.0.0.1/80"),
        new_pod("p1", "UDP/127.0.0.1/80"),
        True,
    ),
    ("conflicting ports", new_pod("m1", "TCP/127.0.0.1/80"), new_pod("p1", "TCP/127.0.0.1/80"), False),
    (
        "multiple ports, some conflicting",
        new_pod("p", "TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"),
        new_pod("p1", "TCP/127.0.0.1/9090", "TCP/127.0.1.1/90", "TCP/127.0.1.1/8080"),
        False,
    ),
]


@pytest.mark.parametrize(("desc", "pod", "existing", "fits"), FITS, ids=[c[0] for c in FITS])
def test_fits(desc: str, pod: MakePod, existing: MakePod, fits: bool) -> None:
    assert (_verdict(pod, existing) is None) is fits


def test_a_pod_assumed_in_this_burst_holds_its_ports() -> None:
    """Two pods asking hostPort 80 never share a node, also when both are placed in one burst (the
    first is assumed from Reserve on); the second goes to the other node, a third waits."""
    sched, _ = make_scheduler()
    for name in ("a", "b"):
        sched.set_node(MakeNode(name).alloc(cpu="8", pods="110").info())
    for name in ("web-0", "web-1", "web-2"):
        sched.add_pod(MakePod(name).req(cpu="1").host_port(80).info())
    nodes = [attempt.node for attempt in iter(sched.schedule_one, None)]
    assert nodes == ["a", "b", ""]
    assert sched.reasons["ns/web-2"] == f"0/2 nodes are available: 2 {NO_FREE_PORTS}."


POD_WITH_HOST_PORT = MakePod("p").host_port(8080)

# Test_isSchedulableAfterPodDeleted: (name, the deleted pod (bound to fake-node), Queue?)
AFTER_DELETE = [
    ("skip-queue-on-non-hostport", MakePod("gone").node("fake-node"), False),
    ("skip-queue-on-unrelated-hostport", MakePod("gone").node("fake-node").host_port(8081), False),
    ("queue-on-released-hostport", MakePod("gone").node("fake-node").host_port(8080), True),
]


@pytest.mark.parametrize(("name", "deleted", "queue"), AFTER_DELETE, ids=[c[0] for c in AFTER_DELETE])
def test_is_schedulable_after_pod_deleted(name: str, deleted: MakePod, queue: bool) -> None:
    """("skip-queue-on-unscheduled": gpuq raises PodDeleted only for a pod that counted on a node.)"""
    _, plugin = _setup()
    hint = plugin.queueing_hint(ClusterEvent.POD_DELETED, POD_WITH_HOST_PORT.info(), deleted.info(), None)
    assert hint is queue
