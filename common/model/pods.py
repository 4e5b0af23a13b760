"""Pods as the quota model sees them, and their effective resource request.

:func:`pod_requests` follows kube-scheduler's ``resourcehelper.PodRequests`` (Kubernetes 1.29+):

* regular containers run together, so their requests add up;
* a classic init container runs alone (beside the sidecars started before it), so it only raises the
  total to its own size: ``max(sum(containers) + sidecars, init + sidecars-so-far)``;
* a sidecar (an init container with ``restartPolicy: Always``) keeps running, so it adds to the sum;
* pod-level ``spec.resources.requests`` (PodLevelResources) replace the container sum for cpu, memory
  and ``hugepages-*`` (the resources 1.36 supports at pod level);
* ``spec.overhead`` (RuntimeClass) is added last.

Like the apiserver's defaulting, a container that sets a limit but no request requests its limit; that
matters for manifests read by ``gpuq simulate`` that never went through an apiserver.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

from gpuq_k8s.common.model import kinds, wire
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.pod_spec import HostPort, host_ports, pod_images, scheduling_gates
from gpuq_k8s.common.model.pod_volumes import PodVolume, parse_volumes
from gpuq_k8s.common.model.quantity import PODS, to_units
from gpuq_k8s.common.model.resources import EMPTY, Resources, interned

DEFAULT_SCHEDULER: Final = "default-scheduler"
GPUQ_SCHEDULER: Final = "gpuq-scheduler"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
# Pod-level resources only cover these and hugepages-* (KEP-2837, component-helpers'
# IsSupportedPodLevelResource in 1.36); everything else still comes from containers.
_POD_LEVEL_RESOURCES: Final = frozenset({"cpu", "memory"})
_HUGEPAGES_PREFIX: Final = "hugepages-"


def _container_requests(container: Mapping[str, Any], where: str) -> Resources:
    name = container.get("name", "?")
    resources = wire.mapping(container.get("resources"), f"{where} container {name} resources")
    requests = Resources.parse(
        resources.get("requests"), f"{where} container {name} requests", non_negative=True
    )
    limits = Resources.parse(resources.get("limits"), f"{where} container {name} limits", non_negative=True)
    missing = {k: v for k, v in limits.items() if k not in requests}
    return requests + missing if missing else requests


def _max(a: Resources, b: Resources) -> Resources:
    keys = set(a) | set(b)
    return Resources({k: max(a.amount(k), b.amount(k)) for k in keys})


def pod_requests(spec: Mapping[str, Any], where: str = "spec") -> Resources:
    """The effective request of a pod spec, without the pod count (see module doc)."""
    fast = _plain_requests_and_limits(spec)
    return fast[0] if fast is not None else _general_requests(spec, where)


def pod_limits(spec: Mapping[str, Any], where: str = "spec") -> Resources:
    """Sum of the regular containers' limits (what card and GPU limit checks look at)."""
    fast = _plain_requests_and_limits(spec)
    return fast[1] if fast is not None else _general_limits(spec, where)


def _general_requests(spec: Mapping[str, Any], where: str) -> Resources:
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
        parsed = Resources.parse(pod_level, f"{where} spec.resources.requests", non_negative=True)
        supported = {r for r in parsed if r in _POD_LEVEL_RESOURCES or r.startswith(_HUGEPAGES_PREFIX)}
        overrides = parsed.only(supported)
        total = total.without(overrides) + overrides

    overhead = spec.get("overhead")
    if overhead:
        total = total + Resources.parse(overhead, f"{where} spec.overhead", non_negative=True)
    return total


def _general_limits(spec: Mapping[str, Any], where: str) -> Resources:
    total = EMPTY
    for container in wire.items(spec.get("containers"), "spec.containers"):
        name = container.get("name", "?")
        limits = wire.mapping(container.get("resources"), f"{where} container {name} resources").get("limits")
        total = total + Resources.parse(limits, f"{where} container {name} limits", non_negative=True)
    return total


