"""VolumeBinding's binder, ported from kube-scheduler v1.36.4
``pkg/scheduler/framework/plugins/volumebinding/binder_test.go`` (the scenario named in each row).

The upstream fixtures are rebuilt here as they are there: claims in ``testns`` with UID ``pvc-uid``
(``makeTestPVC``), volumes with a ``nodeKey`` node affinity (``makeTestPV``), the four classes of
``newTestBinder`` and ``node1`` labelled ``nodeKey=node1``. Scenarios upstream runs three times, with
no CSIDriver and with a CSIDriver with or without storage capacity tracking, are run once: gpuq does
not check CSIStorageCapacity (design.md "Placement rules"), which is upstream's run without a
CSIDriver. Bindings of a node that fails are not compared: nothing is assumed for such a node.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.placement.volumes.binder import (
    ERR_BIND_CONFLICT,
    ERR_NODE_CONFLICT,
    ERR_PV_NOT_EXIST,
    Binding,
    NodeVolumes,
    bindings_ready,
    find_pod_volumes,
    sort_claims,
    writes,
)
from gpuq_k8s.common.model.placement.volumes.claim_lookup import binding_claims
from gpuq_k8s.common.model.placement.volumes.claims import parse_claim
from gpuq_k8s.common.model.placement.volumes.ledger import VolumeLedger
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import parse_volume
from gpuq_k8s.common.model.placement.volumes.storage import Catalog
from gpuq_k8s.common.model.placement.volumes.storage_classes import parse_storage_class
from gpuq_k8s.common.model.prebind import DONE, WAIT, State
from gpuq_k8s.common.model.wire import Obj
from tests.testing.builders import MakePod, MakePV, MakePVC, MakeStorageClass

PROVISIONER = "test-provisioner"
NODE_KEY = "nodeKey"
NODE1 = {"kubernetes.io/hostname": "node1", NODE_KEY: "node1"}
WAIT_CLASS, IMMEDIATE_CLASS = "waitClass", "immediateClass"
PROVISIONING_CLASS, TOPOLOGY_MISMATCH_CLASS = "waitClassWithProvisioner", "topoMismatchClass"
CLASSES = [
    parse_storage_class(c)
    for c in (
        MakeStorageClass(PROVISIONING_CLASS, PROVISIONER)
        .allowed_topologies({NODE_KEY: ["node1", "reference-value"]})
        .obj(),
        MakeStorageClass(IMMEDIATE_CLASS, "", mode="Immediate").obj(),
        MakeStorageClass(WAIT_CLASS).obj(),
        MakeStorageClass(TOPOLOGY_MISMATCH_CLASS, PROVISIONER)
        .allowed_topologies({NODE_KEY: ["reference-value"]})
        .obj(),
    )
]


def pvc(name: str, size: str, state: str, volume: str = "", *, cls: str = WAIT_CLASS, node: str = "") -> Obj:
    """``makeTestPVC``: unbound, prebound (volumeName only), bound (and bind-completed) or
    selected-node."""
    claim = MakePVC(name, "testns", cls).uid("pvc-uid").resource_version("1").request(size)
    if state == "bound":
        claim.bound(volume)
    elif state == "prebound":
        claim.prebound(volume)
    elif state == "selected":
        claim.selected_node(node)
    return claim.obj()


def pv(name: str, node: str, capacity: str, bound_to: Obj | None = None, cls: str = WAIT_CLASS) -> Obj:
    """``makeTestPV``: Available, a ``nodeKey In [node]`` affinity, pre-bound to ``bound_to``."""
    volume = MakePV(name, cls).capacity(capacity).resource_version("1").spec(volumeMode="Filesystem")
    if node:
        volume.node_affinity({NODE_KEY: [node]})
    if bound_to is not None:
        meta = bound_to["metadata"]
        volume.claim_ref(meta["namespace"], meta["name"], meta["uid"])
        volume.annotation("pv.kubernetes.io/bound-by-controller", "yes")
    return volume.obj()


def with_annotations(obj: Obj, annotations: dict[str, str] | None) -> Obj:
    meta = dict(obj["metadata"])
    if annotations is None:
        meta.pop("annotations", None)
    else:
        meta["annotations"] = annotations
    return {**obj, "metadata": meta}


unbound_pvc = pvc("unbound-pvc", "1G", "unbound")
unbound_pvc2 = pvc("unbound-pvc2", "5G", "unbound")
prebound_pvc = pvc("prebound-pvc", "1G", "prebound", "pv-node1a")
prebound_pvc_node1a = pvc("unbound-pvc", "1G", "prebound", "pv-node1a")
bound_pvc = pvc("bound-pvc", "1G", "bound", "pv-bound")
bound_pvc_node1a = pvc("unbound-pvc", "1G", "bound", "pv-node1a")
immediate_unbound_pvc = pvc("immediate-unbound-pvc", "1G", "unbound", cls=IMMEDIATE_CLASS)
immediate_bound_pvc = pvc("immediate-bound-pvc", "1G", "bound", "pv-bound-immediate", cls=IMMEDIATE_CLASS)
provisioned_pvc = pvc("provisioned-pvc", "1Gi", "unbound", cls=PROVISIONING_CLASS)
provisioned_pvc_bound = pvc("provisioned-pvc", "1Gi", "bound", "pv-bound", cls=PROVISIONING_CLASS)
no_provisioner_pvc = pvc("no-provisioner-pvc", "1Gi", "unbound")
topology_mismatch_pvc = pvc("topo-mismatch-pvc", "1Gi", "unbound", cls=TOPOLOGY_MISMATCH_CLASS)
selected_node_pvc = pvc("provisioned-pvc", "1Gi", "selected", cls=PROVISIONING_CLASS, node="node1")

pv_node1a = pv("pv-node1a", "node1", "5G")
pv_node1b = pv("pv-node1b", "node1", "10G")
pv_node2 = pv("pv-node2", "node2", "1G")
pv_bound = pv("pv-bound", "node1", "1G", bound_pvc)
pv_node1a_bound = pv("pv-node1a", "node1", "5G", unbound_pvc)
pv_node1b_bound = pv("pv-node1b", "node1", "10G", unbound_pvc2)
pv_bound_immediate = pv("pv-bound-immediate", "node1", "1G", immediate_bound_pvc, IMMEDIATE_CLASS)
pv_bound_immediate_node2 = pv("pv-bound-immediate", "node2", "1G", immediate_bound_pvc, IMMEDIATE_CLASS)

generic_pod = MakePod("test-pod", "testns").ephemeral("test-volume")
correct_generic_pvc = (
    MakePVC("test-pod-test-volume", "testns", IMMEDIATE_CLASS)
    .uid("pvc-uid")
    .request("1G")
    .bound("pv-bound")
    .owner("Pod", "test-pod", "")
    .obj()
)
conflicting_generic_pvc = (
    MakePVC("test-pod-test-volume", "testns", IMMEDIATE_CLASS).request("1G").bound("pv-bound").obj()
)
pv_bound_generic = pv("pv-bound", "node1", "1G", correct_generic_pvc)


def pod_with(claims: list[Obj]) -> MakePod:
    pod = MakePod("test-pod", "testns")
    for i, claim in enumerate(claims):
        pod.pvc(claim["metadata"]["name"], f"vol{i}")
    return pod


def find(pod: MakePod, claims: list[Obj], volumes: list[Obj]) -> NodeVolumes | str:
    """``findPodVolumes`` on node1: the node's answer, or "error" when upstream returns an error."""
    catalog = Catalog.of([parse_claim(c) for c in claims], [parse_volume(v) for v in volumes], CLASSES)
    found = binding_claims(pod.info(), catalog)
    if found.problem:
        return "error"
    claims_sorted = sort_claims(found.claims, catalog)
    if claims_sorted.immediate:
        return "error"
    return find_pod_volumes(claims_sorted, "node1", NODE1, catalog)


