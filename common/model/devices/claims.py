"""ResourceClaim and ResourceClaimTemplate (``resource.k8s.io/v1``): what a pod asks for, and what it
was given.

``spec.devices.requests`` are either ``exactly`` one kind of device (``allocationMode`` ``ExactCount``
with a ``count``, the default 1, or ``All``; ``selectors``; ``adminAccess``; ``tolerations``;
``capacity.requests`` for consumable capacity) or ``firstAvailable``: subrequests tried in order, the
first that can be satisfied wins (the DRA form of capacity-card's ``A|B`` preference).
``constraints`` tie requests together (``matchAttribute``, ``distinctAttribute``); ``config`` is
copied into the allocation. ``status.allocation`` and ``status.reservedFor`` say whether the claim is
allocated and which consumers use it: an allocated claim is honoured, never allocated again, and is
shared by up to 256 consumers.

Everything the allocator cannot act on is refused here, naming the claim and the field (an unknown
allocation mode, a selector without CEL, an empty constraint, a request with neither ``exactly`` nor
``firstAvailable``), where the structured allocator fails at allocation time with the same meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.devices.amounts import parse_amount
from gpuq_k8s.common.model.devices.cel_env import CompiledSelector
from gpuq_k8s.common.model.devices.classes import parse_configs, parse_selectors
from gpuq_k8s.common.model.devices.device import _str
from gpuq_k8s.common.model.devices.results import ClaimAllocation
from gpuq_k8s.common.model.devices.taints import Toleration, parse_tolerations
from gpuq_k8s.common.model.errors import InvalidValue

EXACT_COUNT: Final = "ExactCount"
ALL: Final = "All"
RESERVED_FOR_MAX: Final = 256  # resourceapi.ResourceClaimReservedForMaxSize
EXTENDED_RESOURCE_CLAIM_ANNOTATION: Final = "resource.kubernetes.io/extended-resource-claim"


@dataclass(frozen=True, slots=True)
class Request:
    """An ``exactly`` request or one ``firstAvailable`` subrequest. ``name`` is what results carry
    (``gpu``, or ``gpu/h100`` for a subrequest)."""

    name: str
    class_name: str
    mode: str = EXACT_COUNT
    count: int = 1
    selectors: tuple[CompiledSelector, ...] = ()
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One entry of ``spec.devices.requests``: ``alternatives`` has one :class:`Request` for
    ``exactly`` and one per subrequest for ``firstAvailable`` (``prioritized`` is then true)."""

    name: str
    alternatives: tuple[Request, ...]
    prioritized: bool = False


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...]
    attribute: str
    distinct: bool = False  # distinctAttribute rather than matchAttribute


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    spec: ClaimSpec
    uid: str = ""
    allocation: ClaimAllocation | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    deleting: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return wire.object_ref("ResourceClaim", self.namespace, self.name)

    def can_be_reserved(self) -> bool:
        return len(self.reserved_for) < RESERVED_FOR_MAX

    def reserved_for_pod(self, uid: str) -> bool:
        return any(c.resource == "pods" and c.uid == uid for c in self.reserved_for)

    @classmethod
    def from_dict(cls, obj: Any, spec_of: ClaimSpec | None = None) -> ResourceClaim:
        """Parse a ResourceClaim; ``spec_of``: its spec parsed already (the spec of a claim is
        immutable: a status update need not compile its selectors again)."""
        meta, spec, status, namespace, name, where = wire.object_parts(obj, "ResourceClaim", namespaced=True)
        allocation = status.get("allocation")
        reserved = []
        for i, item in enumerate(wire.items(status.get("reservedFor"), "status.reservedFor", where)):
            at = f"status.reservedFor[{i}]"
            reserved.append(
                ConsumerRef(
                    _str(item, "resource", at, where, required=True),
                    _str(item, "name", at, where, required=True),
                    _str(item, "uid", at, where, required=True),
                    _str(item, "apiGroup", at, where),
                )
            )
        _, annotations = wire.labels_and_annotations(meta)
        return cls(
            namespace=namespace,
            name=name,
            spec=spec_of if spec_of is not None else parse_claim_spec(spec, "spec", where),
            uid=str(meta.get("uid") or ""),
            allocation=ClaimAllocation.from_dict(allocation, where) if allocation is not None else None,
            reserved_for=tuple(reserved),
            deleting=meta.get("deletionTimestamp") is not None,
            annotations=annotations,
        )


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    namespace: str
    name: str
    spec: ClaimSpec

    @classmethod
    def from_dict(cls, obj: Any) -> ResourceClaimTemplate:
        _, spec, _, namespace, name, where = wire.object_parts(obj, "ResourceClaimTemplate", namespaced=True)
        return cls(
            namespace,
            name,
            parse_claim_spec(wire.mapping(spec.get("spec"), "spec.spec", where), "spec.spec", where),
        )