def _plain_units(pairs: tuple[tuple[Any, Any], ...]) -> dict[str, int] | None:
    """A ResourceList's items, all string names and string quantities in units; None for anything
    else, including a quantity :func:`to_units` or :meth:`Resources.parse` refuses (a negative one):
    the general path then raises the named error."""
    units: dict[str, int] = {}
    for name, value in pairs:
        if type(name) is not str or type(value) is not str:
            return None
        try:
            amount = _quantity_units(name, value)
        except InvalidValue:
            return None
        if amount < 0:
            return None  # refused by the general path, which names the field
        units[name] = amount
    return units


@functools.lru_cache(maxsize=4096)
def _quantity_units(resource: str, text: str) -> int:
    # A cluster's pods repeat a few (resource, quantity) pairs; errors are not cached.
    return to_units(resource, text)


# A container's ``resources`` as the key of :func:`_plain_sum`: its requests' and limits' items.
_ContainerKey = tuple[tuple[tuple[Any, Any], ...], tuple[tuple[Any, Any], ...]]


def _plain_requests_and_limits(spec: Mapping[str, Any]) -> tuple[Resources, Resources] | None:
    """:func:`pod_requests` and :func:`pod_limits` in one pass, for what nearly every pod is: regular
    containers only (no init containers, pod-level resources or overhead), plain JSON dicts, valid
    string quantities. Admission parses every Pod it reviews and a cold start 150,000 of them: the
    containers' resources are read as their items, and each distinct list of them is summed once
    (:func:`_plain_sum`).

    None means "not such a pod": the general functions then compute the same values or raise the
    error that names the field, so this path never decides anything they would not.
    """
    init = spec.get("initContainers")
    pod_level = spec.get("resources")
    if init is not None and not (type(init) is list and not init):
        return None
    if pod_level is not None and not (type(pod_level) is dict and not pod_level.get("requests")):
        return None
    if spec.get("overhead"):
        return None
    containers = spec.get("containers")
    if containers is None:
        return EMPTY, EMPTY
    if type(containers) is not list:
        return None
    keys: list[_ContainerKey] = []
    for container in containers:
        if type(container) is not dict:
            return None
        resources = container.get("resources")
        if resources is None:
            continue
        if type(resources) is not dict:
            return None
        asked = resources.get("requests")
        capped = resources.get("limits")
        if asked is not None and type(asked) is not dict:
            return None
        if capped is not None and type(capped) is not dict:
            return None
        keys.append((tuple(asked.items()) if asked else (), tuple(capped.items()) if capped else ()))
    try:
        return _plain_sum(tuple(keys))
    except TypeError:  # a value that is no string (a list...): unhashable, and refused below anyway
        return None