def names(volumes: NodeVolumes) -> tuple[list[tuple[str, str]], list[str]]:
    bindings = [(b.claim.name, b.volume.name) for b in volumes.bindings]
    return bindings, [c.name for c in volumes.provisions]


# (scenario, pod, claims in the cache, volumes, outcome): "error", or (reasons, bindings, provisions)
WITHOUT_PROVISIONING: list[tuple[str, MakePod, list[Obj], list[Obj], Any]] = [
    ("no-volumes", MakePod("test-pod", "testns"), [], [], ((), [], [])),
    ("no-pvcs", MakePod("test-pod", "testns").volume({"name": "e", "emptyDir": {}}), [], [], ((), [], [])),
    ("pvc-not-found", pod_with([bound_pvc]), [], [], "error"),
    ("bound-pvc", pod_with([bound_pvc]), [bound_pvc], [pv_bound], ((), [], [])),
    ("bound-pvc,pv-not-exists", pod_with([bound_pvc]), [bound_pvc], [], ((ERR_PV_NOT_EXIST,), [], [])),
    ("prebound-pvc", pod_with([prebound_pvc]), [prebound_pvc], [pv_node1a_bound], "error"),
    (
        "unbound-pvc,pv-same-node",
        pod_with([unbound_pvc]),
        [unbound_pvc],
        [pv_node2, pv_node1a, pv_node1b],
        ((), [("unbound-pvc", "pv-node1a")], []),
    ),
    (
        "unbound-pvc,pv-different-node",
        pod_with([unbound_pvc]),
        [unbound_pvc],
        [pv_node2],
        ((ERR_BIND_CONFLICT,), [], []),
    ),
    (
        "two-unbound-pvcs",
        pod_with([unbound_pvc, unbound_pvc2]),
        [unbound_pvc, unbound_pvc2],
        [pv_node1a, pv_node1b],
        ((), [("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")], []),
    ),
    (
        "two-unbound-pvcs,order-by-size",
        pod_with([unbound_pvc2, unbound_pvc]),
        [unbound_pvc2, unbound_pvc],
        [pv_node1a, pv_node1b],
        ((), [("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")], []),
    ),
    (
        "two-unbound-pvcs,partial-match",
        pod_with([unbound_pvc, unbound_pvc2]),
        [unbound_pvc, unbound_pvc2],
        [pv_node1a],
        ((ERR_BIND_CONFLICT,), [], []),
    ),
    (
        "one-bound,one-unbound",
        pod_with([unbound_pvc, bound_pvc]),
        [unbound_pvc, bound_pvc],
        [pv_bound, pv_node1a],
        ((), [("unbound-pvc", "pv-node1a")], []),
    ),
    (
        "one-bound,one-unbound,no-match",
        pod_with([unbound_pvc, bound_pvc]),
        [unbound_pvc, bound_pvc],
        [pv_bound, pv_node2],
        ((ERR_BIND_CONFLICT,), [], []),
    ),
    (
        "one-prebound,one-unbound",
        pod_with([unbound_pvc, prebound_pvc]),
        [unbound_pvc, prebound_pvc],
        [pv_node1a, pv_node1b],
        "error",
    ),
    (
        "immediate-bound-pvc",
        pod_with([immediate_bound_pvc]),
        [immediate_bound_pvc],
        [pv_bound_immediate],
        ((), [], []),
    ),
    (
        "immediate-bound-pvc-wrong-node",
        pod_with([immediate_bound_pvc]),
        [immediate_bound_pvc],
        [pv_bound_immediate_node2],
        ((ERR_NODE_CONFLICT,), [], []),
    ),
    ("immediate-unbound-pvc", pod_with([immediate_unbound_pvc]), [immediate_unbound_pvc], [], "error"),
    (
        "immediate-unbound-pvc,delayed-mode-bound",
        pod_with([immediate_unbound_pvc, bound_pvc]),
        [immediate_unbound_pvc, bound_pvc],
        [pv_bound],
        "error",
    ),
    (
        "immediate-unbound-pvc,delayed-mode-unbound",
        pod_with([immediate_unbound_pvc, unbound_pvc]),
        [immediate_unbound_pvc, unbound_pvc],
        [],
        "error",
    ),
    ("generic-ephemeral,no-pvc", MakePod("test-pod", "testns").ephemeral("no-such-pvc"), [], [], "error"),
    ("generic-ephemeral,with-pvc", generic_pod, [correct_generic_pvc], [pv_bound_generic], ((), [], [])),
    ("generic-ephemeral,wrong-pvc", generic_pod, [conflicting_generic_pvc], [pv_bound_generic], "error"),
]

