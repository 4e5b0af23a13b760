"""Pods as the quota model sees them, and their effective resource request.

:func:`pod_requests` follows kube-scheduler's ``resourcehelper.PodRequests`` (Kubernetes 1.29+):

* regular containers run together, so their requests add up;
* a classic init container runs alone (beside the sidecars started before it), so it only raises the
  total to its own size: ``max(sum(containers) + sidecars, init + sidecars-so-far)``;
* a sidecar (an init container with ``restartPolicy: Always``) keeps running, so it adds to the sum;
* pod-level ``spec.resources.requests`` (PodLevelResources) replace the container sum for cpu/memory;
* ``spec.overhead`` (RuntimeClass) is added last.

Like the apiserver's defaulting, a container that sets a limit but no request requests its limit; that
matters for manifests read by ``gpuq simulate`` that never went through an apiserver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from common.model import wire
from common.model.errors import InvalidValue
from common.model.quantity import PODS
from common.model.resources import EMPTY, Resources

DEFAULT_SCHEDULER: Final = "default-scheduler"
GPUQ_SCHEDULER: Final = "gpuq-scheduler"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
# Pod-level resources only cover these (KEP-2837); everything else still comes from containers.
_POD_LEVEL_RESOURCES: Final = frozenset({"cpu", "memory"})


def _container_requests(container: Mapping[str, Any], where: str) -> Resources:
    name = container.get("name", "?")
    resources = wire.mapping(container.get("resources"), f"{where} container {name} resources")
    requests = Resources.parse(resources.get("requests"), f"{where} container {name} requests")
    limits = Resources.parse(resources.get("limits"), f"{where} container {name} limits")
    missing = {k: v for k, v in limits.items() if k not in requests}
    return requests + missing if missing else requests


def _max(a: Resources, b: Resources) -> Resources:
    keys = set(a) | set(b)
    return Resources({k: max(a.amount(k), b.amount(k)) for k in keys})


def pod_requests(spec: Mapping[str, Any], where: str = "spec") -> Resources:
    """The effective request of a pod spec, without the pod count (see module doc)."""
    total = EMPTY
    for container in wire.items(spec.get("containers"), "spec.containers"):
        total = total + _container_requests(container, where)

    sidecars = EMPTY
    init_peak = EMPTY
    for container in wire.items(spec.get("initContainers"), "spec.initContainers"):
        request = _container_requests(container, where)
        if container.get("restartPolicy") == "Always":
            total = total + request
            sidecars = sidecars + request
            during = sidecars
        else:
            during = request + sidecars
        init_peak = _max(init_peak, during)
    total = _max(total, init_peak)

    pod_level = wire.mapping(spec.get("resources"), "spec.resources").get("requests")
    if pod_level:
        overrides = Resources.parse(pod_level, f"{where} spec.resources.requests").only(_POD_LEVEL_RESOURCES)
        total = total.without(overrides) + overrides

    overhead = spec.get("overhead")
    if overhead:
        total = total + Resources.parse(overhead, f"{where} spec.overhead")
    return total


def pod_limits(spec: Mapping[str, Any], where: str = "spec") -> Resources:
    """Sum of the regular containers' limits (what card and GPU limit checks look at)."""
    total = EMPTY
    for container in wire.items(spec.get("containers"), "spec.containers"):
        name = container.get("name", "?")
        limits = wire.mapping(container.get("resources"), f"{where} container {name} resources").get("limits")
        total = total + Resources.parse(limits, f"{where} container {name} limits")
    return total


@dataclass(frozen=True, slots=True)
class PodInfo:
    """The fields of a Pod gpuq decides on, parsed once from the API object.

    ``requests`` is the effective request (see :func:`pod_requests`) and does not include the pod
    count; schedulers add ``pods: 1`` where they compare against node allocatable.
    """

    namespace: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str = DEFAULT_SCHEDULER
    node_name: str = ""
    phase: str = "Pending"
    priority: int | None = None
    priority_class_name: str = ""
    preemption_policy: str = "PreemptLowerPriority"
    creation_timestamp: str = ""
    deleting: bool = False
    requests: Resources = EMPTY
    limits: Resources = EMPTY
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        """How events and errors name the pod: ``Pod/<namespace>/<name>``."""
        return f"Pod/{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def holds_resources(self) -> bool:
        """Bound and not finished: the pod counts against nodes and quotas."""
        return self.bound and not self.terminal

    @property
    def requests_with_pod_count(self) -> Resources:
        return self.requests + {PODS: 1}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> PodInfo:
        """Parse a Pod API object (as JSON); raises :class:`InvalidValue` naming the pod."""
        obj = wire.mapping(obj, "Pod")
        meta = wire.mapping(obj.get("metadata"), "metadata", "Pod")
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        where = f"Pod/{namespace}/{name}"
        if not name:
            raise InvalidValue("metadata.name", name, "a non-empty pod name", where)
        try:
            spec = wire.mapping(obj.get("spec"), "spec")
            status = wire.mapping(obj.get("status"), "status")
            priority = spec.get("priority")
            if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
                raise InvalidValue("spec.priority", priority, "an integer")
            requests = pod_requests(spec, "spec")
            limits = pod_limits(spec, "spec")
            # Annotation values feed the quota parsers, which expect strings as the apiserver enforces.
            labels = wire.string_map(meta.get("labels"), "metadata.labels")
            annotations = wire.string_map(meta.get("annotations"), "metadata.annotations")
            node_selector = wire.string_map(spec.get("nodeSelector"), "spec.nodeSelector")
            affinity = wire.mapping(spec.get("affinity"), "spec.affinity")
            tolerations = wire.items(spec.get("tolerations"), "spec.tolerations")
        except InvalidValue as err:
            raise err.located(where) from None
        return cls(
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or ""),
            labels=labels,
            annotations=annotations,
            scheduler_name=str(spec.get("schedulerName") or DEFAULT_SCHEDULER),
            node_name=str(spec.get("nodeName") or ""),
            phase=str(status.get("phase") or "Pending"),
            priority=priority,
            priority_class_name=str(spec.get("priorityClassName") or ""),
            preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
            creation_timestamp=str(meta.get("creationTimestamp") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            requests=requests,
            limits=limits,
            node_selector=node_selector,
            affinity=dict(affinity),
            tolerations=tuple(tolerations),
        )
