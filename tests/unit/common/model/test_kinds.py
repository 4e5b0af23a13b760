"""common/model/kinds.py: one record per kind, and what is derived from it (API paths, object
references, lookups by group and kind, the chart's informer and status RBAC rules)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from types import ModuleType
from typing import Any

import pytest
import yaml

from gpuq_k8s.common.model import kinds
from gpuq_k8s.scheduler.cluster.objects import KINDS as STORED
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import MakeElasticQuota, MakeQueue
from tests.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
BASE = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "gpuq.yaml").read_text()) if d]


def _render() -> ModuleType:
    """deploy/render.py (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("gpuq_deploy_render_kinds", ROOT / "deploy" / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _render()


@pytest.mark.parametrize(
    ("kind", "api_version", "resource", "collection", "one"),
    [
        (kinds.POD, "v1", "pods", "/api/v1/namespaces/ns/pods", "/api/v1/namespaces/ns/pods/x"),
        (kinds.NODE, "v1", "nodes", "/api/v1/nodes", "/api/v1/nodes/x"),
        (
            kinds.QUEUE,
            "scheduling.volcano.sh/v1beta1",
            "queues.scheduling.volcano.sh",
            "/apis/scheduling.volcano.sh/v1beta1/queues",
            "/apis/scheduling.volcano.sh/v1beta1/queues/x",
        ),
        (
            kinds.ELASTIC_QUOTA,
            "scheduling.x-k8s.io/v1alpha1",
            "elasticquotas.scheduling.x-k8s.io",
            "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/elasticquotas",
            "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/elasticquotas/x",
        ),
        (
            kinds.LEASE,
            "coordination.k8s.io/v1",
            "leases.coordination.k8s.io",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/x",
        ),
    ],
    ids=lambda v: v.kind if isinstance(v, kinds.Kind) else None,
)
def test_paths_and_names_come_from_the_record(
    kind: kinds.Kind, api_version: str, resource: str, collection: str, one: str
) -> None:
    """A cluster-scoped kind ignores the namespace it is given (as its ref does)."""
    assert kind.api_version == api_version
    assert kind.resource == resource
    assert kind.collection("ns") == collection
    assert kind.object_path("ns", "x") == one
    assert kind.ref("ns", "x") == (f"{kind.kind}/ns/x" if kind.namespaced else f"{kind.kind}/x")


def test_every_kind_is_one_record_and_found_by_its_group_and_kind() -> None:
    """Two kinds may share a name in different groups (a batch/v1 Job and a Volcano Job); the group
    tells them apart, and no (group, kind) is defined twice."""
    assert len({(k.group, k.kind) for k in kinds.ALL}) == len(kinds.ALL)
    for kind in kinds.ALL:
        assert kinds.lookup(kind.group, kind.kind) is kind
        assert kinds.of({"apiVersion": kind.api_version, "kind": kind.kind}) is kind
    assert kinds.of({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"}) is kinds.VOLCANO_JOB
    assert kinds.of({"apiVersion": "batch/v1", "kind": "Job"}) is kinds.JOB
    assert kinds.of({"apiVersion": "v1", "kind": "Queue"}) is None  # the wrong group is not a Queue
    assert kinds.of({"kind": "Pod"}) is kinds.POD  # no apiVersion: the core group
    assert kinds.lookup("", "ConfigMap") is None


def test_what_each_process_reads_is_a_known_kind() -> None:
    assert set(kinds.SCHEDULER_WATCHES) <= set(kinds.ALL)
    assert set(kinds.WEBHOOK_WATCHES) <= set(kinds.SCHEDULER_WATCHES)
    assert set(kinds.STATUS_WRITES) <= set(kinds.SCHEDULER_WATCHES)
    assert (kinds.SCHEDULER_WATCHES[0], kinds.SCHEDULER_WATCHES[-1]) == (
        kinds.NODE,
        kinds.POD,
    )  # replay order
    # The object store keeps what the scheduler watches besides Nodes and Pods; simulate reads them all.
    assert set(STORED) == set(kinds.SCHEDULER_WATCHES) - {kinds.NODE, kinds.POD}
    assert set(kinds.SCHEDULER_WATCHES) <= set(kinds.SIMULATED)


def test_the_store_and_the_view_file_objects_by_their_kind() -> None:
    store = ObjectStore()
    seen: list[tuple[kinds.Kind, str, str]] = []
    store.subscribe(lambda kind, namespace, name, obj: seen.append((kind, namespace, name)))
    store.put(MakeQueue("q").obj())
    store.put(MakeElasticQuota("eq", "ns").obj())
    assert seen == [(kinds.QUEUE, "", "q"), (kinds.ELASTIC_QUOTA, "ns", "eq")]
    assert store.get(kinds.QUEUE, "ignored", "q") is not None  # cluster-scoped: no namespace
    assert [name for _, name, _ in store.list(kinds.ELASTIC_QUOTA)] == ["eq"]
    with pytest.raises(ValueError, match="keeps no 'Deployment'"):
        store.put({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}})
    view = StaticView([MakeQueue("q").obj(), {**MakeQueue("wrong-group").obj(), "apiVersion": "v1"}])
    assert view.queue("q") is not None and view.queue("wrong-group") is None


def _granted(role: str, verb: str) -> set[str]:
    """``plural[/subresource].group`` (``pods`` for the core group) ``role`` grants ``verb`` on."""
    (cluster_role,) = [d for d in BASE if d["kind"] == "ClusterRole" and d["metadata"]["name"] == role]
    return {
        f"{resource}.{group}" if group else resource
        for rule in cluster_role["rules"]
        if verb in rule["verbs"] and not rule.get("resourceNames")
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def _status(kind: kinds.Kind) -> str:
    return f"{kind.plural}/status.{kind.group}" if kind.group else f"{kind.plural}/status"


def test_the_chart_grants_what_each_process_watches_and_the_status_it_patches() -> None:
    """The rendered ClusterRoles (deploy/base, rendered from the chart, whose _kinds.tpl is generated
    from kinds.py) grant exactly the watched kinds and the status subresources, nothing more."""
    for role, watched in (
        ("gpuq-scheduler", kinds.SCHEDULER_WATCHES),
        ("gpuq-webhook", kinds.WEBHOOK_WATCHES),
    ):
        for verb in ("get", "list", "watch"):
            assert _granted(role, verb) == {k.resource for k in watched}, (role, verb)
    # DRA's PreBind (CLAIM_WRITES): the claim (its finalizer), its status and the binding subresource
    # 1.36's apiserver authorizes an allocation or a reservation against, as system:kube-scheduler
    claims = {
        f"{k.plural}/{sub}.{k.group}" if sub else k.resource
        for k in kinds.CLAIM_WRITES
        for sub in kinds.CLAIM_WRITE_SUBRESOURCES
    }
    assert claims == {
        "resourceclaims.resource.k8s.io",
        "resourceclaims/status.resource.k8s.io",
        "resourceclaims/binding.resource.k8s.io",
    }
    patched = {r for r in _granted("gpuq-scheduler", "patch") if "/status" in r} - claims
    assert patched == {"pods/status"} | {_status(k) for k in kinds.STATUS_WRITES}
    # and the objects PreBind patches (PersistentVolumes, PersistentVolumeClaims), besides its Events
    objects = {r for r in _granted("gpuq-scheduler", "patch") if "/status" not in r}
    assert objects == {kinds.EVENT.resource} | {k.resource for k in kinds.OBJECT_WRITES} | claims - {
        "resourceclaims/status.resource.k8s.io"
    }
    # (pods besides: preemption deletes its victims, as system:kube-scheduler may; GPUShare's PreBind
    # only patches a pod's tensor-fusion.ai/gpu-ids)
    written = {k.resource for k in kinds.OBJECT_WRITES if k != kinds.POD}
    assert not {"pods"} & _granted("gpuq-scheduler", "update")
    for verb in ("create", "update", "delete"):
        assert not written & _granted("gpuq-scheduler", verb), verb
    # a pod's implicit claim for extended resources (DRAExtendedResource): created and deleted, as
    # system:kube-scheduler may; claims are never updated
    assert not claims & _granted("gpuq-scheduler", "update")
    for verb in kinds.CLAIM_LIFECYCLE_VERBS:
        assert claims & _granted("gpuq-scheduler", verb) == {"resourceclaims.resource.k8s.io"}, verb


def test_the_chart_template_is_generated_from_kinds() -> None:
    """deploy/render.py --check (tests/e2e/test_deploy.py) also needs helm; this needs nothing."""
    assert render.KINDS_TEMPLATE.read_text(encoding="utf-8") == render.kinds_template(), (
        "run `python deploy/render.py`"
    )


def test_a_kind_the_scheduler_starts_watching_is_granted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a kind is one record in kinds.py; listing it among the scheduler's watches is what grants
    it (the generated rules group resources by API group)."""
    maps = kinds.Kind("ConfigMap", "", "v1", "configmaps", namespaced=True)
    rules_kind = replace(maps, kind="DeviceTaintRule", group="resource.k8s.io", plural="devicetaintrules")
    monkeypatch.setattr(kinds, "SCHEDULER_WATCHES", (*kinds.SCHEDULER_WATCHES, maps, rules_kind))
    text = render.kinds_template()
    scheduler_rules = text.split('"gpuq.rules.schedulerWatches"')[1].split("{{- end }}")[0]
    rules: list[dict[str, Any]] = yaml.safe_load(scheduler_rules.split("}}", 1)[1])
    core = next(r for r in rules if r["apiGroups"] == [""])
    assert core["resources"] == [
        "nodes",
        "namespaces",
        "services",
        "replicationcontrollers",
        "persistentvolumes",
        "persistentvolumeclaims",
        "pods",
        "configmaps",
    ]
    assert {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["deviceclasses", "resourceslices", "resourceclaims", "devicetaintrules"],
        "verbs": ["get", "list", "watch"],
    } in rules
