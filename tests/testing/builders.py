"""Test objects in the manner of kube-scheduler's testing wrappers (``st.MakePod().Name("p").Obj()``).

One fluent builder per kind; every test file builds its Pods, Nodes, Queues, PodGroups and quotas here
instead of keeping a private ``pod()``/``node()``. Each builder makes the API object as the apiserver
would hold it (``.obj()``, a plain dict, also what manifests and AdmissionReviews carry); pods and
nodes also give gpuq's parsed model (``.info()``). Builders are values: every setter returns ``self``,
so a partially built object can be kept as a template only through :meth:`copy`.

    pod = MakePod().name("p").namespace("ml").req(cpu="1", **{"nvidia.com/gpu": 2}).card("NVIDIA-A100").info()
    node = MakeNode().name("a1").product("NVIDIA-A100").alloc(cpu="64", **{"nvidia.com/gpu": 8}).info()
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Mapping
from typing import Any, Self

from gpuq_k8s.common.model.crd import PodGroup, Queue
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER, PodInfo

CARD_NAME = "volcano.sh/card.name"
CARD_QUOTA = "volcano.sh/card.quota"
CARD_REQUEST = "volcano.sh/card.request"
GROUP_NAME = "scheduling.k8s.io/group-name"
QUEUE_NAME = "scheduling.volcano.sh/queue-name"
GPU = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia.com/gpu.product"

Amount = str | int | float


class _Builder:
    _obj: dict[str, Any]

    def copy(self) -> Self:
        clone = _copy.copy(self)
        clone._obj = _copy.deepcopy(self._obj)
        return clone

    def name(self, name: str) -> Self:
        self._obj["metadata"]["name"] = name
        return self

    def uid(self, uid: str) -> Self:
        self._obj["metadata"]["uid"] = uid
        return self

    def label(self, key: str, value: str) -> Self:
        self._obj["metadata"].setdefault("labels", {})[key] = value
        return self

    def labels(self, labels: dict[str, str]) -> Self:
        self._obj["metadata"].setdefault("labels", {}).update(labels)
        return self

    def annotation(self, key: str, value: str) -> Self:
        self._obj["metadata"].setdefault("annotations", {})[key] = value
        return self

    def annotations(self, annotations: dict[str, str]) -> Self:
        self._obj["metadata"].setdefault("annotations", {}).update(annotations)
        return self

    def resource_version(self, version: str) -> Self:
        """``metadata.resourceVersion``, as the informer delivers objects."""
        self._obj["metadata"]["resourceVersion"] = version
        return self

    def deleting(self, timestamp: str = "2024-01-01T00:00:00Z") -> Self:
        self._obj["metadata"]["deletionTimestamp"] = timestamp
        return self

    def finalizers(self, *names: str) -> Self:
        """``metadata.finalizers`` (none: the field removed)."""
        if names:
            self._obj["metadata"]["finalizers"] = list(names)
        else:
            self._obj["metadata"].pop("finalizers", None)
        return self

    def obj(self) -> dict[str, Any]:
        """The API object (a fresh deep copy: later builder calls never change it)."""
        return _copy.deepcopy(self._obj)


class _Namespaced(_Builder):
    def namespace(self, namespace: str) -> Self:
        self._obj["metadata"]["namespace"] = namespace
        return self


class MakePod(_Namespaced):
    """A Pod: one container ``c`` with requests (limits equal for extended resources only when asked)."""

    def __init__(self, name: str = "p", namespace: str = "ns") -> None:
        self._obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": GPUQ_SCHEDULER, "containers": [{"name": "c", "resources": {}}]},
        }

    def _container(self, index: int = 0) -> dict[str, Any]:
        containers: list[dict[str, Any]] = self._obj["spec"]["containers"]
        while len(containers) <= index:
            containers.append({"name": f"c{len(containers)}", "resources": {}})
        return containers[index]

    def req(self, requests: Mapping[str, Amount] | None = None, /, **amounts: Amount) -> Self:
        """Requests of the first container (merged): ``req(cpu="1", memory="1Gi")`` or a dict."""
        merged = {**(requests or {}), **amounts}
        self._container()["resources"].setdefault("requests", {}).update(merged)
        return self

    def lim(self, limits: dict[str, Amount] | None = None, /, **amounts: Amount) -> Self:
        merged = {**(limits or {}), **amounts}
        self._container()["resources"].setdefault("limits", {}).update(merged)
        return self

    def container(self, requests: dict[str, Amount], limits: dict[str, Amount] | None = None) -> Self:
        """Add another container with these requests (and limits)."""
        resources: dict[str, Any] = {"requests": dict(requests)}
        if limits is not None:
            resources["limits"] = dict(limits)
        containers: list[dict[str, Any]] = self._obj["spec"]["containers"]
        containers.append({"name": f"c{len(containers)}", "resources": resources})
        return self

    def init_container(self, requests: dict[str, Amount]) -> Self:
        inits: list[dict[str, Any]] = self._obj["spec"].setdefault("initContainers", [])
        inits.append({"name": f"init{len(inits)}", "resources": {"requests": dict(requests)}})
        return self

    def sidecar(self, requests: dict[str, Amount]) -> Self:
        """A restartable init container (``restartPolicy: Always``): it runs beside the app containers."""
        self.init_container(requests)
        self._obj["spec"]["initContainers"][-1]["restartPolicy"] = "Always"
        return self

    def image(self, image: str) -> Self:
        """The image of every container (the apiserver requires one; the scheduler never reads it)."""
        for container in self._obj["spec"]["containers"]:
            container["image"] = image
        return self

    def gpus(self, count: int, resource: str = GPU) -> Self:
        """``count`` cards of ``resource`` (requests and limits, as the apiserver requires)."""
        return self.req(**{resource: count}).lim(**{resource: count})

    def card(self, name: str) -> Self:
        """``volcano.sh/card.name``: one card type or ``A|B`` alternatives."""
        return self.annotation(CARD_NAME, name)

    def group(self, name: str) -> Self:
        return self.annotation(GROUP_NAME, name)

    def queue(self, name: str) -> Self:
        return self.annotation(QUEUE_NAME, name)

    def scheduler(self, name: str | None) -> Self:
        """``spec.schedulerName``; None leaves it unset (the default scheduler's pod)."""
        if name is None:
            self._obj["spec"].pop("schedulerName", None)
        else:
            self._obj["spec"]["schedulerName"] = name
        return self

    def node(self, name: str) -> Self:
        """Already bound to ``name`` (running: counts as usage)."""
        self._obj["spec"]["nodeName"] = name
        return self

    def priority(self, value: int, class_name: str = "") -> Self:
        self._obj["spec"]["priority"] = value
        if class_name:
            self._obj["spec"]["priorityClassName"] = class_name
        return self

    def preemption_policy(self, policy: str) -> Self:
        self._obj["spec"]["preemptionPolicy"] = policy
        return self

    def created(self, timestamp: str) -> Self:
        self._obj["metadata"]["creationTimestamp"] = timestamp
        return self

    def phase(self, phase: str) -> Self:
        self._obj.setdefault("status", {})["phase"] = phase
        return self

    def started(self, timestamp: str) -> Self:
        """``status.startTime`` (the kubelet's): preemption spares the longest-running first."""
        self._obj.setdefault("status", {})["startTime"] = timestamp
        return self

    def node_selector(self, selector: dict[str, str]) -> Self:
        self._obj["spec"]["nodeSelector"] = dict(selector)
        return self

    def spec(self, **fields: Any) -> Self:
        """Any other ``spec`` field (``tolerations``, ``affinity``, ``overhead``, ...)."""
        self._obj["spec"].update(fields)
        return self

    def host_port(self, port: int, protocol: str = "", ip: str = "", *, init: int | None = None) -> Self:
        """A ``hostPort`` (``containerPort`` equal) of the first container, or of init container
        ``init`` (added by :meth:`init_container` or :meth:`sidecar`); ``protocol`` and ``ip`` left
        empty when not given (TCP and ``0.0.0.0``, as the scheduler reads them)."""
        entry: dict[str, Any] = {"containerPort": port, "hostPort": port}
        if protocol:
            entry["protocol"] = protocol
        if ip:
            entry["hostIP"] = ip
        target = self._container() if init is None else self._obj["spec"]["initContainers"][init]
        target.setdefault("ports", []).append(entry)
        return self

    def scheduling_gates(self, *names: str) -> Self:
        """``spec.schedulingGates`` (none: the field removed, as an update that lifts the gates)."""
        if names:
            self._obj["spec"]["schedulingGates"] = [{"name": name} for name in names]
        else:
            self._obj["spec"].pop("schedulingGates", None)
        return self

    def resource_claims(self, *names: str) -> Self:
        """``spec.resourceClaims`` (DRA), each from a ResourceClaimTemplate of its name."""
        self._obj["spec"]["resourceClaims"] = [
            {"name": name, "resourceClaimTemplateName": name} for name in names
        ]
        return self

    def volume(self, volume: dict[str, Any]) -> Self:
        """One more ``spec.volumes`` entry, as given."""
        self._obj["spec"].setdefault("volumes", []).append(volume)
        return self

    def pvc(self, claim: str, name: str = "") -> Self:
        """A ``persistentVolumeClaim`` volume of ``claim`` (kube-scheduler's ``PVC(name)``)."""
        return self.volume({"name": name or claim, "persistentVolumeClaim": {"claimName": claim}})

    def ephemeral(self, name: str) -> Self:
        """A generic ephemeral volume ``name`` (its claim: ``<pod>-<name>``)."""
        return self.volume({"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})

    def info(self) -> PodInfo:
        return PodInfo.from_dict(self._obj)


class MakeNode(_Builder):
    """A Node: allocatable (and capacity equal to it), labels, taints; Ready unless told otherwise."""

    def __init__(self, name: str = "n1") -> None:
        self._obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "spec": {},
            "status": {"allocatable": {}},
        }

    def alloc(self, allocatable: dict[str, Amount] | None = None, /, **amounts: Amount) -> Self:
        self._obj["status"]["allocatable"].update({**(allocatable or {}), **amounts})
        return self

    def capacity(self, capacity: dict[str, Amount] | None = None, /, **amounts: Amount) -> Self:
        """``status.capacity`` (allocatable falls back to it for a resource it does not list)."""
        self._obj["status"].setdefault("capacity", {}).update({**(capacity or {}), **amounts})
        return self

    def product(self, product: str, prefix: str = GPU) -> Self:
        """The GPU feature discovery product label (``nvidia.com/gpu.product``)."""
        return self.label(f"{prefix}.product", product)

    def gpus(self, count: int | str, resource: str = GPU) -> Self:
        return self.alloc(**{resource: count})

    def taint(self, key: str, effect: str = "NoSchedule", value: str = "") -> Self:
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        self._obj["spec"].setdefault("taints", []).append(taint)
        return self

    def unschedulable(self) -> Self:
        self._obj["spec"]["unschedulable"] = True
        return self

    def not_ready(self) -> Self:
        self._obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        return self

    def info(self) -> NodeInfo:
        return NodeInfo.from_dict(self._obj)


class MakeQueue(_Builder):
    """A Volcano Queue (cluster-scoped), Open unless told otherwise."""

    def __init__(self, name: str = "team-a") -> None:
        self._obj = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {},
            "status": {"state": "Open"},
        }

    def card_quota(self, quota: str) -> Self:
        """``volcano.sh/card.quota`` as JSON text (kept verbatim, so malformed text can be tested)."""
        return self.annotation(CARD_QUOTA, quota)

    def capability(self, capability: dict[str, Amount] | None = None, /, **amounts: Amount) -> Self:
        self._obj["spec"].setdefault("capability", {}).update({**(capability or {}), **amounts})
        return self

    def deserved(self, deserved: dict[str, Amount] | None = None, /, **amounts: Amount) -> Self:
        self._obj["spec"].setdefault("deserved", {}).update({**(deserved or {}), **amounts})
        return self

    def weight(self, weight: int) -> Self:
        self._obj["spec"]["weight"] = weight
        return self

    def priority(self, priority: int) -> Self:
        """``spec.priority`` (proportion's queue order: a higher one first)."""
        self._obj["spec"]["priority"] = priority
        return self

    def state(self, state: str) -> Self:
        self._obj["status"]["state"] = state
        return self

    def model(self) -> Queue:
        return Queue.from_dict(self._obj)


class MakePodGroup(_Namespaced):
    """A Volcano PodGroup."""

    def __init__(self, name: str = "pg", namespace: str = "ns") -> None:
        self._obj = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
        }

    def queue(self, name: str) -> Self:
        self._obj["spec"]["queue"] = name
        return self

    def min_member(self, count: int) -> Self:
        self._obj["spec"]["minMember"] = count
        return self

    def min_resources(self, resources: dict[str, Amount] | None = None, /, **amounts: Amount) -> Self:
        self._obj["spec"].setdefault("minResources", {}).update({**(resources or {}), **amounts})
        return self

    def card_request(self, request: str) -> Self:
        """``volcano.sh/card.request`` as JSON text."""
        return self.annotation(CARD_REQUEST, request)

    def phase(self, phase: str) -> Self:
        self._obj.setdefault("status", {})["phase"] = phase
        return self

    def spec(self, **fields: Any) -> Self:
        """Any other ``spec`` field (``networkTopology``, ...)."""
        self._obj["spec"].update(fields)
        return self

    def model(self) -> PodGroup:
        return PodGroup.from_dict(self._obj)


