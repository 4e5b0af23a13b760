"""VolumeZone (scheduler/plugins/volume_zone.py), ported from kube-scheduler v1.36.4
``pkg/scheduler/framework/plugins/volumezone/volume_zone_test.go``: TestSingleZone, TestMultiZone and
TestWithBinding, each row naming its upstream case.

Messages that name a missing object are the real listers' (``storageclass.storage.k8s.io "Class_0"
not found``), where upstream's tests use a fake lister that says ``storageclasses``. One upstream row
cannot happen here and is ported with gpuq's answer: a StorageClass without ``volumeBindingMode``
(upstream: ``VolumeBindingMode not set for StorageClass``) is ``Immediate``, as every apiserver
defaults it, so its unbound claim is ``PersistentVolume had no name``.
"""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model.placement.volumes.zones import ERR_REASON_CONFLICT
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.status import Code
from gpuq_k8s.scheduler.plugins.volume_zone import VolumeZone
from tests.testing.builders import MakeNode, MakePod, MakePV, MakePVC, MakeStorageClass
from tests.testing.scheduler import make_scheduler, plugin_of

BETA_ZONE, BETA_REGION = "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region"
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def pv(name: str, **labels: str) -> Obj:
    return MakePV(name).labels(dict(labels)).obj()


def pvc(name: str, volume: str = "", cls: str | None = None) -> Obj:
    claim = MakePVC(name, "default", cls)
    if volume:
        claim.prebound(volume)
    return claim.obj()


