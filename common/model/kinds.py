"""Every Kubernetes kind gpuq reads or writes, one record each: group, version, kind, plural and scope.

The informers list and watch by these records (``/api/v1/pods``, ``/apis/<group>/<version>/<plural>``),
the webhook's view and ``gpuq simulate``'s loader recognise objects by them, the scheduler's object
store is keyed by them, messages name objects through :meth:`Kind.ref` (design.md "Object
references"), and ``deploy/render.py`` writes the chart's informer and status RBAC rules from
:data:`SCHEDULER_WATCHES`, :data:`WEBHOOK_WATCHES` and :data:`STATUS_WRITES`. Nothing else spells a
kind's group, version or plural.

Adding a kind is one line (a ``_kind(...)`` below); a process starts reading it when its code handles
it and it joins that process's tuple at the end of this module (which also grants the RBAC).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpuq_k8s.common.model.wire import Obj, object_ref


@dataclass(frozen=True, slots=True, eq=False)
class Kind:
    """One API kind: ``Kind("Pod", "", "v1", "pods", namespaced=True)``; the core group is ``""``.

    Each kind has one record, defined below: records are compared (and hashed) by identity, which the
    webhook's per-request routing and the object store's per-pod lookups do cheaply.
    """

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """``scheduling.volcano.sh/v1beta1``; ``v1`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The resource as RBAC and ``kubectl auth can-i`` name it: ``queues.scheduling.volcano.sh``,
        ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def path(self) -> str:
        """The collection path across all namespaces: ``/api/v1/pods``, ``/apis/<group>/<v>/<plural>``."""
        return self.collection("")

    def collection(self, namespace: str) -> str:
        """The collection path in ``namespace`` (across all namespaces when empty or cluster-scoped)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, namespace: str, name: str) -> str:
        """One object's path (``namespace`` is ignored for a cluster-scoped kind)."""
        return f"{self.collection(namespace)}/{name}"

    def ref(self, namespace: str, name: str) -> str:
        """``Kind/namespace/name``, or ``Kind/name`` for a cluster-scoped kind, as messages name objects."""
        return object_ref(self.kind, namespace if self.namespaced else "", name)


_DEFINED: list[Kind] = []


def _kind(kind: str, group: str, version: str, plural: str, *, namespaced: bool) -> Kind:
    record = Kind(kind, group, version, plural, namespaced)
    _DEFINED.append(record)
    return record


# -- core and built-in groups
NODE: Final = _kind("Node", "", "v1", "nodes", namespaced=False)
POD: Final = _kind("Pod", "", "v1", "pods", namespaced=True)
NAMESPACE: Final = _kind("Namespace", "", "v1", "namespaces", namespaced=False)
SECRET: Final = _kind("Secret", "", "v1", "secrets", namespaced=True)
# -- the owners of pods that topology spread's system defaults select by (kube's DefaultSelector)
SERVICE: Final = _kind("Service", "", "v1", "services", namespaced=True)
REPLICATION_CONTROLLER: Final = _kind(
    "ReplicationController", "", "v1", "replicationcontrollers", namespaced=True
)
PRIORITY_CLASS: Final = _kind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
EVENT: Final = _kind("Event", "events.k8s.io", "v1", "events", namespaced=True)
LEASE: Final = _kind("Lease", "coordination.k8s.io", "v1", "leases", namespaced=True)
VALIDATING_WEBHOOK_CONFIGURATION: Final = _kind(
    "ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    namespaced=False,
)
MUTATING_WEBHOOK_CONFIGURATION: Final = _kind(
    "MutatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    namespaced=False,
)
# -- what kube-scheduler's placement rules read (design.md "Placement rules"; the scheduler's events
#    for them: scheduler/framework/cluster_events.py)
PERSISTENT_VOLUME_CLAIM: Final = _kind(
    "PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", namespaced=True
)
PERSISTENT_VOLUME: Final = _kind("PersistentVolume", "", "v1", "persistentvolumes", namespaced=False)
STORAGE_CLASS: Final = _kind("StorageClass", "storage.k8s.io", "v1", "storageclasses", namespaced=False)
CSI_NODE: Final = _kind("CSINode", "storage.k8s.io", "v1", "csinodes", namespaced=False)
POD_DISRUPTION_BUDGET: Final = _kind(
    "PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", namespaced=True
)
# -- DRA (resource.k8s.io/v1): what kube-scheduler's DynamicResources plugin reads, and the claims'
#    status it writes (common/model/devices, scheduler/plugins/dynamic_resources.py)
DEVICE_CLASS: Final = _kind("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", namespaced=False)
RESOURCE_SLICE: Final = _kind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", namespaced=False)
RESOURCE_CLAIM: Final = _kind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", namespaced=True)
RESOURCE_CLAIM_TEMPLATE: Final = _kind(
    "ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates", namespaced=True
)
CUSTOM_RESOURCE_DEFINITION: Final = _kind(
    "CustomResourceDefinition",
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    namespaced=False,
)
# -- the workloads `gpuq simulate` expands into pods (scheduler/simulate/workloads.py)
DEPLOYMENT: Final = _kind("Deployment", "apps", "v1", "deployments", namespaced=True)
REPLICA_SET: Final = _kind("ReplicaSet", "apps", "v1", "replicasets", namespaced=True)
STATEFUL_SET: Final = _kind("StatefulSet", "apps", "v1", "statefulsets", namespaced=True)
JOB: Final = _kind("Job", "batch", "v1", "jobs", namespaced=True)
VOLCANO_JOB: Final = _kind("Job", "batch.volcano.sh", "v1alpha1", "jobs", namespaced=True)
# -- the custom resources of the five designs (wire models in common/model/crd.py)
QUEUE: Final = _kind("Queue", "scheduling.volcano.sh", "v1beta1", "queues", namespaced=False)
POD_GROUP: Final = _kind("PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", namespaced=True)
ELASTIC_QUOTA: Final = _kind(
    "ElasticQuota", "scheduling.x-k8s.io", "v1alpha1", "elasticquotas", namespaced=True
)
GPU_RESOURCE_QUOTA: Final = _kind(
    "GPUResourceQuota", "tensor-fusion.ai", "v1", "gpuresourcequotas", namespaced=True
)

# Every kind above, in definition order (a new kind goes above this line).
ALL: Final = tuple(_DEFINED)
_BY_GROUP_KIND: Final = {(k.group, k.kind): k for k in ALL}


def group_of(api_version: str) -> str:
    """``scheduling.volcano.sh/v1beta1`` -> ``scheduling.volcano.sh``; ``v1`` -> ``""`` (core)."""
    return api_version.rpartition("/")[0]


def lookup(group: str, kind: str) -> Kind | None:
    """The record of ``kind`` in API group ``group`` (``""``: core); None for a kind gpuq does not know.
    The version is not compared: which versions are served is the apiserver's (and the CRD's) to say."""
    return _BY_GROUP_KIND.get((group, kind))


def of(obj: Obj) -> Kind | None:
    """The record of an API object, from its ``apiVersion`` and ``kind``."""
    return lookup(group_of(str(obj.get("apiVersion") or "")), str(obj.get("kind") or ""))


# What each process lists and watches, whose status the scheduler patches and which objects its PreBind
# patches. The processes take these tuples; deploy/render.py writes the chart's RBAC rules for them
# (get/list/watch, patch status, patch).
# The scheduler's order is its replay order: nodes first, pods last (scheduler/kube/feed.py).
SCHEDULER_WATCHES: Final = (
    NODE,
    NAMESPACE,
    PRIORITY_CLASS,
    SERVICE,
    REPLICATION_CONTROLLER,
    REPLICA_SET,
    STATEFUL_SET,
    QUEUE,
    POD_GROUP,
    ELASTIC_QUOTA,
    GPU_RESOURCE_QUOTA,
    STORAGE_CLASS,
    CSI_NODE,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    POD_DISRUPTION_BUDGET,
    DEVICE_CLASS,
    RESOURCE_SLICE,
    RESOURCE_CLAIM,
    POD,
)
# What `gpuq simulate` reads from its input (scheduler/simulate/loader.py): Nodes and Pods, the
# workloads it expands into Pods, and the objects the plugins read. Every other kind in the input is
# skipped and counted in one line ("skipped 12 objects: 4 Service, 3 ConfigMap"), or refused with
# --strict; a CustomResourceDefinition is read when it defines one of these kinds (its schema then
# checks them) and otherwise skipped the same way. A kind the simulation learns to read joins here
# (built-in kinds' fields are checked from scheduler/simulate/core_schema.json).
SIMULATED: Final = (
    NODE,
    POD,
    NAMESPACE,
    PRIORITY_CLASS,
    SERVICE,
    REPLICATION_CONTROLLER,
    DEPLOYMENT,
    REPLICA_SET,
    STATEFUL_SET,
    JOB,
    VOLCANO_JOB,
    QUEUE,
    POD_GROUP,
    ELASTIC_QUOTA,
    GPU_RESOURCE_QUOTA,
    PERSISTENT_VOLUME_CLAIM,
    PERSISTENT_VOLUME,
    STORAGE_CLASS,
    CSI_NODE,
    POD_DISRUPTION_BUDGET,
    DEVICE_CLASS,
    RESOURCE_SLICE,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
)
WEBHOOK_WATCHES: Final = (
    NODE,
    QUEUE,
    POD_GROUP,
    ELASTIC_QUOTA,
    GPU_RESOURCE_QUOTA,
    DEVICE_CLASS,  # the card types a ResourceClaim's requests could take
    RESOURCE_SLICE,
)
STATUS_WRITES: Final = (QUEUE, POD_GROUP, ELASTIC_QUOTA, GPU_RESOURCE_QUOTA)
# The objects the scheduler patches other than through /status: PreBind's (merge patches,
# resourceVersion-checked: the volume binder pre-binds a PersistentVolume, spec.claimRef, and marks a
# PersistentVolumeClaim for provisioning, its volume.kubernetes.io/selected-node annotation, as
# kube-scheduler's VolumeBinding does), and the PodGroup, whose status Volcano's own CRD keeps in the
# main resource (its PodGroup CRD declares no status subresource: common/kube/status.py), and a
# tensor-fusion pod's tensor-fusion.ai/gpu-ids annotation (GPUShare's PreBind, design.md Semantics 19).
OBJECT_WRITES: Final = (PERSISTENT_VOLUME, PERSISTENT_VOLUME_CLAIM, POD_GROUP, POD)
# The kinds whose status may live in the main resource (a CRD without the status subresource).
STATUS_IN_MAIN_RESOURCE: Final = (POD_GROUP,)
# What PreBind writes of a ResourceClaim, as kube-scheduler 1.36's system:kube-scheduler role grants it
# (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go): the claim itself (its
# resource.kubernetes.io/delete-protection finalizer), its status (allocation and reservedFor) and, with
# DRAResourceClaimGranularStatusAuthorization (beta, on in 1.36), the ``binding`` subresource the
# apiserver authorizes a status write that sets an allocation or a reservation against.
CLAIM_WRITES: Final = (RESOURCE_CLAIM,)
CLAIM_WRITE_SUBRESOURCES: Final = ("", "status", "binding")
# With DRAExtendedResource (beta, on in 1.36) system:kube-scheduler may also create and delete claims:
# the implicit claim of a pod asking an extended resource a DeviceClass serves, created at PreBind and
# deleted when the pod's binding fails (scheduler/plugins/dynamic_resources.py).
CLAIM_LIFECYCLE_VERBS: Final = ("create", "delete")
# Every kind the scheduler writes (the three tuples above grant it no other; binds, conditions and
# evictions are writes of pods): a new leader's caches of these must pass its predecessor's last write
# before it decides (scheduler/service.py); its caches of the other kinds are as fresh as their
# watches, as any replica's.
SCHEDULER_WRITES: Final = frozenset(STATUS_WRITES + OBJECT_WRITES + CLAIM_WRITES)