class MakeElasticQuota(_Namespaced):
    """A scheduler-plugins ElasticQuota (``scheduling.x-k8s.io/v1alpha1``)."""

    def __init__(self, name: str = "eq", namespace: str = "ns") -> None:
        self._obj = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
        }

    def min(self, amounts: dict[str, Amount] | None = None, /, **more: Amount) -> Self:
        self._obj["spec"].setdefault("min", {}).update({**(amounts or {}), **more})
        return self

    def max(self, amounts: dict[str, Amount] | None = None, /, **more: Amount) -> Self:
        self._obj["spec"].setdefault("max", {}).update({**(amounts or {}), **more})
        return self

    def used(self, amounts: dict[str, Amount] | None = None, /, **more: Amount) -> Self:
        """``status.used``, as the scheduler writes it."""
        self._obj.setdefault("status", {}).setdefault("used", {}).update({**(amounts or {}), **more})
        return self


class MakeGPUResourceQuota(_Namespaced):
    """A TensorFusion GPUResourceQuota (``tensor-fusion.ai/v1``); ``total``/``single`` take the CRD's
    own nested fields (``requests={"tflops": "100"}``, ``maxWorkers=4``)."""

    def __init__(self, name: str = "q", namespace: str = "ns") -> None:
        self._obj = {
            "apiVersion": "tensor-fusion.ai/v1",
            "kind": "GPUResourceQuota",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
        }

    def total(self, **fields: Any) -> Self:
        self._obj["spec"].setdefault("total", {}).update(fields)
        return self

    def single(self, **fields: Any) -> Self:
        self._obj["spec"].setdefault("single", {}).update(fields)
        return self

    def spec(self, **fields: Any) -> Self:
        """Whole ``spec`` fields as given (``total={...}``, ``single={...}``, or fields gpuq ignores)."""
        self._obj["spec"].update(fields)
        return self


