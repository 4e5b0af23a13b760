"""NodeVolumeLimits (scheduler/plugins/node_volume_limits.py), ported from kube-scheduler v1.36.4
``pkg/scheduler/framework/plugins/nodevolumelimits/csi_test.go`` TestCSILimits, each row naming its
upstream case, with upstream's fixtures rebuilt as there (``getFakeCSIPVLister``,
``getFakeCSIPVCLister``, ``getFakeCSIStorageClassLister``, ``getNodeWithPodAndVolumeLimits``; the
in-tree AWS EBS plugin migrated on the node).

Where gpuq answers differently, the row says so: a claim problem of the pod is found in PreFilter
(upstream: Filter) with the same code on every node, and named with the real lister's words
(``persistentvolumeclaim``; upstream's fake lister says ``persistentvolumeclaims``); an ephemeral
claim of another pod is UnschedulableAndUnresolvable (upstream: an Error, which VolumeBinding's
PreFilter turns into the same unresolvable verdict before this filter runs); VolumeAttachments are
not counted (gpuq does not read them), so the first row's pod fits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuq_k8s.common.model.placement.volumes.limits import ERR_REASON_MAX_VOLUME_COUNT
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent
from gpuq_k8s.scheduler.framework.status import Code
from gpuq_k8s.scheduler.plugins.node_volume_limits import NodeVolumeLimits
from tests.testing.builders import MakeCSINode, MakeNode, MakePod, MakePV, MakePVC, MakeStorageClass
from tests.testing.scheduler import make_scheduler, plugin_of

EBS, GCE_CSI = "ebs.csi.aws.com", "pd.csi.storage.gke.io"
EBS_IN_TREE, HOSTPATH = "kubernetes.io/aws-ebs", "kubernetes.io/hostpath"
SC_NAME = "csi-sc"
NODE = "node-for-max-pd-test-1"
UNSCHEDULABLE = (Code.UNSCHEDULABLE, ERR_REASON_MAX_VOLUME_COUNT)
OK: tuple[Code, str] = (Code.SUCCESS, "")
SKIP: tuple[Code, str] = (Code.SKIP, "")


def storage(drivers: list[str], limit_source: str, max_volumes: int) -> list[Obj]:
    """The PVs, claims, class and CSINode of upstream's fixtures."""
    out: list[Obj] = []
    for driver in drivers:
        for j in range(4):
            handle = f"csi-{driver}-{j}"
            pv = MakePV(handle)
            if driver == EBS_IN_TREE:
                pv.source("awsElasticBlockStore", {"volumeID": handle})
            elif driver == HOSTPATH:
                pv.source("hostPath", {"path": "/tmp"})
            else:
                pv.csi(driver, handle)
            out.append(pv.obj())
            out.append(MakePVC(handle, "default").prebound(handle).obj())
    out.append(MakePVC("csi-4", "default", SC_NAME).obj())
    out.append(MakePVC("csi-5", "default").obj())
    out.append(MakePVC("csi-6", "default", SC_NAME).prebound("missing-in-action").obj())
    out.append(MakeStorageClass(SC_NAME, drivers[0], mode="Immediate").obj())
    if limit_source in ("csinode", "csinode-with-no-limit"):
        csi_node = MakeCSINode(NODE).migrated(EBS_IN_TREE)
        for driver in drivers:
            csi_node.driver(driver, max_volumes if limit_source == "csinode" else None)
        out.append(csi_node.obj())
    return out


def pvcs(name: str, *claims: str) -> MakePod:
    pod = MakePod(name, "default")
    for claim in claims:
        pod.pvc(claim)
    return pod


def named(*claims: str) -> Callable[[str], MakePod]:
    """A pod of these claims, named by the caller (upstream's pods have no names; gpuq keys by name)."""
    return lambda name: pvcs(name, *claims)


def inline_ebs(name: str, volume_id: str) -> MakePod:
    return MakePod(name, "default").volume({"name": "", "awsElasticBlockStore": {"volumeID": volume_id}})


