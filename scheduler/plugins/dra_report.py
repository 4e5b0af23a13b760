"""What ``gpuq simulate`` reports of DRA (docs/design.md "``gpuq simulate``"): ``resourceClaims``, each
claim with the devices allocated to it and the pods it is reserved for, and per pod that uses devices
its ``devices`` (``driver/pool/device``, with the consumed capacity of a share).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.reservation import is_reserved_for
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.interfaces import Handle
from gpuq_k8s.scheduler.plugins.dra_extended import device_claim_keys, uses_devices


def claims_report(handle: Handle) -> Mapping[str, list[dict[str, Any]]]:
    """``resourceClaims``: each claim, the devices allocated to it and the pods it is reserved for."""
    rows: list[dict[str, Any]] = []
    for namespace, name, obj in handle.objects.list(kinds.RESOURCE_CLAIM):
        status = obj.get("status")
        status = status if isinstance(status, Mapping) else {}
        allocation = status.get("allocation")
        results = (
            (allocation or {}).get("devices", {}).get("results") or []
            if isinstance(allocation, Mapping)
            else []
        )
        rows.append(
            {
                "namespace": namespace,
                "name": name,
                "allocated": allocation is not None,
                "devices": [_device_row(r) for r in results if isinstance(r, Mapping)],
                "reservedFor": [
                    str(c.get("name")) for c in status.get("reservedFor") or () if isinstance(c, Mapping)
                ],
            }
        )
    return {"resourceClaims": rows} if rows else {}


def pod_devices(handle: Handle, pod: PodInfo) -> Mapping[str, Any]:
    """A pod with claims (its implicit claim for extended resources among them): ``devices``, what
    its claims were allocated (``driver/pool/device``, with the consumed capacity of a share)."""
    if not uses_devices(handle, pod):
        return {}
    devices: list[dict[str, Any]] = []
    for key in device_claim_keys(pod):
        name = key.partition("/")[2]
        obj = handle.objects.get(kinds.RESOURCE_CLAIM, pod.namespace, name)
        status = obj.get("status") if obj is not None else None
        allocation = status.get("allocation") if isinstance(status, Mapping) else None
        if not isinstance(allocation, Mapping) or not is_reserved_for(obj or {}, pod.uid):
            continue
        for result in allocation.get("devices", {}).get("results") or []:
            devices.append({"claim": name, **_device_row(result)})
    return {"devices": devices}


def _device_row(result: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "request": result.get("request"),
        "device": f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}",
    }
    if result.get("consumedCapacity"):
        row["consumedCapacity"] = dict(result["consumedCapacity"])
    return row