class MakePriorityClass(_Builder):
    """A PriorityClass (``scheduling.k8s.io/v1``)."""

    def __init__(self, name: str = "high", value: int = 1000) -> None:
        self._obj = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }


# -- storage (kube-scheduler's volumebinding test_utils.go makePVC / makePV, st.MakePersistentVolume...) --


class MakePVC(_Namespaced):
    """A PersistentVolumeClaim of ``storage_class`` (None: no class set), ``ReadWriteOnce`` unless told."""

    def __init__(self, name: str = "pvc", namespace: str = "ns", storage_class: str | None = None) -> None:
        spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"]}
        if storage_class is not None:
            spec["storageClassName"] = storage_class
        self._obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
            "status": {"phase": "Pending"},
        }

    def request(self, storage: Amount) -> Self:
        self._obj["spec"]["resources"] = {"requests": {"storage": storage}}
        return self

    def access_modes(self, *modes: str) -> Self:
        self._obj["spec"]["accessModes"] = list(modes)
        return self

    def bound(self, volume: str) -> Self:
        """Bound by the PV controller (``withBoundPV``): volumeName, bind-completed, phase Bound."""
        self._obj["spec"]["volumeName"] = volume
        self._obj["status"]["phase"] = "Bound"
        return self.annotation("pv.kubernetes.io/bind-completed", "yes")

    def prebound(self, volume: str) -> Self:
        """``spec.volumeName`` set by a user, not bound yet."""
        self._obj["spec"]["volumeName"] = volume
        return self

    def selected_node(self, node: str) -> Self:
        return self.annotation("volume.kubernetes.io/selected-node", node)

    def phase(self, phase: str) -> Self:
        self._obj["status"]["phase"] = phase
        return self

    def owner(self, kind: str, name: str, uid: str) -> Self:
        """Controlled by ``kind/name`` (a generic ephemeral volume's pod)."""
        ref = {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "controller": True}
        self._obj["metadata"]["ownerReferences"] = [ref]
        return self

    def spec(self, **fields: Any) -> Self:
        self._obj["spec"].update(fields)
        return self