WITH_PROVISIONING: list[tuple[str, MakePod, list[Obj], list[Obj], Any]] = [
    ("one-provisioned", pod_with([provisioned_pvc]), [provisioned_pvc], [], ((), [], ["provisioned-pvc"])),
    (
        "two-unbound-pvcs,one-matched,one-provisioned",
        pod_with([unbound_pvc, provisioned_pvc]),
        [unbound_pvc, provisioned_pvc],
        [pv_node1a],
        ((), [("unbound-pvc", "pv-node1a")], ["provisioned-pvc"]),
    ),
    (
        "one-bound,one-provisioned",
        pod_with([bound_pvc, provisioned_pvc]),
        [bound_pvc, provisioned_pvc],
        [pv_bound],
        ((), [], ["provisioned-pvc"]),
    ),
    (
        "one-binding,one-selected-node",
        pod_with([bound_pvc, selected_node_pvc]),
        [bound_pvc, selected_node_pvc],
        [pv_bound],
        ((), [], ["provisioned-pvc"]),
    ),
    ("immediate-unbound-pvc", pod_with([immediate_unbound_pvc]), [immediate_unbound_pvc], [], "error"),
    (
        "one-immediate-bound,one-provisioned",
        pod_with([immediate_bound_pvc, provisioned_pvc]),
        [immediate_bound_pvc, provisioned_pvc],
        [pv_bound_immediate],
        ((), [], ["provisioned-pvc"]),
    ),
    (
        "invalid-provisioner",
        pod_with([no_provisioner_pvc]),
        [no_provisioner_pvc],
        [],
        ((ERR_BIND_CONFLICT,), [], []),
    ),
    (
        "volume-topology-unsatisfied",
        pod_with([topology_mismatch_pvc]),
        [topology_mismatch_pvc],
        [],
        ((ERR_BIND_CONFLICT,), [], []),
    ),
]


