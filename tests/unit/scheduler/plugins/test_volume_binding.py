"""VolumeBinding (scheduler/plugins/volume_binding.py) over every node row, ported from kube-scheduler
v1.36.4 ``pkg/scheduler/framework/plugins/volumebinding/volume_binding_test.go`` TestVolumeBinding
(PreFilter and Filter statuses; each row names its upstream case), and held to the per-node rule.

Upstream's score expectations are not ported: VolumeBinding scores only under the alpha
StorageCapacityScoring gate (off by default, and gpuq does not read CSIStorageCapacity). Its cases'
Filter outcomes are ported all the same: with capacity tracking off, a provisioning class passes
every node, as upstream's capacities did in those cases.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np
import pytest

from gpuq_k8s.common.model.placement.volumes.binder import (
    ERR_BIND_CONFLICT,
    ERR_NODE_CONFLICT,
    ERR_PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    find_pod_volumes,
    sort_claims,
)
from gpuq_k8s.common.model.placement.volumes.claim_lookup import binding_claims
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.status import Code, Status
from gpuq_k8s.scheduler.plugins.volume_binding import VolumeBinding
from tests.testing.builders import MakeNode, MakePod, MakePV, MakePVC, MakeStorageClass
from tests.testing.scheduler import make_scheduler, plugin_of

HOSTNAME = "kubernetes.io/hostname"
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
NODE_KEY = "nodeKey"
CLASSES = [
    MakeStorageClass("immediate-sc", "", mode="Immediate").obj(),
    MakeStorageClass("wait-sc", "").obj(),
    MakeStorageClass("wait-hdd-sc", "").obj(),
    MakeStorageClass("wait-sc-with-storage-capacity", "driver-with-storage-capacity").obj(),
]


def node(name: str, **labels: str) -> MakeNode:
    """``makeNode``: labelled with its hostname."""
    return MakeNode(name).alloc(cpu="8", memory="8Gi", pods="110").label(HOSTNAME, name).labels(dict(labels))


def claim(name: str, cls: str) -> MakePVC:
    """``makePVC``: in ``default``, no access modes."""
    return MakePVC(name, "default", cls).access_modes()


def volume(name: str, cls: str) -> MakePV:
    """``makePV``: no access modes."""
    return MakePV(name, cls).access_modes()


def scheduler_with(nodes: Sequence[MakeNode], objects: Sequence[Obj]) -> tuple[Scheduler, VolumeBinding]:
    scheduler, _ = make_scheduler()
    for obj in [*CLASSES, *objects]:
        scheduler.put_object(obj)
    for each in nodes:
        scheduler.set_node(each.info())
    return scheduler, plugin_of(scheduler, VolumeBinding)


def run(
    scheduler: Scheduler, plugin: VolumeBinding, pod: MakePod
) -> tuple[Status, dict[str, tuple[str, ...]]]:
    """PreFilter, then (when it succeeds) Filter: each node's reasons (none: it passes)."""
    state = CycleState()
    info = pod.info()
    status = plugin.pre_filter(state, info)
    if not status.is_success:
        return status, {}
    result = plugin.filter(state, info)
    cluster = scheduler.cluster
    out: dict[str, tuple[str, ...]] = {}
    reasons = result.reasons()
    for row in cluster.live_rows():
        if result.passed[row]:
            out[cluster.names[row]] = ()
        else:
            out[cluster.names[row]] = tuple(message for mask, message in reasons if mask[row])
            assert (
                result.unresolvable is not None and result.unresolvable[row]
            )  # UnschedulableAndUnresolvable
    return status, out


def local_pvs(cls: str, per_node: Mapping[str, str], count: int = 2, first: int = 0) -> list[Obj]:
    out: list[Obj] = []
    for node_name, capacity in per_node.items():
        for i in range(first, first + count):
            out.append(
                volume(f"pv-{node_name[-1]}-{i}", cls)
                .capacity(capacity)
                .node_affinity({HOSTNAME: [node_name]})
                .obj()
            )
    return out


def zonal_pvs() -> list[Obj]:
    return [
        volume(f"pv-{zone}-{i}", "wait-sc")
        .capacity(capacity)
        .node_affinity({REGION: [f"region-{zone}"], ZONE: [f"zone-{zone}"]})
        .obj()
        for zone, capacity in (("a", "200Gi"), ("b", "100Gi"))
        for i in range(2)
    ]


ZONAL_NODES = [
    node(f"zone-{z}-node-{n}", **{REGION: f"region-{z}", ZONE: f"zone-{z}"}) for z in "abc" for n in "ab"
]
A, B, C = node("node-a"), node("node-b"), node("node-c")
BIND: Final = (ERR_BIND_CONFLICT,)