class MakePV(_Builder):
    """A PersistentVolume of ``storage_class`` ("" none), ``Available``, ``ReadWriteOnce``."""

    def __init__(self, name: str = "pv", storage_class: str = "") -> None:
        self._obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"]},
            "status": {"phase": "Available"},
        }

    def capacity(self, storage: Amount) -> Self:
        self._obj["spec"]["capacity"] = {"storage": storage}
        return self

    def access_modes(self, *modes: str) -> Self:
        self._obj["spec"]["accessModes"] = list(modes)
        return self

    def phase(self, phase: str) -> Self:
        self._obj["status"]["phase"] = phase
        return self

    def node_affinity(self, terms: dict[str, list[str]]) -> Self:
        """One required term: each key In its values (``withNodeAffinity``)."""
        expressions = [{"key": k, "operator": "In", "values": list(v)} for k, v in terms.items()]
        required = {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        self._obj["spec"]["nodeAffinity"] = {"required": required}
        return self

    def claim_ref(self, namespace: str, name: str, uid: str = "") -> Self:
        ref = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": namespace, "name": name}
        if uid:
            ref["uid"] = uid
        self._obj["spec"]["claimRef"] = ref
        return self

    def csi(self, driver: str, handle: str) -> Self:
        self._obj["spec"]["csi"] = {"driver": driver, "volumeHandle": handle}
        return self

    def source(self, key: str, source: dict[str, Any]) -> Self:
        """An in-tree source (``gcePersistentDisk``, ``awsElasticBlockStore``, ``hostPath``...)."""
        self._obj["spec"][key] = dict(source)
        return self

    def spec(self, **fields: Any) -> Self:
        self._obj["spec"].update(fields)
        return self


class MakeStorageClass(_Builder):
    """A StorageClass: ``WaitForFirstConsumer`` unless told, no provisioner unless given."""

    def __init__(
        self,
        name: str = "sc",
        provisioner: str = "kubernetes.io/no-provisioner",
        mode: str = "WaitForFirstConsumer",
    ) -> None:
        self._obj = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": provisioner,
            "volumeBindingMode": mode,
        }

    def allowed_topologies(self, *terms: dict[str, list[str]]) -> Self:
        self._obj["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": k, "values": list(v)} for k, v in term.items()]}
            for term in terms
        ]
        return self


