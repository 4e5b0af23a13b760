"""Extended resources backed by DRA (DRAExtendedResource, beta and on by default in 1.36).

A DeviceClass with ``spec.extendedResourceName: example.com/gpu`` serves pods that ask for
``example.com/gpu: 2`` in a container, as every class serves ``deviceclass.resource.kubernetes.io/
<class name>``. When two classes name the same resource, the oldest (then the first by name) wins,
as kube-scheduler's extended resource cache decides.

On a node whose allocatable has none of that resource (no device plugin serves it there),
kube-scheduler allocates it through DRA with an implicit claim it builds for the pod: one
``ExactCount`` request per container and resource, named ``container-<i>-request-<j>`` (``i`` the
container's index in init containers then containers, ``j`` the resource's index among the
container's sorted requests); a classic init container reuses the requests of the containers after
it before asking for more, and of several classic init containers only the largest request is kept
(they run one at a time). :func:`extended_requests` builds those requests and the container ->
request mappings the pod's status gets; :func:`extended_claim` the in-memory claim the allocator
takes (created in the API at PreBind, with :func:`extended_claim_object`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.devices.claims import (
    EXACT_COUNT,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    ClaimSpec,
    DeviceRequest,
    Request,
    ResourceClaim,
)
from gpuq_k8s.common.model.devices.classes import IMPLICIT_PREFIX, DeviceClass
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.quantity import parse_quantity

IN_MEMORY_NAME: Final = "<extended-resources>"  # never a valid claim name, as upstream's


def is_extended_resource_name(name: str) -> bool:
    """``v1helper.IsExtendedResourceName`` or the implicit class prefix: a domain-qualified name
    outside ``kubernetes.io`` and not a quota ``requests.`` name."""
    if name.startswith(IMPLICIT_PREFIX):
        return True
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


class ExtendedResourceClasses:
    """Resource name -> the DeviceClass that serves it."""

    __slots__ = ("_by_resource",)

    def __init__(self, classes: Iterable[DeviceClass]) -> None:
        self._by_resource: dict[str, DeviceClass] = {}
        # Oldest first, then by name: the first to claim an explicit name keeps it.
        for device_class in sorted(classes, key=lambda c: (c.creation_timestamp, c.name)):
            explicit = device_class.extended_resource_name
            if explicit and explicit not in self._by_resource:
                self._by_resource[explicit] = device_class
            self._by_resource[device_class.implicit_resource_name] = device_class

    def get(self, resource: str) -> DeviceClass | None:
        return self._by_resource.get(resource)

    def served(self) -> list[tuple[str, DeviceClass]]:
        """Every resource name a class serves, with that class, by name."""
        return sorted(self._by_resource.items(), key=lambda item: item[0])


@dataclass(frozen=True, slots=True)
class ContainerMapping:
    """``status.extendedResourceClaimStatus.requestMappings[]``."""

    container: str
    resource: str
    request: str


def dra_resources(
    requests: Mapping[str, int], allocatable: Mapping[str, int], classes: ExtendedResourceClasses
) -> dict[str, int]:
    """Of a pod's extended resource requests (whole units), those a node must serve through DRA:
    mapped to a class and not in the node's allocatable (a device plugin serves the others)."""
    return {
        name: amount
        for name, amount in requests.items()
        if amount
        and is_extended_resource_name(name)
        and classes.get(name) is not None
        and not allocatable.get(name)
    }


def _count(container: Mapping[str, Any], resource: str, where: str) -> int:
    requests = wire.mapping(
        wire.mapping(container.get("resources"), "resources", where).get("requests"), "requests", where
    )
    if resource not in requests:
        return 0
    quantity = parse_quantity(requests[resource], f"container {container.get('name')} requests {resource}")
    if quantity.denominator != 1:
        raise InvalidValue(
            f"container {container.get('name')} requests {resource}",
            requests[resource],
            "a whole number",
            where,
        )
    return int(quantity)