SINGLE_ZONE = [
    pv("Vol_1", **{BETA_ZONE: "us-west1-a"}),
    pv("Vol_2", **{BETA_REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_3", **{BETA_REGION: "us-west1"}),
    pv("Vol_Stable_1", **{ZONE: "us-west1-a"}),
    pv("Vol_Stable_2", **{REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_Stable_3", **{ZONE: "us-west1-a", REGION: "us-west1-a"}),
    *(pvc(f"PVC_{i}", f"Vol_{i}") for i in (1, 2, 3)),
    pvc("PVC_4", "Vol_not_exist"),
    *(pvc(f"PVC_Stable_{i}", f"Vol_Stable_{i}") for i in (1, 2, 3)),
]
MULTI_ZONE = [
    pv("Vol_1", **{BETA_ZONE: "us-west1-a"}),
    pv("Vol_2", **{BETA_ZONE: "us-west1-b", "uselessLabel": "none"}),
    pv("Vol_3", **{BETA_ZONE: "us-west1-c__us-west1-a"}),
    pv("Vol_Stable_1", **{ZONE: "us-west1-a"}),
    pv("Vol_Stable_2", **{ZONE: "us-west1-c__us-west1-a"}),
    *(pvc(f"PVC_{i}", f"Vol_{i}") for i in (1, 2, 3)),
    pvc("PVC_4", "Vol_not_exist"),
    *(pvc(f"PVC_Stable_{i}", f"Vol_Stable_{i}") for i in (1, 2)),
]
WITH_BINDING = [
    MakeStorageClass("Class_Immediate", "", mode="Immediate").obj(),
    MakeStorageClass("Class_Wait", "").obj(),
    pv("Vol_1", **{BETA_ZONE: "us-west1-a"}),
    pvc("PVC_1", "Vol_1"),
    pvc("PVC_NoSC", cls="Class_0"),
    pvc("PVC_EmptySC"),
    pvc("PVC_WaitSC", cls="Class_Wait"),
    pvc("PVC_ImmediateSC", cls="Class_Immediate"),
]
TEST_NODE = {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}

# (upstream test/case, objects, claim (None: no volume), node labels, PreFilter (code, message), Filter)
CASES: list[tuple[str, list[Obj], str | None, dict[str, str], tuple[Code, str] | None, bool]] = [
    (
        "TestSingleZone/pod without volume",
        SINGLE_ZONE,
        None,
        {BETA_ZONE: "us-west1-a"},
        (Code.SKIP, ""),
        True,
    ),
    ("TestSingleZone/node without labels", SINGLE_ZONE, "PVC_1", {}, None, True),
    (
        "TestSingleZone/beta zone label matched",
        SINGLE_ZONE,
        "PVC_1",
        {BETA_ZONE: "us-west1-a", "uselessLabel": "none"},
        None,
        True,
    ),
    (
        "TestSingleZone/beta region label matched",
        SINGLE_ZONE,
        "PVC_2",
        {BETA_REGION: "us-west1", "uselessLabel": "none"},
        None,
        True,
    ),
    (
        "TestSingleZone/beta region label doesn't match",
        SINGLE_ZONE,
        "PVC_2",
        {BETA_REGION: "no_us-west1", "uselessLabel": "none"},
        None,
        False,
    ),
    (
        "TestSingleZone/beta zone label doesn't match",
        SINGLE_ZONE,
        "PVC_1",
        {BETA_ZONE: "no_us-west1-a", "uselessLabel": "none"},
        None,
        False,
    ),
    (
        "TestSingleZone/zone label matched",
        SINGLE_ZONE,
        "PVC_Stable_1",
        {ZONE: "us-west1-a", "uselessLabel": "none"},
        None,
        True,
    ),
    (
        "TestSingleZone/region label matched",
        SINGLE_ZONE,
        "PVC_Stable_2",
        {REGION: "us-west1", "uselessLabel": "none"},
        None,
        True,
    ),
    (
        "TestSingleZone/region label doesn't match",
        SINGLE_ZONE,
        "PVC_Stable_2",
        {REGION: "no_us-west1", "uselessLabel": "none"},
        None,
        False,
    ),
    (
        "TestSingleZone/zone label doesn't match",
        SINGLE_ZONE,
        "PVC_Stable_1",
        {ZONE: "no_us-west1-a", "uselessLabel": "none"},
        None,
        False,
    ),
    (
        "TestSingleZone/pv with zone and region, node with only zone",
        SINGLE_ZONE,
        "PVC_Stable_3",
        {ZONE: "us-west1-a"},
        None,
        False,
    ),
    (
        "TestSingleZone/pv with zone,node with beta zone",
        SINGLE_ZONE,
        "PVC_Stable_1",
        {BETA_ZONE: "us-west1-a"},
        None,
        False,
    ),
    (
        "TestSingleZone/pv with beta label,node with ga label, matched",
        SINGLE_ZONE,
        "PVC_1",
        {ZONE: "us-west1-a"},
        None,
        True,
    ),
    (
        "TestSingleZone/pv with beta label,node with ga label, don't match",
        SINGLE_ZONE,
        "PVC_1",
        {ZONE: "us-west1-b"},
        None,
        False,
    ),
    ("TestMultiZone/node without labels", MULTI_ZONE, "PVC_3", {}, None, True),
    (
        "TestMultiZone/beta zone label matched",
        MULTI_ZONE,
        "PVC_3",
        {BETA_ZONE: "us-west1-a", "uselessLabel": "none"},
        None,
        True,
    ),
    (
        "TestMultiZone/beta zone label doesn't match",
        MULTI_ZONE,
        "PVC_1",
        {BETA_ZONE: "us-west1-b", "uselessLabel": "none"},
        None,
        False,
    ),
    (
        "TestMultiZone/zone label matched",
        MULTI_ZONE,
        "PVC_Stable_2",
        {ZONE: "us-west1-a", "uselessLabel": "none"},
        None,
        True,
    ),
    (
        "TestMultiZone/zone label doesn't match",
        MULTI_ZONE,
        "PVC_Stable_1",
        {ZONE: "us-west1-b", "uselessLabel": "none"},
        None,
        False,
    ),
    ("TestWithBinding/label zone failure domain matched", WITH_BINDING, "PVC_1", TEST_NODE, None, True),
    (
        "TestWithBinding/unbound volume empty storage class",
        WITH_BINDING,
        "PVC_EmptySC",
        TEST_NODE,
        (UNRESOLVABLE, "PersistentVolumeClaim had no pv name and storageClass name"),
        True,
    ),
    (
        "TestWithBinding/unbound volume no storage class",
        WITH_BINDING,
        "PVC_NoSC",
        TEST_NODE,
        (UNRESOLVABLE, 'storageclass.storage.k8s.io "Class_0" not found'),
        True,
    ),
    (
        "TestWithBinding/unbound volume immediate binding mode",
        WITH_BINDING,
        "PVC_ImmediateSC",
        TEST_NODE,
        (UNRESOLVABLE, "PersistentVolume had no name"),
        True,
    ),
    (
        "TestWithBinding/unbound volume wait binding mode",
        WITH_BINDING,
        "PVC_WaitSC",
        TEST_NODE,
        (Code.SKIP, ""),
        True,
    ),
]


@pytest.mark.parametrize(
    ("objects", "claim", "labels", "pre_filter", "fits"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_volume_zone(
    objects: list[Obj],
    claim: str | None,
    labels: dict[str, str],
    pre_filter: tuple[Code, str] | None,
    fits: bool,
) -> None:
    scheduler, _ = make_scheduler()
    for obj in objects:
        scheduler.put_object(obj)
    scheduler.set_node(MakeNode("host1").labels(labels).info())
    plugin = plugin_of(scheduler, VolumeZone)
    pod = MakePod("pod_1", "default")
    if claim is not None:
        pod.pvc(claim)
    state = CycleState()
    status = plugin.pre_filter(state, pod.info())
    if pre_filter is not None:
        assert (status.code, status.message) == pre_filter
        return
    assert status.is_success
    result = plugin.filter(state, pod.info())
    row = scheduler.cluster.row_of["host1"]
    assert bool(result.passed[row]) is fits
    if not fits:
        assert [message for mask, message in result.reasons() if mask[row]] == [ERR_REASON_CONFLICT]
        assert result.unresolvable is not None and result.unresolvable[row]


def test_volume_zone_filters_every_row_at_once() -> None:
    """One pass over many nodes: only the nodes of the volume's zones (beta or GA label) take the pod;
    a node without any topology label takes it too."""
    scheduler, _ = make_scheduler()
    for obj in (pv("data", **{ZONE: "z1__z2"}), pvc("data", "data")):
        scheduler.put_object(obj)
    nodes = {
        "a": {ZONE: "z1"},
        "b": {BETA_ZONE: "z2"},
        "c": {ZONE: "z3"},
        "d": {},
        "e": {BETA_ZONE: "z3", ZONE: "z1"},
    }
    for name, labels in nodes.items():
        scheduler.set_node(MakeNode(name).labels(labels).info())
    plugin = plugin_of(scheduler, VolumeZone)
    pod = MakePod("p", "default").pvc("data").info()
    state = CycleState()
    assert plugin.pre_filter(state, pod).is_success
    passed = plugin.filter(state, pod).passed
    cluster = scheduler.cluster
    assert {cluster.names[r] for r in cluster.live_rows() if passed[r]} == {"a", "d", "e"}
