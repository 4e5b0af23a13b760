"""The pure parts around the volume rules: the PersistentVolume controller's and a provisioner's part
for ``gpuq simulate`` (controller.py), in-tree volumes as the CSI volumes they migrated to
(migration.py, ``csi-translation-lib``'s handles), and the assume ledger forgetting what the caches
show (ledger.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.placement.volumes.binder import Binding, NodeVolumes
from gpuq_k8s.common.model.placement.volumes.claims import parse_claim
from gpuq_k8s.common.model.placement.volumes.controller import reconcile
from gpuq_k8s.common.model.placement.volumes.csi_nodes import parse_csi_node
from gpuq_k8s.common.model.placement.volumes.ledger import VolumeLedger
from gpuq_k8s.common.model.placement.volumes.migration import (
    ebs_volume_id,
    gce_handle,
    provisioner_driver,
    translate_inline,
    translate_volume,
)
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import parse_volume
from gpuq_k8s.common.model.placement.volumes.storage import Catalog
from gpuq_k8s.common.model.placement.volumes.storage_classes import parse_storage_class
from gpuq_k8s.common.model.pod_volumes import InlineDisk
from gpuq_k8s.common.model.wire import Obj
from tests.testing.builders import MakeCSINode, MakePV, MakePVC, MakeStorageClass

ZONE = "topology.kubernetes.io/zone"
CATALOG = Catalog.of(
    classes=[
        parse_storage_class(MakeStorageClass("std", "", mode="Immediate").obj()),
        parse_storage_class(MakeStorageClass("csi", "disk.example.com", mode="Immediate").obj()),
        parse_storage_class(MakeStorageClass("wait", "disk.example.com").obj()),
    ],
    csi_nodes=[
        parse_csi_node(MakeCSINode("n1").driver("disk.example.com", topology_keys=(ZONE, "rack")).obj())
    ],
)


def by_name(objects: list[Obj]) -> dict[tuple[str, str], Any]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_an_immediate_claim_binds_the_smallest_matching_volume_and_two_claims_never_share_one() -> None:
    claims = [
        MakePVC("a", "ns", "std").uid("ua").request("5Gi").obj(),
        MakePVC("b", "ns", "std").uid("ub").request("5Gi").obj(),
        MakePVC("c", "ns", "std").uid("uc").request("5Gi").obj(),
    ]
    volumes = [
        MakePV("big", "std").capacity("100Gi").phase("Available").obj(),
        MakePV("small", "std").capacity("1Gi").phase("Available").obj(),
        MakePV("fit", "std").capacity("10Gi").phase("Available").obj(),
    ]
    written = by_name(reconcile(claims, volumes, CATALOG, {}))
    assert written[("PersistentVolumeClaim", "a")]["spec"]["volumeName"] == "fit"
    assert written[("PersistentVolumeClaim", "b")]["spec"]["volumeName"] == "big"
    assert ("PersistentVolumeClaim", "c") not in written  # nothing left, and the class provisions nothing
    fit = written[("PersistentVolume", "fit")]
    assert (fit["spec"]["claimRef"]["uid"], fit["status"]["phase"]) == ("ua", "Bound")
    a = written[("PersistentVolumeClaim", "a")]
    assert a["metadata"]["annotations"] == {
        "pv.kubernetes.io/bind-completed": "yes",
        "pv.kubernetes.io/bound-by-controller": "yes",
    }
    assert a["status"]["phase"] == "Bound" and a["status"]["capacity"] == {"storage": "10Gi"}


def test_a_pre_bound_volume_binds_its_claim_and_a_new_volume_becomes_available() -> None:
    claims = [MakePVC("a", "ns", "std").uid("ua").obj()]
    volumes = [
        MakePV("chosen", "std").capacity("1Gi").claim_ref("ns", "a", "ua").obj(),
        {**MakePV("fresh", "std").capacity("1Gi").obj(), "status": {}},  # just created: no phase yet
    ]
    written = by_name(reconcile(claims, volumes, CATALOG, {}))
    assert written[("PersistentVolumeClaim", "a")]["spec"]["volumeName"] == "chosen"
    assert (
        "pv.kubernetes.io/bound-by-controller"
        not in (written[("PersistentVolumeClaim", "a")]["metadata"]["annotations"])
    )  # a user (or the scheduler) chose it
    assert written[("PersistentVolume", "fresh")]["status"]["phase"] == "Available"


def test_a_volume_pre_bound_to_another_uid_is_not_this_claims() -> None:
    claims = [MakePVC("a", "ns", "std").uid("new").obj()]
    volumes = [MakePV("old", "std").capacity("1Gi").claim_ref("ns", "a", "gone").phase("Released").obj()]
    assert reconcile(claims, volumes, CATALOG, {}) == []


def test_a_claim_for_a_node_is_provisioned_with_the_drivers_topology_there() -> None:
    claims = [MakePVC("w", "ns", "wait").uid("uw").request("3Gi").selected_node("n1").obj()]
    nodes = {"n1": {ZONE: "z1", "kubernetes.io/hostname": "n1"}}
    written = by_name(reconcile(claims, [], CATALOG, nodes))
    volume = written[("PersistentVolume", "pvc-uw")]
    assert volume["spec"]["csi"] == {"driver": "disk.example.com", "volumeHandle": "pvc-uw"}
    assert volume["spec"]["capacity"] == {"storage": "3Gi"}
    # the node carries the zone key only: the term pins the zone, the missing rack key is left out
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}]
    assert written[("PersistentVolumeClaim", "w")]["spec"]["volumeName"] == "pvc-uw"
    unmarked = [MakePVC("w", "ns", "wait").uid("uw").obj()]
    assert reconcile(unmarked, [], CATALOG, nodes) == []  # WaitForFirstConsumer: waits for the scheduler


def test_in_tree_handles_are_csi_translation_libs() -> None:
    assert ebs_volume_id("vol-0abc") == "vol-0abc"
    assert ebs_volume_id("aws://us-east-1a/vol-0abc") == "vol-0abc"
    assert ebs_volume_id("aws:///vol-0abc") == "vol-0abc"
    with pytest.raises(InvalidValue, match=r"awsElasticBlockStore\.volumeID"):
        ebs_volume_id("aws://us-east-1a/disk-1")
    assert gce_handle("pd") == "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd"
    assert gce_handle("pd", {ZONE: "us-central1-a"}) == "projects/UNSPECIFIED/zones/us-central1-a/disks/pd"
    regional = {"failure-domain.beta.kubernetes.io/zone": "us-central1-a__us-central1-b"}
    assert gce_handle("pd", regional) == "projects/UNSPECIFIED/regions/us-central1/disks/pd"
    assert translate_inline(InlineDisk("kubernetes.io/gce-pd", "pd")) == (
        "pd.csi.storage.gke.io",
        "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd",
    )
    assert translate_inline(InlineDisk("kubernetes.io/rbd", "img")) is None  # not migrated: not counted
    pv = parse_volume(
        MakePV("p").source("gcePersistentDisk", {"pdName": "pd"}).label(ZONE, "europe-west1-b").obj()
    )
    assert translate_volume(pv) == (
        "pd.csi.storage.gke.io",
        "projects/UNSPECIFIED/zones/europe-west1-b/disks/pd",
    )
    mixed = parse_volume(
        MakePV("p").source("gcePersistentDisk", {"pdName": "pd"}).label(ZONE, "us-a-1__eu-b-2").obj()
    )
    assert translate_volume(mixed) is None  # zones of two regions: upstream's translation fails
    assert provisioner_driver("kubernetes.io/aws-ebs") == "ebs.csi.aws.com"
    assert provisioner_driver("kubernetes.io/azure-file") is None
    assert provisioner_driver("csi.example.com") == "csi.example.com"


def test_the_ledger_forgets_what_the_caches_show() -> None:
    claim = parse_claim(MakePVC("c", "ns", "wait").uid("uc").obj())
    other = parse_claim(MakePVC("d", "ns", "wait").uid("ud").obj())
    volume = parse_volume(MakePV("v", "wait").capacity("1Gi").obj())
    ledger = VolumeLedger()
    assert ledger.reserve("ns/p", "n1", NodeVolumes((Binding(claim, volume),), (other,))) is None
    assert len(ledger) == 2
    ledger.observe_claim(parse_claim(MakePVC("d", "ns", "wait").uid("ud").selected_node("n2").obj()))
    assert len(ledger) == 2  # another node's annotation is not the one assumed
    ledger.observe_claim(parse_claim(MakePVC("d", "ns", "wait").uid("ud").selected_node("n1").obj()))
    assert len(ledger) == 1
    ledger.observe_volume(parse_volume(MakePV("v", "wait").claim_ref("ns", "c", "uc").obj()))
    assert len(ledger) == 0
    ledger.unreserve("ns/p")  # idempotent once everything was seen
    assert ledger.reserve("ns/q", "n1", NodeVolumes((Binding(claim, volume),))) is None
    ledger.forget(volume="v")
    assert len(ledger) == 0
