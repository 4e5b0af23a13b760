"""Builders of ``resource.k8s.io/v1`` objects for the DRA cycle's tests (unit and e2e): DeviceClasses,
ResourceSlices standing in for a driver, ResourceClaims and templates, and pods that use them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

API = "resource.k8s.io/v1"
DRIVER = "gpu.e2e.gpuq.example.com"


def device_class(
    name: str, driver: str = DRIVER, selector: str = "", extended_resource_name: str = ""
) -> dict[str, Any]:
    """A DeviceClass of ``driver``'s devices, narrowed by the CEL ``selector`` when given, serving
    pods that ask ``extended_resource_name`` when given (``spec.extendedResourceName``)."""
    expression = f'device.driver == "{driver}"' + (f" && ({selector})" if selector else "")
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def device(
    name: str,
    attributes: Mapping[str, str | int | bool] | None = None,
    capacity: Mapping[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One device: string, int and bool attributes; capacities as quantities; ``extra`` as given
    (``allowMultipleAllocations``, ``consumesCounters``...)."""
    attrs: dict[str, Any] = {}
    for key, value in (attributes or {}).items():
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
        attrs[key] = {kind: value}
    out: dict[str, Any] = {"name": name, **extra}
    if attrs:
        out["attributes"] = attrs
    if capacity:
        out["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    return out


def resource_slice(
    name: str,
    node: str,
    devices: Sequence[Mapping[str, Any]],
    driver: str = DRIVER,
    pool: str = "",
    **spec: Any,
) -> dict[str, Any]:
    """A slice of ``node``'s pool (named after the node unless ``pool``), generation 1, one slice."""
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
            **spec,
        },
    }


def exactly(
    name: str, device_class_name: str, count: int = 1, selector: str = "", **extra: Any
) -> dict[str, Any]:
    """A request for ``count`` devices of the class (``extra``: ``capacity``, ``allocationMode``...)."""
    body: dict[str, Any] = {"deviceClassName": device_class_name, "count": count, **extra}
    if selector:
        body["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": body}


def first_available(name: str, *subrequests: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": [dict(s) for s in subrequests]}


def claim_spec(*requests: Mapping[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": [dict(r) for r in requests]}}


def claim(
    name: str,
    namespace: str,
    *requests: Mapping[str, Any],
    uid: str = "",
    owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim; ``owner`` (pod name, pod uid) makes it a claim generated for that pod."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner[0], "uid": owner[1], "controller": True}
        ]
    return {"apiVersion": API, "kind": "ResourceClaim", "metadata": meta, "spec": claim_spec(*requests)}


def claim_template(name: str, namespace: str, *requests: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim_spec(*requests)},
    }


def use_claims(pod: dict[str, Any], *claims: str, templates: Sequence[str] = ()) -> dict[str, Any]:
    """``pod`` (an API object) using the ResourceClaims ``claims`` and ResourceClaimTemplates
    ``templates`` (each entry named after its object), every container asking for every one."""
    entries = [{"name": c, "resourceClaimName": c} for c in claims]
    entries += [{"name": t, "resourceClaimTemplateName": t} for t in templates]
    pod["spec"]["resourceClaims"] = entries
    for container in pod["spec"]["containers"]:
        container.setdefault("resources", {})["claims"] = [{"name": e["name"]} for e in entries]
    return pod


def devices_of(claim_obj: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each result of a claim's allocation."""
    allocation = (claim_obj.get("status") or {}).get("allocation") or {}
    return [
        (r["driver"], r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results") or []
    ]
