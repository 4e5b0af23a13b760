"""VolumeRestrictions (scheduler/plugins/volume_restrictions.py), ported from kube-scheduler v1.36.4
``pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions_test.go``:
TestGCEDiskConflicts, TestAWSDiskConflicts, TestRBDDiskConflicts, TestISCSIDiskConflicts and
TestAccessModeConflicts, each row naming its upstream test and case (the node's pods are pods bound to
``node-1``; gpuq's Filter answers every node at once), and the read-only rules of ``isVolumeConflict``
that upstream's tables leave out.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.placement.volumes.restrictions import (
    ERR_REASON_DISK_CONFLICT,
    ERR_REASON_RWOP_CONFLICT,
)
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent
from gpuq_k8s.scheduler.framework.status import Code
from gpuq_k8s.scheduler.plugins.volume_restrictions import VolumeRestrictions
from tests.testing.builders import MakeNode, MakePod, MakePVC
from tests.testing.scheduler import make_scheduler, plugin_of

GCE = {"gcePersistentDisk": {"pdName": "foo"}}
GCE2 = {"gcePersistentDisk": {"pdName": "bar"}}
AWS = {"awsElasticBlockStore": {"volumeID": "foo"}}
AWS2 = {"awsElasticBlockStore": {"volumeID": "bar"}}
RBD = {"rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "bar", "fsType": "ext4"}}
RBD2 = {"rbd": {"monitors": ["c", "d"], "pool": "foo", "image": "bar", "fsType": "ext4"}}
ISCSI = {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2016-12.server:storage.target01", "lun": 0}}
ISCSI2 = {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2017-12.server:storage.target01", "lun": 0}}
NO_RESTRICTION: dict[str, Any] = {"name": "volume with no restriction"}


def read_only(volume: dict[str, Any]) -> dict[str, Any]:
    ((key, source),) = volume.items()
    return {key: {**source, "readOnly": True}}


def with_volume(name: str, volume: dict[str, Any] | None) -> MakePod:
    pod = MakePod(name, "default")
    if volume is not None:
        pod.volume({"name": "", **volume})
    return pod


def setup(existing: list[MakePod], claims: list[Obj]) -> tuple[Scheduler, VolumeRestrictions]:
    scheduler, _ = make_scheduler()
    for claim in claims:
        scheduler.put_object(claim)
    scheduler.set_node(MakeNode("node-1").alloc(cpu="8", pods="110").info())
    scheduler.set_node(MakeNode("node-2").alloc(cpu="8", pods="110").info())
    for pod in existing:
        scheduler.add_pod(pod.node("node-1").info())
    return scheduler, plugin_of(scheduler, VolumeRestrictions)


def attempt(
    scheduler: Scheduler, plugin: VolumeRestrictions, pod: MakePod
) -> tuple[Code, str, dict[str, str]]:
    """PreFilter's code and message, then (when it succeeds) each node's Filter reason ("" passes)."""
    state = CycleState()
    info = pod.info()
    status = plugin.pre_filter(state, info)
    if not status.is_success:
        return status.code, status.message, {}
    result = plugin.filter(state, info)
    reasons = result.reasons()
    cluster = scheduler.cluster
    nodes = {}
    for row in cluster.live_rows():
        found = [message for mask, message in reasons if mask[row]]
        assert bool(result.passed[row]) == (not found)
        nodes[cluster.names[row]] = ", ".join(found)
    return status.code, status.message, nodes


DISKS = [("GCE", GCE, GCE2), ("AWS", AWS, AWS2), ("RBD", RBD, RBD2), ("ISCSI", ISCSI, ISCSI2)]


@pytest.mark.parametrize(("disk", "same", "other"), DISKS, ids=[d[0] for d in DISKS])
def test_disk_conflicts(disk: str, same: dict[str, Any], other: dict[str, Any]) -> None:
    """Test{GCE,AWS,RBD,ISCSI}DiskConflicts: "nothing" and "one state" (a pod without volumes:
    Skip), "same state" (node-1 has no available disk; node-2, without that pod, is free) and
    "different state" (no conflict)."""
    skip: tuple[Code, str, dict[str, str]] = (Code.SKIP, "", {})
    assert attempt(*setup([], []), MakePod("p", "default")) == skip, "nothing"
    assert attempt(*setup([with_volume("e", same)], []), MakePod("p", "default")) == skip, "one state"
    conflict = {"node-1": ERR_REASON_DISK_CONFLICT, "node-2": ""}
    got = attempt(*setup([with_volume("e", same)], []), with_volume("p", same))
    assert got == (Code.SUCCESS, "", conflict), "same state"
    got = attempt(*setup([with_volume("e", same)], []), with_volume("p", other))
    assert got == (Code.SUCCESS, "", {"node-1": "", "node-2": ""}), "different state"


def test_gce_pod_with_a_volume_without_restrictions_is_skipped() -> None:
    """TestGCEDiskConflicts "pod with a volume that doesn't have restrictions"."""
    pod = MakePod("p", "default").volume(NO_RESTRICTION)
    assert attempt(*setup([], []), pod) == (Code.SKIP, "", {})


# isVolumeConflict's read-only rules: both read-only share a GCE PD, iSCSI IQN or RBD image; an
# EBS volume never is shared; RBD needs an overlapping monitor and the same pool.
READ_ONLY = [
    ("GCE both read-only", read_only(GCE), read_only(GCE), ""),
    ("GCE one read-only", read_only(GCE), GCE, ERR_REASON_DISK_CONFLICT),
    ("AWS both read-only", read_only(AWS), read_only(AWS), ERR_REASON_DISK_CONFLICT),
    ("ISCSI both read-only", read_only(ISCSI), read_only(ISCSI), ""),
    ("ISCSI one read-only", ISCSI, read_only(ISCSI), ERR_REASON_DISK_CONFLICT),
    ("RBD both read-only", read_only(RBD), read_only(RBD), ""),
    (
        "RBD one shared monitor",
        RBD,
        {"rbd": {"monitors": ["b", "z"], "pool": "foo", "image": "bar"}},
        ERR_REASON_DISK_CONFLICT,
    ),
    ("RBD another pool", RBD, {"rbd": {"monitors": ["a"], "pool": "other", "image": "bar"}}, ""),
]


@pytest.mark.parametrize(
    ("existing", "new", "reason"), [r[1:] for r in READ_ONLY], ids=[r[0] for r in READ_ONLY]
)
def test_read_only_disks(existing: dict[str, Any], new: dict[str, Any], reason: str) -> None:
    _, _, nodes = attempt(*setup([with_volume("e", existing)], []), with_volume("p", new))
    assert nodes["node-1"] == reason and nodes["node-2"] == ""


RWOP1 = MakePVC("claim-with-rwop-1", "default").access_modes("ReadWriteOncePod").obj()
RWOP2 = MakePVC("claim-with-rwop-2", "default").access_modes("ReadWriteOncePod").obj()
RWX = MakePVC("claim-with-rwx", "default").access_modes("ReadWriteMany").obj()


def pod_with(name: str, *claims: str) -> MakePod:
    pod = MakePod(name, "default")
    for claim in claims:
        pod.pvc(claim)
    return pod


ACCESS_MODES: list[tuple[str, MakePod, list[MakePod], list[Obj], tuple[Code, str, dict[str, str]]]] = [
    ("nothing", MakePod("p", "default"), [], [], (Code.SKIP, "", {})),
    (
        "failed to get PVC",
        pod_with("pod-with-one-pvc", "claim-with-rwop-1"),
        [],
        [],
        (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 'persistentvolumeclaim "claim-with-rwop-1" not found', {}),
    ),
    (
        "no access mode conflict",
        pod_with("pod-with-one-pvc", "claim-with-rwop-1"),
        [pod_with("pod-with-rwx", "claim-with-rwx")],
        [RWOP1, RWX],
        (Code.SKIP, "", {}),
    ),
    (
        "access mode conflict, unschedulable",
        pod_with("pod-with-one-conflict", "claim-with-rwop-1"),
        [pod_with("pod-with-one-pvc", "claim-with-rwop-1"), pod_with("pod-with-rwx", "claim-with-rwx")],
        [RWOP1, RWX],
        (Code.SUCCESS, "", {"node-1": ERR_REASON_RWOP_CONFLICT, "node-2": ERR_REASON_RWOP_CONFLICT}),
    ),
    (
        "two conflicts, unschedulable",
        pod_with("pod-with-two-conflicts", "claim-with-rwop-1", "claim-with-rwop-2"),
        [
            pod_with("pod-with-two-pvcs", "claim-with-rwop-1", "claim-with-rwop-2"),
            pod_with("pod-with-rwx", "claim-with-rwx"),
        ],
        [RWOP1, RWOP2, RWX],
        (Code.SUCCESS, "", {"node-1": ERR_REASON_RWOP_CONFLICT, "node-2": ERR_REASON_RWOP_CONFLICT}),
    ),
]


@pytest.mark.parametrize(
    ("pod", "existing", "claims", "expected"), [c[1:] for c in ACCESS_MODES], ids=[c[0] for c in ACCESS_MODES]
)
def test_access_mode_conflicts(
    pod: MakePod, existing: list[MakePod], claims: list[Obj], expected: tuple[Code, str, dict[str, str]]
) -> None:
    """TestAccessModeConflicts: a ReadWriteOncePod claim in use by any pod of the cluster blocks every
    node, Unschedulable (preemption may free it)."""
    assert attempt(*setup(existing, claims), pod) == expected


def test_a_once_pod_claim_is_free_again_when_its_pod_leaves() -> None:
    """The in-use count follows the cluster's pods: the user's deletion frees the claim, and the
    deletion is an event the plugin registered for (the rejected pod is retried)."""
    scheduler, plugin = setup([pod_with("user", "claim-with-rwop-1")], [RWOP1])
    waiting = pod_with("waiting", "claim-with-rwop-1")
    assert attempt(scheduler, plugin, waiting)[2]["node-1"] == ERR_REASON_RWOP_CONFLICT
    scheduler.delete_pod("default/user")
    assert attempt(scheduler, plugin, waiting) == (Code.SKIP, "", {})
    assert ClusterEvent.POD_DELETED in plugin.events