@pytest.mark.parametrize(
    ("pod", "claims", "volumes", "expected"),
    [row[1:] for row in WITHOUT_PROVISIONING + WITH_PROVISIONING],
    ids=[f"WithoutProvisioning/{r[0]}" for r in WITHOUT_PROVISIONING]
    + [f"WithProvisioning/{r[0]}" for r in WITH_PROVISIONING],
)
def test_find_pod_volumes(pod: MakePod, claims: list[Obj], volumes: list[Obj], expected: Any) -> None:
    """TestFindPodVolumesWithoutProvisioning and TestFindPodVolumesWithProvisioning."""
    got = find(pod, claims, volumes)
    if expected == "error":
        assert got == "error"
        return
    assert isinstance(got, NodeVolumes)
    reasons, bindings, provisions = expected
    assert sorted(got.reasons) == sorted(reasons)
    if not reasons:
        assert names(got) == (bindings, provisions)


def _volumes(bindings: list[tuple[Obj, Obj]], provisions: list[Obj]) -> NodeVolumes:
    return NodeVolumes(
        tuple(Binding(parse_claim(c), parse_volume(v)) for c, v in bindings),
        tuple(parse_claim(c) for c in provisions),
    )


def _with_selected_node(claim: Obj, node: str = "node1") -> Obj:
    return with_annotations(
        claim, {**(claim["metadata"].get("annotations") or {}), "volume.kubernetes.io/selected-node": node}
    )


def _without_claim_uid(volume: Obj) -> Obj:
    spec = dict(volume["spec"])
    spec["claimRef"] = {k: v for k, v in spec["claimRef"].items() if k != "uid"}
    return {**volume, "spec": spec}


