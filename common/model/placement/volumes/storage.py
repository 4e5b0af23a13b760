"""Where the volume rules look objects up: the :class:`Storage` protocol (the scheduler implements it over
its object store, ``scheduler/cluster/storage.py``) and :class:`Catalog`, a plain one over lists of
objects (``gpuq simulate``'s controller, the tests).

A lookup answers the parsed object or None when there is none; a malformed object raises the
:class:`~common.model.errors.InvalidValue` that names it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from gpuq_k8s.common.model.placement.volumes.claims import Claim
from gpuq_k8s.common.model.placement.volumes.csi_nodes import CSINode
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import PersistentVolume
from gpuq_k8s.common.model.placement.volumes.storage_classes import StorageClass


class Storage(Protocol):
    def claim(self, namespace: str, name: str) -> Claim | None: ...

    def volume(self, name: str) -> PersistentVolume | None: ...

    def storage_class(self, name: str) -> StorageClass | None: ...

    def csi_node(self, name: str) -> CSINode | None: ...

    def volumes_of_class(self, storage_class: str) -> tuple[PersistentVolume, ...]:
        """The PersistentVolumes of ``storage_class`` ("" for those without one), by name."""
        ...


@dataclass
class Catalog:
    """A :class:`Storage` over given objects (keyed as the lookups ask for them)."""

    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    volumes: dict[str, PersistentVolume] = field(default_factory=dict)
    classes: dict[str, StorageClass] = field(default_factory=dict)
    csi_nodes: dict[str, CSINode] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        claims: Iterable[Claim] = (),
        volumes: Iterable[PersistentVolume] = (),
        classes: Iterable[StorageClass] = (),
        csi_nodes: Iterable[CSINode] = (),
    ) -> Catalog:
        return cls(
            {(c.namespace, c.name): c for c in claims},
            {v.name: v for v in volumes},
            {c.name: c for c in classes},
            {n.name: n for n in csi_nodes},
        )

    def claim(self, namespace: str, name: str) -> Claim | None:
        return self.claims.get((namespace, name))

    def volume(self, name: str) -> PersistentVolume | None:
        return self.volumes.get(name)

    def storage_class(self, name: str) -> StorageClass | None:
        return self.classes.get(name)

    def csi_node(self, name: str) -> CSINode | None:
        return self.csi_nodes.get(name)

    def volumes_of_class(self, storage_class: str) -> tuple[PersistentVolume, ...]:
        return tuple(v for _, v in sorted(self.volumes.items()) if v.storage_class == storage_class)