class MakeCSINode(_Builder):
    """A CSINode of node ``name``: ``driver(name, count, topology_keys)`` adds a driver."""

    def __init__(self, name: str = "n1") -> None:
        self._obj = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": name},
            "spec": {"drivers": []},
        }

    def driver(self, name: str, count: int | None = None, topology_keys: tuple[str, ...] = ()) -> Self:
        driver: dict[str, Any] = {"name": name, "nodeID": self._obj["metadata"]["name"]}
        if count is not None:
            driver["allocatable"] = {"count": count}
        if topology_keys:
            driver["topologyKeys"] = list(topology_keys)
        self._obj["spec"]["drivers"].append(driver)
        return self

    def migrated(self, *plugins: str) -> Self:
        return self.annotation("storage.alpha.kubernetes.io/migrated-plugins", ",".join(plugins))


class MakePodDisruptionBudget(_Namespaced):
    """A PodDisruptionBudget (``policy/v1``): a selector, a bound, and what its status allows."""

    def __init__(self, name: str = "pdb", namespace: str = "ns") -> None:
        self._obj = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
        }

    def match_labels(self, labels: dict[str, str]) -> Self:
        self._obj["spec"].setdefault("selector", {})["matchLabels"] = dict(labels)
        return self

    def selector(self, selector: dict[str, Any] | None) -> Self:
        """The whole ``spec.selector`` as given (None: no selector)."""
        if selector is None:
            self._obj["spec"].pop("selector", None)
        else:
            self._obj["spec"]["selector"] = selector
        return self

    def min_available(self, value: int | str) -> Self:
        self._obj["spec"]["minAvailable"] = value
        return self

    def max_unavailable(self, value: int | str) -> Self:
        self._obj["spec"]["maxUnavailable"] = value
        return self

    def allowed(self, disruptions: int, disrupted: tuple[str, ...] = ()) -> Self:
        """``status.disruptionsAllowed`` (and ``status.disruptedPods``), as the disruption controller
        writes them."""
        status: dict[str, Any] = {"disruptionsAllowed": disruptions}
        if disrupted:
            status["disruptedPods"] = dict.fromkeys(disrupted, "2024-01-01T00:00:00Z")
        self._obj["status"] = status
        return self