def config_and_secret(pod: MakePod) -> MakePod:
    return pod.volume({"name": "cm", "configMap": {"name": "c"}}).volume(
        {"name": "s", "secret": {"secretName": "s"}}
    )


running = named(f"csi-{EBS}-3")
pending_volume = named("csi-4")
missing_pv = named("csi-6")
no_sc = named("csi-5")
gce_two = named(f"csi-{GCE_CSI}-1", f"csi-{GCE_CSI}-2")
in_tree_one = named(f"csi-{EBS_IN_TREE}-0")
in_tree_two = named(f"csi-{EBS_IN_TREE}-1", f"csi-{EBS_IN_TREE}-2")
ebs_one = named(f"csi-{EBS}-0")
ebs_two = named(f"csi-{EBS}-1", f"csi-{EBS}-2")
non_migratable_one = named(f"csi-{HOSTPATH}-0")
ephemeral_pod = MakePod("abc", "test").uid("12345").ephemeral("xyz")
ephemeral_two = MakePod("abc", "test").uid("12345II").ephemeral("x").ephemeral("y")


def ephemeral_claim(name: str, owner_uid: str | None) -> Obj:
    claim = MakePVC(name, "test", SC_NAME)
    if owner_uid is not None:
        claim.owner("Pod", "abc", owner_uid)
    return claim.obj()


EPHEMERAL_CLAIM = ephemeral_claim("abc-xyz", "12345")
CONFLICTING_CLAIM = ephemeral_claim("abc-xyz", None)
EPHEMERAL_X, EPHEMERAL_Y = ephemeral_claim("abc-x", "12345II"), ephemeral_claim("abc-y", "12345II")
MISSING = 'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found'

