"""ResourceSlice (``resource.k8s.io/v1``): one driver's devices or shared counters for one pool.

A slice holds either ``devices`` or ``sharedCounters`` (a partitionable GPU publishes two slices in
one pool: its counter sets, and the partitions that consume them). Node selection is exactly one of
``nodeName``, ``nodeSelector``, ``allNodes`` and ``perDeviceNodeSelection`` (then each device says
where it is reachable). ``pool.generation`` and ``pool.resourceSliceCount`` say which slices make up
the current pool (:mod:`.pools`). Parsing errors name ``ResourceSlice/<name>`` and the field path.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.devices.device import Device, _counters, _str, parse_device
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.node_selector import NodeSelector, parse_node_selector

API_VERSION: Final = "resource.k8s.io/v1"
KIND: Final = "ResourceSlice"
_SERIALS: Final = itertools.count(1)


@dataclass(slots=True, eq=False)
class ResourceSlice:
    """A parsed slice. ``serial`` is unique per parsed object: caches of per-slice results key on it,
    so a changed slice (a new object) never meets a stale entry."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str = ""
    all_nodes: bool = False
    node_selector: NodeSelector | None = None
    per_device: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[tuple[str, Mapping[str, int]], ...] = ()
    serial: int = field(default_factory=lambda: next(_SERIALS))

    @property
    def ref(self) -> str:
        return wire.object_ref(KIND, "", self.name)

    @property
    def node_selection(self) -> bool:
        """Whether the slice says where it is reachable at all (else an unknown future extension)."""
        return bool(self.node_name or self.all_nodes or self.node_selector is not None or self.per_device)

    @classmethod
    def from_dict(cls, obj: Any) -> ResourceSlice:
        _, spec, _, _, name, where = wire.object_parts(obj, KIND, namespaced=False)
        driver = _str(spec, "driver", "spec", where, required=True)
        pool = wire.mapping(spec.get("pool"), "spec.pool", where)
        pool_name = _str(pool, "name", "spec.pool", where, required=True)
        generation = _integer(pool, "generation", where, minimum=0)
        count = _integer(pool, "resourceSliceCount", where, minimum=1)
        selector = spec.get("nodeSelector")
        devices = tuple(
            parse_device(d, driver, f"spec.devices[{i}]", where)
            for i, d in enumerate(wire.items(spec.get("devices"), "spec.devices", where))
        )
        counters = tuple(
            (
                _str(c, "name", f"spec.sharedCounters[{i}]", where, required=True),
                _counters(c.get("counters"), f"spec.sharedCounters[{i}].counters", where),
            )
            for i, c in enumerate(wire.items(spec.get("sharedCounters"), "spec.sharedCounters", where))
        )
        if devices and counters:
            raise InvalidValue(
                "spec", "devices and sharedCounters", "either devices or sharedCounters", where
            )
        node_name = _str(spec, "nodeName", "spec", where)
        all_nodes = spec.get("allNodes") is True
        per_device = spec.get("perDeviceNodeSelection") is True
        chosen = [
            k
            for k, on in (
                ("nodeName", node_name),
                ("nodeSelector", selector is not None),
                ("allNodes", all_nodes),
                ("perDeviceNodeSelection", per_device),
            )
            if on
        ]
        if len(chosen) > 1:
            raise InvalidValue(
                "spec",
                ", ".join(chosen),
                "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection",
                where,
            )
        if not per_device:
            for i, device in enumerate(devices):
                if device.node_name or device.all_nodes or device.node_selector is not None:
                    raise InvalidValue(
                        f"spec.devices[{i}]",
                        device.name,
                        "no per-device node selection unless spec.perDeviceNodeSelection",
                        where,
                    )
        return cls(
            name=name,
            driver=driver,
            pool=pool_name,
            generation=generation,
            slice_count=count,
            node_name=node_name,
            all_nodes=all_nodes,
            node_selector=parse_node_selector(selector, "spec.nodeSelector", where)
            if selector is not None
            else None,
            per_device=per_device,
            devices=devices,
            shared_counters=counters,
        )


def _integer(raw: Mapping[str, Any], key: str, where: str, minimum: int) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidValue(f"spec.pool.{key}", value, f"an integer of at least {minimum}", where)
    return value