def _container_request(  # noqa: PLR0917 - the positional order of upstream's createResourceRequestAndMappings
    index: int,
    container: Mapping[str, Any],
    resource: str,
    class_name: str,
    reusable: list[Request | None],
    where: str,
) -> tuple[Request | None, list[ContainerMapping]]:
    wanted = _count(container, resource, where)
    if wanted == 0:
        return None, []
    name = str(container.get("name") or "")
    mappings = []
    total = 0
    for other in reusable:
        if other is not None:
            total += other.count
            mappings.append(ContainerMapping(name, resource, other.name))
            if total >= wanted:
                return None, mappings
    keys = sorted(
        wire.mapping(
            wire.mapping(container.get("resources"), "resources", where).get("requests"), "requests", where
        )
    )
    request = Request(
        f"container-{index}-request-{keys.index(resource)}", class_name, EXACT_COUNT, wanted - total
    )
    mappings.append(ContainerMapping(name, resource, request.name))
    return request, mappings


def extended_requests(
    spec: Mapping[str, Any], resources: Iterable[str], classes: ExtendedResourceClasses, where: str = "Pod"
) -> tuple[tuple[Request, ...], tuple[ContainerMapping, ...]]:
    """The implicit claim's requests for ``resources`` (served through DRA on the node) and the
    container mappings (kube-scheduler ``createRequestsAndMappings``)."""
    inits = wire.items(spec.get("initContainers"), "spec.initContainers", where)
    containers = [*inits, *wire.items(spec.get("containers"), "spec.containers", where)]
    short_lived = [i for i, c in enumerate(inits) if c.get("restartPolicy") != "Always"]
    long_lived = [i for i in range(len(containers)) if i not in short_lived]
    requests: list[Request] = []
    mappings: list[ContainerMapping] = []
    for resource in sorted(set(resources)):
        device_class = classes.get(resource)
        if device_class is None:
            continue
        long_requests: list[Request | None] = [None] * len(containers)
        long_mappings: list[ContainerMapping] = []
        for i in long_lived:
            request, found = _container_request(i, containers[i], resource, device_class.name, [], where)
            long_requests[i] = request
            long_mappings += found
        largest: Request | None = None
        short_names: set[str] = set()
        short_mappings: list[ContainerMapping] = []
        for i in short_lived:
            request, found = _container_request(
                i, containers[i], resource, device_class.name, long_requests[i:], where
            )
            if request is not None:
                short_names.add(request.name)
                if largest is None or largest.count < request.count:
                    largest = request
            short_mappings += found
        if largest is not None and len(short_names) > 1:
            short_mappings = [
                ContainerMapping(m.container, m.resource, largest.name) if m.request in short_names else m
                for m in short_mappings
            ]
        if largest is not None:
            requests.append(largest)
        requests += [r for r in long_requests if r is not None]
        mappings += long_mappings + short_mappings
    requests.sort(key=lambda r: r.name)
    return tuple(requests), tuple(mappings)


def extended_claim(
    namespace: str, pod_name: str, requests: Iterable[Request], name: str = IN_MEMORY_NAME
) -> ResourceClaim:
    """The in-memory claim (name ``<extended-resources>`` unless given) the allocator allocates for
    them."""
    return ResourceClaim(
        namespace=namespace,
        name=name,
        spec=ClaimSpec(tuple(DeviceRequest(r.name, (r,)) for r in requests)),
        annotations={EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
    )


def extended_claim_object(
    namespace: str, pod_name: str, pod_uid: str, requests: Iterable[Request], name: str = ""
) -> dict[str, Any]:
    """The ResourceClaim to create for it: owned by the pod, named ``name``, else after the pod by
    the apiserver (``generateName``)."""
    naming = {"name": name} if name else {"generateName": f"{pod_name}-extended-resources-"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": namespace,
            **naming,
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid, "controller": True}
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r.name,
                        "exactly": {
                            "deviceClassName": r.class_name,
                            "allocationMode": EXACT_COUNT,
                            "count": r.count,
                        },
                    }
                    for r in requests
                ]
            }
        },
    }


def extended_claim_name(pod_name: str, pod_uid: str) -> str:
    """The name gpuq gives the pod's claim: ``<pod>-extended-resources-<5 of its uid>``, fixed for the
    pod (upstream lets the apiserver generate one; a fixed name lets the PreBind writes, made as data
    before any is sent, name the claim, and a retry or a restarted leader find it by name)."""
    suffix = "".join(c for c in pod_uid if c.isalnum())[:5].lower() or "x"
    return f"{pod_name[:37]}-extended-resources-{suffix}"