# (case, new pod, existing pods, extra claims, max volumes, drivers, limit source, expected)
Case = tuple[str, MakePod, list[MakePod], list[Obj], int, list[str], str, tuple[Code, str]]
CASES: list[Case] = [
    # gpuq does not count VolumeAttachments: upstream's two attached volumes fill the limit, here none
    (
        "should count VolumeAttachments towards volume limit when no pods exist",
        ebs_one("p"),
        [],
        [],
        2,
        [EBS],
        "csinode",
        OK,
    ),
    (
        "should schedule pod when VolumeAttachments count does not exceed limit",
        ebs_one("p"),
        [],
        [],
        2,
        [EBS],
        "csinode",
        OK,
    ),
    (
        "fits when node volume limit >= new pods CSI volume",
        ebs_one("p"),
        [running("r"), ebs_two("t")],
        [],
        4,
        [EBS],
        "csinode",
        OK,
    ),
    (
        "doesn't when node volume limit <= pods CSI volume",
        ebs_one("p"),
        [running("r"), ebs_two("t")],
        [],
        2,
        [EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "should when driver does not support volume limits",
        ebs_one("p"),
        [running("r"), ebs_two("t")],
        [],
        2,
        [EBS],
        "csinode-with-no-limit",
        OK,
    ),
    (
        "count pending PVCs towards volume limit <= pods CSI volume",
        ebs_one("p"),
        [pending_volume("q"), ebs_two("t")],
        [],
        2,
        [EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "count multiple pending pvcs towards volume limit >= pods CSI volume",
        ebs_one("p"),
        [pending_volume("q"), pending_volume("q2"), ebs_two("t")],
        [],
        4,
        [EBS],
        "csinode",
        OK,
    ),
    (
        "should count PVCs with invalid PV name but valid SC",
        ebs_one("p"),
        [missing_pv("m"), ebs_two("t")],
        [],
        2,
        [EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "don't count pvcs with missing SC towards volume limit",
        ebs_one("p"),
        [running("r"), no_sc("s")],
        [],
        2,
        [EBS],
        "csinode",
        OK,
    ),
    (
        "count pvcs with the same type towards volume limit",
        ebs_one("p"),
        [gce_two("g"), ebs_two("t")],
        [],
        2,
        [EBS, GCE_CSI],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "don't count pvcs with different type towards volume limit",
        gce_two("p"),
        [ebs_two("t"), running("r")],
        [],
        2,
        [EBS, GCE_CSI],
        "csinode",
        OK,
    ),
    (
        "should count in-tree volumes if migration is enabled",
        in_tree_one("p"),
        [in_tree_two("t")],
        [],
        2,
        [EBS_IN_TREE, EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    ("nil csi node", inline_ebs("p", "aws-inline1"), [in_tree_two("t")], [], 0, [EBS_IN_TREE, EBS], "", OK),
    (
        "should count unbound in-tree volumes if migration is enabled",
        pending_volume("p"),
        [in_tree_two("t")],
        [],
        2,
        [EBS_IN_TREE, EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "should not limit pod if volume used does not report limits",
        in_tree_one("p"),
        [in_tree_two("t")],
        [],
        2,
        [EBS_IN_TREE, EBS],
        "csinode-with-no-limit",
        OK,
    ),
    (
        "should not count non-migratable in-tree volumes",
        non_migratable_one("p"),
        [ebs_two("t")],
        [],
        2,
        [HOSTPATH, EBS],
        "csinode",
        SKIP,  # upstream: PreFilter passes and Filter finds nothing to count; gpuq skips at PreFilter
    ),
    (
        "should count in-tree inline volumes if migration is enabled",
        inline_ebs("p", "aws-inline1"),
        [in_tree_two("t")],
        [],
        2,
        [EBS_IN_TREE, EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "should count in-tree and csi volumes if migration is enabled (when scheduling in-tree volumes)",
        in_tree_one("p"),
        [ebs_two("t")],
        [],
        2,
        [EBS_IN_TREE, EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "should count in-tree, inline and csi volumes if migration is enabled "
        "(when scheduling in-tree volumes)",
        inline_ebs("p", "aws-inline1"),
        [ebs_two("t"), in_tree_one("o")],
        [],
        3,
        [EBS_IN_TREE, EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "should not count in-tree, inline and csi volumes if migration is enabled "
        "(when scheduling in-tree volumes)",
        inline_ebs("p", f"csi-{EBS}-1"),
        [ebs_two("t"), in_tree_one("o")],
        [],
        3,
        [EBS_IN_TREE, EBS],
        "csinode",
        OK,
    ),
    (
        "should count in-tree and csi volumes if migration is enabled (when scheduling csi volumes)",
        ebs_one("p"),
        [in_tree_two("t")],
        [],
        2,
        [EBS_IN_TREE, EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "ephemeral volume missing",
        ephemeral_pod,
        [],
        [],
        0,
        [EBS],
        "csinode-with-no-limit",
        (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, MISSING),
    ),
    (
        "ephemeral volume not owned",
        ephemeral_pod,
        [],
        [CONFLICTING_CLAIM],
        0,
        [EBS],
        "csinode-with-no-limit",
        (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "PVC test/abc-xyz was not created for pod test/abc (pod is not owner)",
        ),
    ),
    ("ephemeral volume unbound", ephemeral_pod, [], [EPHEMERAL_CLAIM], 0, [EBS], "csinode-with-no-limit", OK),
    (
        "ephemeral doesn't when node volume limit <= pods CSI volume",
        ephemeral_pod,
        [running("r"), ebs_two("t")],
        [EPHEMERAL_CLAIM],
        2,
        [EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "ephemeral doesn't when node volume limit <= pods ephemeral CSI volume",
        ebs_one("p"),
        [running("r"), ephemeral_two],
        [EPHEMERAL_X, EPHEMERAL_Y],
        2,
        [EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume",
        ebs_one("p"),
        [running("r"), ephemeral_pod, ebs_two("t")],
        [EPHEMERAL_CLAIM],
        3,
        [EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
    (
        "persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume",
        ebs_one("p"),
        [running("r"), ephemeral_pod, ebs_two("t")],
        [EPHEMERAL_CLAIM],
        5,
        [EBS],
        "csinode",
        OK,
    ),
    (
        "skip Filter when the pod only uses secrets and configmaps",
        config_and_secret(MakePod("p", "default")),
        [],
        [],
        2,
        [EBS],
        "csinode",
        SKIP,
    ),
    (
        "don't skip Filter when the pod has pvcs",
        config_and_secret(pvcs("p", f"csi-{EBS}-0")),
        [],
        [],
        2,
        [EBS],
        "csinode",
        OK,
    ),
    (
        "don't skip Filter when the pod has ephemeral volumes",
        config_and_secret(MakePod("abc", "test").ephemeral("xyz")),
        [],
        [],
        0,
        [EBS],
        "csinode-with-no-limit",
        (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, MISSING),
    ),
    (
        "don't skip Filter when the pod has inline migratable volumes",
        config_and_secret(inline_ebs("p", "aws-inline1")),
        [in_tree_two("t")],
        [],
        2,
        [EBS_IN_TREE, EBS],
        "csinode",
        UNSCHEDULABLE,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_csi_limits(case: Case) -> None:
    _, pod, existing, claims, max_volumes, drivers, limit_source, expected = case
    scheduler, _ = make_scheduler()
    for obj in [*storage(drivers, limit_source, max_volumes), *claims]:
        scheduler.put_object(obj)
    scheduler.set_node(MakeNode(NODE).alloc(cpu="8", pods="110").info())
    for each in existing:
        scheduler.add_pod(each.copy().node(NODE).info())
    plugin = plugin_of(scheduler, NodeVolumeLimits)
    state = CycleState()
    status = plugin.pre_filter(state, pod.info())
    if not status.is_success:
        assert (status.code, status.message) == expected
        return
    result = plugin.filter(state, pod.info())
    row = scheduler.cluster.row_of[NODE]
    if expected == OK:
        assert result.passed[row]
    else:
        assert not result.passed[row]
        assert (Code.UNSCHEDULABLE, next(m for mask, m in result.reasons() if mask[row])) == expected
        assert result.unresolvable is None  # Unschedulable: preemption may help


def test_used_volumes_follow_pods_claims_and_volumes() -> None:
    """What a node's pods use is recomputed when a pod leaves, when a claim they name is bound, and
    not otherwise: a pending claim counted under its class becomes its bound volume, so a pod of that
    same volume fits a full node; the plugin asks to be retried on the events that can help."""
    scheduler, _ = make_scheduler()
    objects: list[Any] = [
        MakeStorageClass(SC_NAME, EBS, mode="Immediate").obj(),
        MakePVC("a", "default", SC_NAME).obj(),
        MakePV("pv-a").csi(EBS, "vol-a").obj(),
        MakePVC("b", "default").prebound("pv-a").obj(),
        MakeCSINode(NODE).driver(EBS, 1).obj(),
    ]
    for obj in objects:
        scheduler.put_object(obj)
    scheduler.set_node(MakeNode(NODE).alloc(cpu="8", pods="110").info())
    scheduler.add_pod(pvcs("user", "a").node(NODE).info())
    plugin = plugin_of(scheduler, NodeVolumeLimits)
    row = scheduler.cluster.row_of[NODE]

    def fits(pod: MakePod) -> bool:
        state = CycleState()
        assert plugin.pre_filter(state, pod.info()).is_success
        return bool(plugin.filter(state, pod.info()).passed[row])

    assert not fits(pvcs("b-user", "b"))  # claim a counts as a volume of its own: the node is full
    scheduler.put_object(MakePVC("a", "default", SC_NAME).bound("pv-a").obj())
    assert fits(pvcs("b-user", "b"))  # a is now vol-a, the very volume b names
    scheduler.delete_pod("default/user")
    assert fits(pvcs("other", "a")) and plugin.used(row).names == set()
    assert {
        ClusterEvent.CSI_NODE_CHANGED,
        ClusterEvent.POD_DELETED,
        ClusterEvent.PVC_CHANGED,
    } <= plugin.events