# (scenario, bindings, provisioned claims, the API's claims, the API's volumes, expected)
CHECK_BINDINGS: list[tuple[str, list[tuple[Obj, Obj]], list[Obj], list[Obj], list[Obj], Any]] = [
    ("nothing-to-bind", [], [], [], [], DONE),
    ("binding-bound", [(unbound_pvc, pv_node1a_bound)], [], [bound_pvc_node1a], [pv_node1a_bound], DONE),
    (
        "binding-prebound",
        [(unbound_pvc, pv_node1a_bound)],
        [],
        [prebound_pvc_node1a],
        [pv_node1a_bound],
        WAIT,
    ),
    # gpuq's: fully bound, but the PV controller has not written the phase yet (design.md, difference 7)
    (
        "binding-bound,phase-not-yet-Bound",
        [(unbound_pvc, pv_node1a_bound)],
        [],
        [{**bound_pvc_node1a, "status": {"phase": "Pending"}}],
        [pv_node1a_bound],
        WAIT,
    ),
    ("binding-unbound", [(unbound_pvc, pv_node1a_bound)], [], [unbound_pvc], [pv_node1a_bound], WAIT),
    ("binding-pvc-not-exists", [(unbound_pvc, pv_node1a_bound)], [], [], [pv_node1a_bound], State.FAILED),
    ("binding-pv-not-exists", [(unbound_pvc, pv_node1a_bound)], [], [bound_pvc_node1a], [], State.FAILED),
    (
        "binding-claimref-nil",
        [(unbound_pvc, pv_node1a_bound)],
        [],
        [bound_pvc_node1a],
        [pv_node1a],
        State.FAILED,
    ),
    (
        "binding-claimref-uid-empty",
        [(unbound_pvc, pv_node1a_bound)],
        [],
        [bound_pvc_node1a],
        [_without_claim_uid(pv_node1a_bound)],
        State.FAILED,
    ),
    (
        "binding-one-bound,one-unbound",
        [(unbound_pvc, pv_node1a_bound), (unbound_pvc2, pv_node1b_bound)],
        [],
        [bound_pvc_node1a, unbound_pvc2],
        [pv_node1a_bound, pv_node1b_bound],
        WAIT,
    ),
    (
        "provisioning-pvc-bound",
        [],
        [_with_selected_node(provisioned_pvc)],
        [_with_selected_node(provisioned_pvc_bound)],
        [pv_bound],
        DONE,
    ),
    (
        "provisioning-pvc-unbound",
        [],
        [_with_selected_node(provisioned_pvc)],
        [_with_selected_node(provisioned_pvc)],
        [],
        WAIT,
    ),
    ("provisioning-pvc-not-exists", [], [_with_selected_node(provisioned_pvc)], [], [], State.FAILED),
    (
        "provisioning-pvc-annotations-nil",
        [],
        [_with_selected_node(provisioned_pvc)],
        [with_annotations(provisioned_pvc, None)],
        [],
        State.FAILED,
    ),
    (
        "provisioning-pvc-selected-node-dropped",
        [],
        [_with_selected_node(provisioned_pvc)],
        [with_annotations(provisioned_pvc, {})],
        [],
        State.FAILED,
    ),
    (
        "provisioning-pvc-selected-node-wrong-node",
        [],
        [_with_selected_node(provisioned_pvc)],
        [_with_selected_node(provisioned_pvc, "wrong-node")],
        [],
        State.FAILED,
    ),
    (
        "binding-bound-provisioning-unbound",
        [(unbound_pvc, pv_node1a_bound)],
        [_with_selected_node(provisioned_pvc)],
        [bound_pvc_node1a, _with_selected_node(provisioned_pvc)],
        [pv_node1a_bound],
        WAIT,
    ),
    (
        "tolerate-provisioning-pvc-bound-pv-not-found",
        [],
        [_with_selected_node(provisioned_pvc)],
        [_with_selected_node(provisioned_pvc_bound)],
        [],
        WAIT,
    ),
]