# (upstream case, pod, nodes, objects, PreFilter (code, message) or None, Filter: node -> reasons)
CASES: list[
    tuple[str, MakePod, list[MakeNode], list[Obj], tuple[Code, str] | None, dict[str, tuple[str, ...]]]
]
CASES = [
    ("pod has not pvcs", MakePod("pod-a", "default"), [A], [], (Code.SKIP, ""), {}),
    (
        "all bound",
        MakePod("pod-a", "default").pvc("pvc-a"),
        [A],
        [claim("pvc-a", "wait-sc").bound("pv-a").obj(), volume("pv-a", "wait-sc").obj()],
        None,
        {"node-a": ()},
    ),
    (
        "PVC does not exist",
        MakePod("pod-a", "default").pvc("pvc-a"),
        [A],
        [],
        (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 'persistentvolumeclaim "pvc-a" not found'),
        {},
    ),
    (
        "Part of PVCs do not exist",
        MakePod("pod-a", "default").pvc("pvc-a").pvc("pvc-b"),
        [A],
        [claim("pvc-a", "wait-sc").bound("pv-a").obj()],
        (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 'persistentvolumeclaim "pvc-b" not found'),
        {},
    ),
    (
        "immediate claims not bound",
        MakePod("pod-a", "default").pvc("pvc-a"),
        [A],
        [claim("pvc-a", "immediate-sc").obj()],
        (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, UNBOUND_IMMEDIATE),
        {},
    ),
    (
        "unbound claims no matches",
        MakePod("pod-a", "default").pvc("pvc-a"),
        [A],
        [claim("pvc-a", "wait-sc").obj()],
        None,
        {"node-a": BIND},
    ),
    (
        "bound and unbound unsatisfied",
        MakePod("pod-a", "default").pvc("pvc-a").pvc("pvc-b"),
        [node("node-a", foo="barbar")],
        [
            claim("pvc-a", "wait-sc").bound("pv-a").obj(),
            claim("pvc-b", "wait-sc").obj(),
            volume("pv-a", "wait-sc").node_affinity({"foo": ["bar"]}).obj(),
        ],
        None,
        {"node-a": (ERR_NODE_CONFLICT, ERR_BIND_CONFLICT)},
    ),
    (
        "pv not found",
        MakePod("pod-a", "default").pvc("pvc-a"),
        [A],
        [claim("pvc-a", "wait-sc").bound("pv-a").obj()],
        None,
        {"node-a": (ERR_PV_NOT_EXIST,)},
    ),
    (
        "pv not found claim lost",
        MakePod("pod-a", "default").pvc("pvc-a"),
        [A],
        [claim("pvc-a", "wait-sc").bound("pv-a").phase("Lost").obj()],
        (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            'persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "pv-a"',
        ),
        {},
    ),
    (
        "local volumes with close capacity are preferred",
        MakePod("pod-a", "default").pvc("pvc-a"),
        [A, B, C],
        [
            claim("pvc-a", "wait-sc").request("50Gi").obj(),
            *local_pvs("wait-sc", {"node-a": "200Gi", "node-b": "100Gi"}),
        ],
        None,
        {"node-a": (), "node-b": (), "node-c": BIND},
    ),
    (
        "local volumes with close capacity are preferred (multiple pvcs)",
        MakePod("pod-a", "default").pvc("pvc-0").pvc("pvc-1"),
        [A, B, C],
        [
            claim("pvc-0", "wait-sc").request("50Gi").obj(),
            claim("pvc-1", "wait-hdd-sc").request("100Gi").obj(),
            *local_pvs("wait-sc", {"node-a": "200Gi", "node-b": "100Gi"}),
            *local_pvs("wait-hdd-sc", {"node-a": "200Gi", "node-b": "100Gi"}, first=2),
        ],
        None,
        {"node-a": (), "node-b": (), "node-c": BIND},
    ),
    (
        "zonal volumes with close capacity are preferred",
        MakePod("pod-a", "default").pvc("pvc-a"),
        ZONAL_NODES,
        [claim("pvc-a", "wait-sc").request("50Gi").obj(), *zonal_pvs()],
        None,
        {
            "zone-a-node-a": (),
            "zone-a-node-b": (),
            "zone-b-node-a": (),
            "zone-b-node-b": (),
            "zone-c-node-a": BIND,
            "zone-c-node-b": BIND,
        },
    ),
    (
        "storage capacity score",
        MakePod("pod-a", "default").pvc("pvc-dynamic"),
        [node(n, **{NODE_KEY: n}) for n in ("node-a", "node-b", "node-c")],
        [claim("pvc-dynamic", "wait-sc-with-storage-capacity").request("10Gi").obj()],
        None,
        {"node-a": (), "node-b": (), "node-c": ()},
    ),
    (
        "dynamic provisioning with multiple PVCs of the same StorageClass",
        MakePod("pod-a", "default").pvc("pvc-dynamic-0").pvc("pvc-dynamic-1"),
        [node("node-a", **{NODE_KEY: "node-a"})],
        [
            claim("pvc-dynamic-0", "wait-sc-with-storage-capacity").request("50Gi").obj(),
            claim("pvc-dynamic-1", "wait-sc-with-storage-capacity").request("50Gi").obj(),
        ],
        None,
        {"node-a": ()},
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "objects", "pre_filter", "filtered"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_volume_binding(
    pod: MakePod,
    nodes: list[MakeNode],
    objects: list[Obj],
    pre_filter: tuple[Code, str] | None,
    filtered: dict[str, tuple[str, ...]],
) -> None:
    scheduler, plugin = scheduler_with(nodes, objects)
    status, got = run(scheduler, plugin, pod)
    if pre_filter is not None:
        assert (status.code, status.message) == pre_filter
        return
    assert status.is_success
    assert got == filtered


# -- every row is the per-node rule ------------------------------------------------------------------


def _random_scenario(rng: random.Random) -> tuple[list[MakeNode], list[Obj], MakePod]:
    zones = ["z1", "z2", "z3"]
    nodes = [node(f"n{i}", **{ZONE: rng.choice(zones), "disk": rng.choice(["ssd", "hdd"])}) for i in range(8)]
    objects: list[Obj] = [
        MakeStorageClass("local", "").obj(),
        MakeStorageClass("dyn", "csi.example.com").allowed_topologies({ZONE: rng.sample(zones, 2)}).obj(),
    ]
    for i in range(rng.randint(0, 10)):
        pv = MakePV(f"pv{i}", rng.choice(["local", "local", "dyn"])).capacity(
            f"{rng.choice([1, 5, 10, 20])}Gi"
        )
        choice = rng.random()
        if choice < 0.4:
            pv.node_affinity({HOSTNAME: [f"n{rng.randrange(8)}"]})
        elif choice < 0.7:
            pv.node_affinity({ZONE: [rng.choice(zones)], "disk": [rng.choice(["ssd", "hdd"])]})
        if rng.random() < 0.2:
            pv.phase("Released")
        if rng.random() < 0.15:
            pv.claim_ref("default", f"c{rng.randrange(3)}")
        if rng.random() < 0.2:
            pv.label("tier", "gold")
        objects.append(pv.obj())
    pod = MakePod("p", "default")
    for i in range(rng.randint(1, 3)):
        pvc = MakePVC(f"c{i}", "default", rng.choice(["local", "dyn"])).request(
            f"{rng.choice([1, 5, 10, 15])}Gi"
        )
        roll = rng.random()
        if roll < 0.15:
            pvc.bound(f"pv{rng.randrange(10)}")
        elif roll < 0.25:
            pvc.selected_node(f"n{rng.randrange(9)}")
        if rng.random() < 0.2:
            pvc.spec(selector={"matchLabels": {"tier": "gold"}})
        objects.append(pvc.obj())
        pod.pvc(f"c{i}", f"v{i}")
    return nodes, objects, pod


@pytest.mark.parametrize("seed", range(60))
def test_filter_rows_equal_the_per_node_rule(seed: int) -> None:
    """Random pods, claims, volumes and classes: each row of the vectorised Filter (and its reasons)
    is what ``find_pod_volumes`` answers for that node alone."""
    rng = random.Random(seed)
    nodes, objects, pod = _random_scenario(rng)
    scheduler, plugin = scheduler_with(nodes, objects)
    status, got = run(scheduler, plugin, pod)
    storage = plugin.storage
    found = binding_claims(pod.info(), storage)
    if found.problem or sort_claims(found.claims, storage).immediate:
        assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        return
    claims = sort_claims(found.claims, storage)
    for each in nodes:
        info = each.info()
        expected = find_pod_volumes(claims, info.name, info.labels, storage).reasons
        assert sorted(got[info.name]) == sorted(expected), info.name


def test_node_affinity_masks_follow_node_labels() -> None:
    """A bound volume's node affinity is evaluated against the nodes' current labels: relabelling a
    node changes its row (the cached masks end with the node generation)."""
    objects = [
        claim("pvc-a", "wait-sc").bound("pv-a").obj(),
        volume("pv-a", "wait-sc").node_affinity({ZONE: ["z1"]}).obj(),
    ]
    scheduler, plugin = scheduler_with([node("n1", **{ZONE: "z1"}), node("n2", **{ZONE: "z2"})], objects)
    pod = MakePod("p", "default").pvc("pvc-a")
    assert run(scheduler, plugin, pod)[1] == {"n1": (), "n2": (ERR_NODE_CONFLICT,)}
    scheduler.set_node(node("n2", **{ZONE: "z1"}).info())
    assert run(scheduler, plugin, pod)[1] == {"n1": (), "n2": ()}
    assert np.count_nonzero(scheduler.cluster.alive) == 2
