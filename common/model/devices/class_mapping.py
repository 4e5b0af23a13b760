"""DeviceClass -> resource name: how ElasticQuota and Queue capability count DRA devices, as Kueue's
``deviceClassMappings`` (KEP-2941) does (docs/design.md "Quota over devices", docs/configuration.md).

The ``capacity-scheduling`` and ``proportion`` plugins take a ``deviceClassMappings`` argument in
Kueue's shape::

    deviceClassMappings:
    - name: nvidia.com/gpu              # the resource the quotas name
      deviceClassNames: [gpu.nvidia.com, mig.nvidia.com]

A pod's claims then count as that resource, one unit per device its requests ask for, known before
any device is chosen (the quotas check them in PreFilter, like the pod's own requests, and charge them
with the pod): per request, its ``ExactCount`` count of devices of a mapped class; for a
``firstAvailable`` request its first subrequest (the preferred one); ``adminAccess`` requests and
``All`` requests (their count is only known on a node) are not counted. A claim shared by several
pods counts for each pod, as the pods' own requests do. A class no entry names is not counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuq_k8s.common.model.devices.claims import EXACT_COUNT, ResourceClaim
from gpuq_k8s.common.model.plugin_args import PluginArgs, expect, refuse

# A qualified resource name (``example.com/gpu``) and a DeviceClass name (a DNS subdomain).
_RESOURCE: Final = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_CLASS: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MAX_NAME: Final = 253


class DeviceClassMapping(BaseModel):
    """One entry: the resource ``name`` the quotas count the devices of ``deviceClassNames`` as."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, validate_by_alias=True)

    name: Annotated[str, expect("a resource name such as example.com/gpu")]
    device_class_names: Annotated[
        list[str], Field(min_length=1), expect("a non-empty list of DeviceClass names")
    ] = Field(alias="deviceClassNames")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if len(value) > _MAX_NAME or not _RESOURCE.match(value):
            raise refuse("a resource name such as example.com/gpu", value)
        return value

    @field_validator("device_class_names", mode="before")
    @classmethod
    def _classes(cls, value: Any) -> Any:
        if isinstance(value, list):
            for item in value:
                if not isinstance(item, str) or len(item) > _MAX_NAME or not _CLASS.match(item):
                    raise refuse("DeviceClass names (lowercase DNS subdomains such as gpu.nvidia.com)", item)
        return value


def class_map(entries: Iterable[DeviceClassMapping]) -> dict[str, str]:
    """DeviceClass name -> resource name (the entries were checked to name each class once)."""
    return {class_name: entry.name for entry in entries for class_name in entry.device_class_names}


def duplicate_classes(entries: Iterable[DeviceClassMapping]) -> list[tuple[int, int, str]]:
    """(entry index, class index, class name) of each class an earlier entry names already."""
    seen: set[str] = set()
    out = []
    for i, entry in enumerate(entries):
        for j, class_name in enumerate(entry.device_class_names):
            if class_name in seen:
                out.append((i, j, class_name))
            seen.add(class_name)
    return out


def mapped_requests(claims: Iterable[ResourceClaim], mapping: Mapping[str, str]) -> dict[str, int]:
    """What ``claims`` ask, as mapped resources (milli-units, as gpuq counts every extended resource):
    see the module doc."""
    out: dict[str, int] = {}
    for claim in claims:
        for request in claim.spec.requests:
            first = request.alternatives[0] if request.alternatives else None
            if first is None or first.admin_access or first.mode != EXACT_COUNT:
                continue
            resource = mapping.get(first.class_name)
            if resource is not None:
                out[resource] = out.get(resource, 0) + first.count * 1000
    return out


class DeviceClassArgs(PluginArgs):
    """The ``deviceClassMappings`` argument (see the module doc); a plugin taking it subclasses this."""

    device_class_mappings: list[DeviceClassMapping] = Field(default_factory=list, alias="deviceClassMappings")

    @field_validator("device_class_mappings", mode="after")
    @classmethod
    def _once(cls, value: list[DeviceClassMapping]) -> list[DeviceClassMapping]:
        twice = duplicate_classes(value)
        if twice:
            i, j, name = twice[0]
            raise refuse(
                f"each DeviceClass in one entry only (deviceClassMappings[{i}].deviceClassNames[{j}] "
                "maps it again)",
                name,
            )
        return value

    @property
    def classes(self) -> dict[str, str]:
        return class_map(self.device_class_mappings)