@pytest.mark.parametrize(
    ("bindings", "provisions", "api_claims", "api_volumes", "expected"),
    [row[1:] for row in CHECK_BINDINGS],
    ids=[row[0] for row in CHECK_BINDINGS],
)
def test_check_bindings(
    bindings: list[tuple[Obj, Obj]],
    provisions: list[Obj],
    api_claims: list[Obj],
    api_volumes: list[Obj],
    expected: Any,
) -> None:
    """TestCheckBindings (its Go-only nil-slice cases aside): done, not yet, or failed, as upstream's
    (bound, error)."""
    objects = {
        (kinds.PERSISTENT_VOLUME_CLAIM, c["metadata"]["namespace"], c["metadata"]["name"]): c
        for c in api_claims
    }
    objects |= {(kinds.PERSISTENT_VOLUME, "", v["metadata"]["name"]): v for v in api_volumes}
    progress = bindings_ready(
        lambda kind, namespace, name: objects.get((kind, namespace, name)),
        _volumes(bindings, provisions),
        "node1",
        NODE1,
    )
    if isinstance(expected, State):
        assert progress.state is expected and progress.message.startswith("binding volumes: ")
    else:
        assert progress == expected


def test_assume_pod_volumes() -> None:
    """TestAssumePodVolumes "one-binding", "two-bindings", "pv-already-bound" and "one-binding,
    one-pvc-provisioned": assumed, the volumes carry the claim's claimRef and the claim to provision
    the node, for every later lookup; reverting (TestRevertAssumedPodVolumes) restores them; a
    volume assumed for another claim is refused and nothing is assumed ("tmpupdate-failed")."""
    catalog = Catalog.of(
        [parse_claim(c) for c in (unbound_pvc, unbound_pvc2, provisioned_pvc)],
        [parse_volume(v) for v in (pv_node1a, pv_node1b)],
        CLASSES,
    )
    ledger = VolumeLedger()
    chosen = _volumes([(unbound_pvc, pv_node1a), (unbound_pvc2, pv_node1b)], [provisioned_pvc])
    assert ledger.reserve("testns/test-pod", "node1", chosen) is None
    view = ledger.view(catalog)
    for volume, claim in (("pv-node1a", "unbound-pvc"), ("pv-node1b", "unbound-pvc2")):
        found = view.volume(volume)
        assert found is not None and found.claim_ref is not None
        assert (found.claim_ref.key, found.claim_ref.uid) == (f"testns/{claim}", "pvc-uid")
    provisioned = view.claim("testns", "provisioned-pvc")
    assert provisioned is not None and provisioned.selected_node == "node1"
    other = _volumes([(provisioned_pvc, pv_node1a)], [])
    conflict = ledger.reserve("testns/other", "node1", other)
    assert (
        conflict is not None and "PersistentVolume/pv-node1a" in conflict and "testns/unbound-pvc" in conflict
    )
    ledger.unreserve("testns/test-pod")
    restored = ledger.view(catalog).volume("pv-node1a")
    assert restored is not None and restored.claim_ref is None
    restored_claim = ledger.view(catalog).claim("testns", "provisioned-pvc")
    assert restored_claim is not None and restored_claim.selected_node is None
    assert not len(ledger)


def test_bind_api_update_writes() -> None:
    """TestBindAPIUpdate "one-binding" and "one-provisioned-pvc": the volume is written with the claim's
    reference (and bound-by-controller), the claim with the selected node, each conditional on the
    version the decision was made on; a volume already bound to the claim keeps its annotations."""
    chosen = _volumes([(unbound_pvc, pv_node1a), (unbound_pvc2, pv_node1b_bound)], [provisioned_pvc])
    first, second, third = writes(chosen, "node1")
    assert (first.kind, first.name) == (kinds.PERSISTENT_VOLUME, "pv-node1a")
    assert first.patch == {
        "metadata": {"resourceVersion": "1", "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}},
        "spec": {
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": "testns",
                "name": "unbound-pvc",
                "uid": "pvc-uid",
                "resourceVersion": "1",
            }
        },
    }
    assert "annotations" not in second.patch["metadata"]
    assert (third.kind, third.namespace, third.name) == (
        kinds.PERSISTENT_VOLUME_CLAIM,
        "testns",
        "provisioned-pvc",
    )
    assert third.patch == {
        "metadata": {"resourceVersion": "1", "annotations": {"volume.kubernetes.io/selected-node": "node1"}}
    }
