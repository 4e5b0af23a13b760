"""CSINodes as the volume rules read them (``storage.k8s.io/v1``): per CSI driver its volume limit
(``spec.drivers[].allocatable.count``; none reported: no limit) and topology keys, and the in-tree
plugins migrated to CSI on the node (the ``storage.alpha.kubernetes.io/migrated-plugins`` annotation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model import kinds, wire
from gpuq_k8s.common.model.errors import InvalidValue

MIGRATED_PLUGINS: Final = "storage.alpha.kubernetes.io/migrated-plugins"


@dataclass(frozen=True, slots=True)
class CSINode:
    """``limits``: driver -> allocatable volume count, only for drivers that report one;
    ``topology_keys``: driver -> the node label keys its volumes' topology uses."""

    name: str
    drivers: tuple[str, ...] = ()
    limits: Mapping[str, int] = field(default_factory=dict)
    topology_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    migrated: frozenset[str] = frozenset()


def parse_csi_node(obj: Any) -> CSINode:
    """A CSINode API object (as JSON); an :class:`InvalidValue` naming it and the field otherwise."""
    kind = kinds.CSI_NODE
    meta, spec, _, _, name, where = wire.object_parts(obj, kind.kind, namespaced=False)
    try:
        _, annotations = wire.labels_and_annotations(meta)
        migrated = frozenset(p.strip() for p in annotations.get(MIGRATED_PLUGINS, "").split(",") if p.strip())
        drivers: list[str] = []
        limits: dict[str, int] = {}
        topology: dict[str, tuple[str, ...]] = {}
        for i, driver in enumerate(wire.items(spec.get("drivers"), "spec.drivers")):
            at = f"spec.drivers[{i}]"
            driver_name = driver.get("name")
            if not isinstance(driver_name, str) or not driver_name:
                raise InvalidValue(f"{at}.name", driver_name, "a CSI driver name")
            drivers.append(driver_name)
            count = wire.mapping(driver.get("allocatable"), f"{at}.allocatable").get("count")
            if count is not None:
                if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                    raise InvalidValue(f"{at}.allocatable.count", count, "a non-negative integer")
                limits[driver_name] = count
            keys = driver.get("topologyKeys") or []
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise InvalidValue(f"{at}.topologyKeys", keys, "a list of label keys")
            topology[driver_name] = tuple(keys)
    except InvalidValue as err:
        raise err.located(where) from None
    return CSINode(name, tuple(drivers), limits, topology, migrated)