def _request(raw: Mapping[str, Any], name: str, at: str, where: str, sub: bool) -> Request:
    class_name = raw.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        raise InvalidValue(f"{at}.deviceClassName", class_name, "the name of a DeviceClass", where)
    mode = raw.get("allocationMode") or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise InvalidValue(f"{at}.allocationMode", mode, f"{EXACT_COUNT} or {ALL}", where)
    count = raw.get("count")
    if mode == EXACT_COUNT:
        count = 1 if count is None else count
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidValue(f"{at}.count", count, "a positive integer", where)
    elif count not in (None, 0):
        raise InvalidValue(f"{at}.count", count, "no count with allocationMode All", where)
    admin = raw.get("adminAccess")
    if sub and admin is not None:
        raise InvalidValue(f"{at}.adminAccess", admin, "no adminAccess on a subrequest", where)
    if admin is not None and not isinstance(admin, bool):
        raise InvalidValue(f"{at}.adminAccess", admin, "true or false", where)
    capacity = None
    if raw.get("capacity") is not None:
        requests = wire.mapping(
            wire.mapping(raw["capacity"], f"{at}.capacity", where).get("requests"),
            f"{at}.capacity.requests",
            where,
        )
        capacity = {
            str(k): parse_amount(v, f"{at}.capacity.requests.{k}", where) for k, v in requests.items()
        }
    return Request(
        name=name,
        class_name=class_name,
        mode=mode,
        count=count or 0,
        selectors=parse_selectors(raw.get("selectors"), f"{at}.selectors", where),
        admin_access=admin is True,
        tolerations=parse_tolerations(raw.get("tolerations"), f"{at}.tolerations", where),
        capacity=capacity,
    )


def parse_claim_spec(spec: Mapping[str, Any], field: str, where: str) -> ClaimSpec:
    """A claim's (or a template's) ``spec``; ``field`` is its path (``spec``, ``spec.spec``)."""
    devices = wire.mapping(spec.get("devices"), f"{field}.devices", where)
    requests = []
    names: set[str] = set()
    for i, item in enumerate(wire.items(devices.get("requests"), f"{field}.devices.requests", where)):
        at = f"{field}.devices.requests[{i}]"
        name = _str(item, "name", at, where, required=True)
        if name in names:
            raise InvalidValue(f"{at}.name", name, "a request name not used before in the claim", where)
        names.add(name)
        exactly, first = item.get("exactly"), item.get("firstAvailable")
        if (exactly is None) == (first is None):
            raise InvalidValue(at, name, "exactly one of exactly or firstAvailable", where)
        if exactly is not None:
            alternatives: tuple[Request, ...] = (
                _request(wire.mapping(exactly, f"{at}.exactly", where), name, f"{at}.exactly", where, False),
            )
        else:
            subs = wire.items(first, f"{at}.firstAvailable", where)
            if not subs:
                raise InvalidValue(f"{at}.firstAvailable", first, "at least one subrequest", where)
            alternatives = tuple(
                _request(
                    s,
                    f"{name}/{_str(s, 'name', f'{at}.firstAvailable[{j}]', where, required=True)}",
                    f"{at}.firstAvailable[{j}]",
                    where,
                    True,
                )
                for j, s in enumerate(subs)
            )
        requests.append(DeviceRequest(name, alternatives, prioritized=first is not None))
    constraints = []
    for i, item in enumerate(wire.items(devices.get("constraints"), f"{field}.devices.constraints", where)):
        at = f"{field}.devices.constraints[{i}]"
        match, distinct = item.get("matchAttribute"), item.get("distinctAttribute")
        if (match is None) == (distinct is None):
            raise InvalidValue(at, dict(item), "exactly one of matchAttribute or distinctAttribute", where)
        attribute = match if match is not None else distinct
        if not isinstance(attribute, str) or "/" not in attribute:
            key = "matchAttribute" if match is not None else "distinctAttribute"
            raise InvalidValue(
                f"{at}.{key}", attribute, "a fully qualified attribute name (domain/name)", where
            )
        scope = item.get("requests") or []
        if not isinstance(scope, list) or not all(isinstance(r, str) for r in scope):
            raise InvalidValue(f"{at}.requests", scope, "a list of request names", where)
        constraints.append(Constraint(tuple(scope), attribute, distinct=distinct is not None))
    configs = []
    for i, config in enumerate(parse_configs(devices.get("config"), f"{field}.devices.config", where)):
        scope = config.get("requests") or []
        if not isinstance(scope, list) or not all(isinstance(r, str) for r in scope):
            raise InvalidValue(
                f"{field}.devices.config[{i}].requests", scope, "a list of request names", where
            )
        configs.append(config)
    return ClaimSpec(tuple(requests), tuple(constraints), tuple(configs))