@functools.lru_cache(maxsize=4096)
def _plain_sum(containers: tuple[_ContainerKey, ...]) -> tuple[Resources, Resources] | None:
    """The requests and limits of containers with these resources (:func:`_plain_requests_and_limits`);
    a cluster's pods repeat a few such lists. None when one is not plain."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    for asked_items, capped_items in containers:
        asked = _plain_units(asked_items)
        capped = _plain_units(capped_items)
        if asked is None or capped is None:
            return None
        for key, value in asked.items():
            requests[key] = requests.get(key, 0) + value
        for key, value in capped.items():
            limits[key] = limits.get(key, 0) + value
            if key not in asked:  # a limit without a request requests the limit (module doc)
                requests[key] = requests.get(key, 0) + value
    # pod_requests takes max(total, init peak) with an empty init peak: negative totals become 0.
    return interned(Resources({k: max(v, 0) for k, v in requests.items()})), Resources(limits)


# Pods of one workload carry the same labels, annotations and node selector, most pods none of some:
# each distinct map is kept once across the PodInfos (150,000 pods at a cold start, issue 29). The
# maps are read-only like the frozen PodInfo holding them. At most this many distinct ones are kept.
_SHARED_MAPS_MAX: Final = 8192
_shared_maps: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
_NO_MAP: Final[dict[str, Any]] = {}


def _shared_map(value: dict[str, str]) -> dict[str, str]:
    """``value``, or an equal map kept before (one of string keys and values, as parsed)."""
    if not value:
        return _NO_MAP
    key = tuple(value.items())
    kept = _shared_maps.get(key)
    if kept is not None:
        return kept
    if len(_shared_maps) < _SHARED_MAPS_MAX:
        _shared_maps[key] = value
    return value


def _string_map(value: Any, field: str) -> Mapping[str, str]:
    """``wire.string_map`` of ``value`` shared (:func:`_shared_map`); a map equal to one kept before
    is that one without a check of its entries (a kept map's keys and values are strings, and only
    a string equals a string)."""
    if type(value) is dict:
        if not value:
            return _NO_MAP
        try:
            kept = _shared_maps.get(tuple(value.items()))
        except TypeError:  # an unhashable value: string_map names it
            kept = None
        if kept is not None:
            return kept
    return _shared_map(wire.string_map(value, field))


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One ``spec.resourceClaims`` entry: ``claim`` is the ResourceClaim's name (``resourceClaimName``,
    or for a ``resourceClaimTemplateName`` the claim kube-controller-manager generated, as
    ``status.resourceClaimStatuses`` names it); ``claim`` None: from a template, not generated yet
    (``needed``) or not needed at all (the status entry names no claim)."""

    name: str
    claim: str | None
    template: str | None = None
    needed: bool = True


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
    start_time: str = ""  # status.startTime (the kubelet's): preemption spares the longest-running
    deleting: bool = False
    # Being deleted because a scheduler preempted it: deleting, with the DisruptionTarget condition
    # reason PreemptionByScheduler (kube-scheduler's podTerminatingByPreemption). Only read then.
    preempted_by_scheduler: bool = False
    # ``status.nominatedNodeName``: where a preemption made room for this pending pod.
    nominated_node_name: str = ""
    requests: Resources = EMPTY
    limits: Resources = EMPTY
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    # Placement (design.md "Placement rules"): ``spec.schedulingGates`` names, the host ports of its
    # containers and sidecars, the names of its ``spec.resourceClaims`` (DRA), and the images it runs
    # with its number of containers (ImageLocality).
    scheduling_gates: tuple[str, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    resource_claims: tuple[str, ...] = ()
    # Each ``spec.resourceClaims`` entry with the ResourceClaim it names (:class:`PodClaim`).
    claim_sources: tuple[PodClaim, ...] = ()
    images: tuple[str, ...] = ()
    container_count: int = 0
    # The volumes the placement rules read (claims, in-tree disks): common/model/pod_volumes.py.
    volumes: tuple[PodVolume, ...] = ()
    # ``spec.topologySpreadConstraints`` and ``metadata.ownerReferences`` as they are (parsed by
    # common/model/placement: topology spread and its system defaults).
    topology_spread_constraints: tuple[Mapping[str, Any], ...] = ()
    owner_references: tuple[Mapping[str, Any], ...] = ()
    # The containers of a pod asking for an extended resource, trimmed to name, restartPolicy and
    # requests (``{"initContainers": [...], "containers": [...]}``), for the implicit DRA claim of a
    # DeviceClass ``extendedResourceName`` (common/model/devices/extended.py); empty when none asks.
    extended_spec: Mapping[str, Any] = field(default_factory=lambda: _NO_MAP)
    # ``namespace/name``, computed once: the scheduler looks a pod up by key a dozen times per attempt
    # (a slot, not a property: read a dozen times a pod at a cold start too).
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")

    def with_node_name(self, node_name: str) -> PodInfo:
        """This pod with ``node_name`` set (``self`` if already so): ``dataclasses.replace`` without
        re-running the constructor, which the scheduler's bind path calls for every pod."""
        if node_name == self.node_name:
            return self
        copy = object.__new__(PodInfo)
        for set_slot, value in zip(_SET_SLOTS, _GET_SLOTS(self), strict=True):
            set_slot(copy, value)
        _SET_NODE_NAME(copy, node_name)
        return copy

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
        meta: Any = obj.get("metadata") if type(obj) is dict else None
        spec: Any = obj.get("spec") if type(meta) is dict else None
        status: Any = obj.get("status", _NO_MAP) if type(spec) is dict else None
        name: Any = meta.get("name") if type(status) is dict else None
        if type(name) is str and name:
            # As decoded from JSON (nearly every pod): wire.object_parts' checks, inline.
            namespace = str(meta.get("namespace") or "default")
            where = ""  # made for an error only (below)
        else:
            meta, spec, status, namespace, name, where = wire.object_parts(
                obj, kinds.POD.kind, namespaced=kinds.POD.namespaced
            )
        try:
            priority = spec.get("priority")
            if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
                raise InvalidValue("spec.priority", priority, "an integer")
            both = _plain_requests_and_limits(spec)
            requests, limits = both if both is not None else (pod_requests(spec), pod_limits(spec))
            labels = _string_map(meta.get("labels"), "metadata.labels")
            annotations = _string_map(meta.get("annotations"), "metadata.annotations")
            node_selector = _string_map(spec.get("nodeSelector"), "spec.nodeSelector")
            affinity = wire.mapping(spec.get("affinity"), "spec.affinity")
            tolerations = wire.items(spec.get("tolerations"), "spec.tolerations")
            gates = scheduling_gates(spec) if spec.get("schedulingGates") else ()
            ports = host_ports(spec)
            claims = _claim_names(spec) if spec.get("resourceClaims") else ()
            claim_sources = _claim_sources(spec, status) if claims else ()
            images, container_count = pod_images(spec)
            raw_volumes = spec.get("volumes")
            volumes = () if raw_volumes is None else parse_volumes(raw_volumes, name)
            deleting = bool(meta.get("deletionTimestamp"))
            raw_spread = spec.get("topologySpreadConstraints")
            spread = () if raw_spread is None else wire.items(raw_spread, "spec.topologySpreadConstraints")
            owners = wire.items(meta.get("ownerReferences"), "metadata.ownerReferences")
        except InvalidValue as err:
            raise err.located(where or wire.object_ref(kinds.POD.kind, namespace, name)) from None
        return _new_pod_info(
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
            start_time=str(status.get("startTime") or ""),
            deleting=deleting,
            preempted_by_scheduler=deleting and _disrupted_by_preemption(status),
            nominated_node_name=str(status.get("nominatedNodeName") or ""),
            requests=interned(requests),
            limits=limits,
            node_selector=node_selector,
            affinity=dict(affinity) if affinity else _NO_MAP,
            tolerations=tuple(tolerations),
            scheduling_gates=gates,
            host_ports=ports,
            resource_claims=claims,
            claim_sources=claim_sources,
            images=images,
            container_count=container_count,
            volumes=volumes,
            topology_spread_constraints=tuple(spread),
            owner_references=tuple(owners),
            extended_spec=_extended_spec(spec, requests),
        )


def _is_extended(name: str) -> bool:
    """A domain-qualified resource outside ``kubernetes.io`` (``v1helper.IsExtendedResourceName``), or
    a DeviceClass's implicit ``deviceclass.resource.kubernetes.io/<class>``."""
    if name.startswith("deviceclass.resource.kubernetes.io/"):
        return True
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


@functools.lru_cache(maxsize=4096)
def _asks_extended(requests: Resources) -> bool:
    return any(_is_extended(name) for name in requests)


def _extended_spec(spec: Mapping[str, Any], requests: Resources) -> Mapping[str, Any]:
    """See :attr:`PodInfo.extended_spec`."""
    if not _asks_extended(requests):
        return _NO_MAP
    out: dict[str, list[dict[str, Any]]] = {}
    for key in ("initContainers", "containers"):
        trimmed = []
        for container in wire.items(spec.get(key), f"spec.{key}"):
            resources = container.get("resources")
            asked = resources.get("requests") if isinstance(resources, Mapping) else None
            asked = asked if isinstance(asked, Mapping) else {}
            entry: dict[str, Any] = {"name": container.get("name"), "resources": {"requests": {}}}
            if container.get("restartPolicy") is not None:
                entry["restartPolicy"] = container.get("restartPolicy")
            # Every name kept: the implicit request's name counts the container's sorted requests.
            entry["resources"]["requests"] = dict(asked)
            trimmed.append(entry)
        out[key] = trimmed
    return out


def _claim_names(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of ``spec.resourceClaims`` (the pod's DRA claims), in order."""
    claims = spec.get("resourceClaims")
    if not claims:
        return ()
    names: list[str] = []
    for i, claim in enumerate(wire.items(claims, "spec.resourceClaims")):
        name = claim.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidValue(f"spec.resourceClaims[{i}].name", name, "a non-empty claim name")
        names.append(name)
    return tuple(names)


def _claim_sources(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """Each ``spec.resourceClaims`` entry with its claim (:class:`PodClaim`)."""
    generated: dict[str, str | None] = {}
    for i, entry in enumerate(
        wire.items(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses")
    ):
        name = entry.get("name")
        claim = entry.get("resourceClaimName")
        if not isinstance(name, str) or (claim is not None and not isinstance(claim, str)):
            raise InvalidValue(f"status.resourceClaimStatuses[{i}]", entry, "a name and a claim name")
        generated[name] = claim or None
    out: list[PodClaim] = []
    for i, entry in enumerate(wire.items(spec.get("resourceClaims"), "spec.resourceClaims")):
        name = str(entry.get("name"))
        direct = entry.get("resourceClaimName")
        template = entry.get("resourceClaimTemplateName")
        if isinstance(direct, str) and direct:
            out.append(PodClaim(name, direct))
        elif isinstance(template, str) and template:
            out.append(
                PodClaim(name, generated.get(name), template, name not in generated or bool(generated[name]))
            )
        else:
            raise InvalidValue(
                f"spec.resourceClaims[{i}]", entry, "one of resourceClaimName or resourceClaimTemplateName"
            )
    return tuple(out)


def _disrupted_by_preemption(status: Mapping[str, Any]) -> bool:
    """The DisruptionTarget=True condition with reason PreemptionByScheduler (what a scheduler sets
    on a victim before deleting it); anything malformed is no such condition."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping)
        and c.get("type") == DISRUPTION_TARGET
        and c.get("status") == "True"
        and c.get("reason") == PREEMPTION_BY_SCHEDULER
        for c in conditions
    )


# Every slot of a PodInfo, ``key`` included, for :meth:`PodInfo.with_node_name`'s copy: one
# attrgetter and the slots' own setters (frozen: ``setattr`` refuses) copy them the fastest.
_POD_SLOTS: Final = tuple(f.name for f in fields(PodInfo))
_GET_SLOTS: Final = operator.attrgetter(*_POD_SLOTS)
_SET_SLOTS: Final[tuple[Callable[[PodInfo, Any], None], ...]] = tuple(
    getattr(PodInfo, name).__set__ for name in _POD_SLOTS
)
_SET_NODE_NAME: Final = _SET_SLOTS[_POD_SLOTS.index("node_name")]


def _pod_info_builder() -> Callable[..., PodInfo]:
    """:class:`PodInfo`'s constructor for :meth:`PodInfo.from_dict`, every field by keyword: the
    slots set by their own setters in straight-line code (a frozen dataclass's ``__init__`` sets each
    through ``object.__setattr__``: 3 of a cold start's 10 us a pod; this, 1.2). Generated from the
    fields, as ``dataclasses`` generates ``__init__``, so a field added to PodInfo is set here too."""
    names = [name for name in _POD_SLOTS if name != "key"]
    lines = [f"def build(*, {', '.join(names)}):", "    pod = new(PodInfo)"]
    lines += [f"    set_{name}(pod, {name})" for name in names]
    lines += ["    set_key(pod, f'{namespace}/{name}')", "    return pod"]
    scope: dict[str, Any] = {"new": object.__new__, "PodInfo": PodInfo}
    scope |= {f"set_{name}": setter for name, setter in zip(_POD_SLOTS, _SET_SLOTS, strict=True)}
    exec("\n".join(lines), scope)  # code made above from the dataclass's own field names
    built: Callable[..., PodInfo] = scope["build"]
    return built


_new_pod_info: Final = _pod_info_builder()
