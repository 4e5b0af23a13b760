"""Host ports as pure rules (common/model/placement/node_ports.py): which ports a pod holds, when two
conflict, and the per-row index. Cases ported from kube-scheduler v1.36: k8s.io/kube-scheduler
``framework/types_test.go`` (TestHostPortInfo_AddRemove, TestHostPortInfo_Check) and
``pkg/scheduler/util`` GetHostPorts (through node_ports_test.go's sidecar cases)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.node_ports import PortIndex, conflicts
from gpuq_k8s.common.model.pod_spec import HostPort, host_ports
from gpuq_k8s.common.model.pods import PodInfo
from tests.testing.builders import MakePod

Param = tuple[str, str, int]  # kube's hostPortInfoParam: (protocol, ip, port), "" where empty


def _ports(params: Sequence[Param]) -> tuple[HostPort, ...]:
    """The ports of a pod whose container declares ``params``, read as the scheduler reads them (an
    empty protocol is TCP, an empty IP 0.0.0.0); port 0 and negative ones are no host port."""
    pod = MakePod("p")
    for protocol, ip, port in params:
        if port > 0:
            pod.host_port(port, protocol, ip)
    return pod.info().host_ports


# TestHostPortInfo_AddRemove: what a node holds after pods holding ``added`` came and ``removed`` left.
ADD_REMOVE = [
    (
        "normal add case",
        [
            ("TCP", "127.0.0.1", 79),
            ("UDP", "127.0.0.1", 80),
            ("TCP", "127.0.0.1", 81),
            ("TCP", "127.0.0.1", 82),
            ("TCP", "0.0.0.0", 79),
            ("UDP", "0.0.0.0", 80),
            ("TCP", "0.0.0.0", 81),
            ("TCP", "0.0.0.0", 82),
            ("TCP", "0.0.0.0", 0),
            ("TCP", "0.0.0.0", -1),
        ],
        [],
        8,
    ),
    (
        "empty ip and protocol add should work",
        [
            ("", "127.0.0.1", 79),
            ("UDP", "127.0.0.1", 80),
            ("", "127.0.0.1", 81),
            ("", "127.0.0.1", 82),
            ("", "", 79),
            ("UDP", "", 80),
            ("", "", 81),
            ("", "", 82),
            ("", "", 0),
            ("", "", -1),
        ],
        [],
        8,
    ),
    (
        "normal remove case",
        [
            ("TCP", "127.0.0.1", 79),
            ("UDP", "127.0.0.1", 80),
            ("TCP", "127.0.0.1", 81),
            ("TCP", "127.0.0.1", 82),
            ("TCP", "0.0.0.0", 79),
            ("UDP", "0.0.0.0", 80),
            ("TCP", "0.0.0.0", 81),
            ("TCP", "0.0.0.0", 82),
        ],
        [
            ("TCP", "127.0.0.1", 79),
            ("UDP", "127.0.0.1", 80),
            ("TCP", "127.0.0.1", 81),
            ("TCP", "127.0.0.1", 82),
            ("TCP", "0.0.0.0", 79),
            ("UDP", "0.0.0.0", 80),
            ("TCP", "0.0.0.0", 81),
            ("TCP", "0.0.0.0", 82),
        ],
        0,
    ),
    (
        "empty ip and protocol remove should work",
        [
            ("TCP", "127.0.0.1", 79),
            ("UDP", "127.0.0.1", 80),
            ("TCP", "127.0.0.1", 81),
            ("TCP", "127.0.0.1", 82),
            ("TCP", "0.0.0.0", 79),
            ("UDP", "0.0.0.0", 80),
            ("TCP", "0.0.0.0", 81),
            ("TCP", "0.0.0.0", 82),
        ],
        [
            ("", "127.0.0.1", 79),
            ("", "127.0.0.1", 81),
            ("", "127.0.0.1", 82),
            ("UDP", "127.0.0.1", 80),
            ("", "", 79),
            ("", "", 81),
            ("", "", 82),
            ("UDP", "", 80),
        ],
        0,
    ),
]


@pytest.mark.parametrize(("desc", "added", "removed", "length"), ADD_REMOVE, ids=[c[0] for c in ADD_REMOVE])
def test_host_port_info_add_remove(desc: str, added: list[Param], removed: list[Param], length: int) -> None:
    index = PortIndex()
    for param in added:  # one pod per port, as kube adds them one by one
        index.add(0, _ports([param]))
    for param in removed:
        index.remove(0, _ports([param]))
    assert len(index.used(0)) == length


# TestHostPortInfo_Check: whether ``check`` conflicts with what ``added`` holds.
CHECK = [
    ("empty check should check 0.0.0.0 and TCP", [("TCP", "127.0.0.1", 80)], ("", "", 81), False),
    ("empty check should check 0.0.0.0 and TCP (conflicted)", [("TCP", "127.0.0.1", 80)], ("", "", 80), True),
    ("empty port check should pass", [("TCP", "127.0.0.1", 80)], ("", "", 0), False),
    ("0.0.0.0 should check all registered IPs", [("TCP", "127.0.0.1", 80)], ("TCP", "0.0.0.0", 80), True),
    (
        "0.0.0.0 with different protocol should be allowed",
        [("UDP", "127.0.0.1", 80)],
        ("TCP", "0.0.0.0", 80),
        False,
    ),
    (
        "0.0.0.0 with different port should be allowed",
        [("TCP", "127.0.0.1", 79), ("TCP", "127.0.0.1", 81), ("TCP", "127.0.0.1", 82)],
        ("TCP", "0.0.0.0", 80),
        False,
    ),
    (
        "normal ip should check all registered 0.0.0.0",
        [("TCP", "0.0.0.0", 80)],
        ("TCP", "127.0.0.1", 80),
        True,
    ),
    (
        "normal ip with different port/protocol should be allowed (0.0.0.0)",
        [("TCP", "0.0.0.0", 79), ("UDP", "0.0.0.0", 80), ("TCP", "0.0.0.0", 81), ("TCP", "0.0.0.0", 82)],
        ("TCP", "127.0.0.1", 80),
        False,
    ),
    (
        "normal ip with different port/protocol should be allowed",
        [
            ("TCP", "127.0.0.1", 79),
            ("UDP", "127.0.0.1", 80),
            ("TCP", "127.0.0.1", 81),
            ("TCP", "127.0.0.1", 82),
        ],
        ("TCP", "127.0.0.1", 80),
        False,
    ),
]


@pytest.mark.parametrize(("desc", "added", "check", "expect"), CHECK, ids=[c[0] for c in CHECK])
def test_host_port_info_check(desc: str, added: list[Param], check: Param, expect: bool) -> None:
    held = _ports(added)
    wanted = _ports([check])
    # The scalar rule and the per-row index agree.
    assert any(conflicts(want, held) for want in wanted) is expect
    index = PortIndex()
    index.add(1, held)
    assert index.conflicts(wanted, 3).tolist() == [False, expect, False]


def test_a_port_two_pods_hold_stays_held_until_both_leave() -> None:
    """gpuq counts holders (kube's set forgets the port with the first pod to leave)."""
    port = _ports([("TCP", "10.0.0.1", 80)])
    index = PortIndex()
    index.add(0, port)
    index.add(0, port)
    index.remove(0, port)
    assert index.conflicts(port, 1).tolist() == [True]
    index.remove(0, port)
    assert index.conflicts(port, 1).tolist() == [False]


def test_sidecars_ports_count_and_classic_init_containers_do_not() -> None:
    """GetHostPorts: restartable init containers (sidecars) first, then containers; a classic init
    container has finished before the pod runs (node_ports_test.go: "non-sidecar initContainer using
    hostPort", "TCP hostPort conflict from sidecar initContainer")."""
    pod = (
        MakePod("p")
        .init_container({})
        .host_port(7000, init=0)
        .sidecar({})
        .host_port(8001, "UDP", "10.0.0.2", init=1)
        .host_port(80)
    )
    assert pod.info().host_ports == (HostPort("UDP", 8001, "10.0.0.2"), HostPort("TCP", 80, "0.0.0.0"))


@pytest.mark.parametrize(
    ("port", "field", "expected"),
    [
        ({"containerPort": 1, "hostPort": 70000}, "spec.containers[0].ports[0].hostPort", "from 1 to 65535"),
        ({"containerPort": 1, "hostPort": "80"}, "spec.containers[0].ports[0].hostPort", "from 1 to 65535"),
        ({"containerPort": 1, "hostPort": 80, "protocol": "HTTP"}, "ports[0].protocol", "TCP, UDP or SCTP"),
        ({"containerPort": 1, "hostPort": 80, "hostIP": "localhost"}, "ports[0].hostIP", "an IP address"),
    ],
)
def test_a_malformed_port_names_the_pod_field_and_value(
    port: dict[str, object], field: str, expected: str
) -> None:
    obj = MakePod("p", "ns").obj()
    obj["spec"]["containers"][0]["ports"] = [port]
    with pytest.raises(InvalidValue) as caught:
        PodInfo.from_dict(obj)
    assert str(caught.value).startswith("Pod/ns/p: ")
    assert field in str(caught.value) and expected in str(caught.value)


def test_host_ports_of_a_spec_without_ports_are_none() -> None:
    assert host_ports({"containers": [{"name": "c"}]}) == ()
    assert host_ports({}) == ()
