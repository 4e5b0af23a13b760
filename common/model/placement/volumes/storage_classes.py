"""StorageClasses as the volume rules read them (``storage.k8s.io/v1``).

``binding_mode`` is ``Immediate`` or ``WaitForFirstConsumer``; an object without one (a manifest read by
``gpuq simulate``, never one an apiserver returns: it defaults the field) is ``Immediate``, as the
apiserver defaults it. ``allowed_topologies`` restricts where a provisioned volume may be: terms ORed,
each term's ``matchLabelExpressions`` ANDed (``key`` In ``values``), no term at all matching every node
(``v1helper.MatchTopologySelectorTerms``). A provisioner of ``kubernetes.io/no-provisioner`` (or none)
provisions nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuq_k8s.common.model import kinds, wire
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.node_selector import NodeSelector, Requirement

IMMEDIATE: Final = "Immediate"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"
BINDING_MODES: Final = (IMMEDIATE, WAIT_FOR_FIRST_CONSUMER)
NO_PROVISIONER: Final = "kubernetes.io/no-provisioner"


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: str = IMMEDIATE
    allowed_topologies: NodeSelector | None = None  # None: no restriction

    @property
    def delays_binding(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != NO_PROVISIONER

    def allows(self, node: str, labels: Mapping[str, str]) -> bool:
        """The node satisfies the class's allowed topologies."""
        return self.allowed_topologies is None or self.allowed_topologies.matches(node, labels)


def parse_storage_class(obj: Any) -> StorageClass:
    """A StorageClass API object (as JSON); an :class:`InvalidValue` naming it and the field otherwise."""
    kind = kinds.STORAGE_CLASS
    obj = wire.mapping(obj, kind.kind)
    meta = wire.mapping(obj.get("metadata"), "metadata", kind.kind)
    name = str(meta.get("name") or "")
    where = kind.ref("", name)
    if not name:
        raise InvalidValue("metadata.name", name, "a non-empty storageclass name", where)
    provisioner = obj.get("provisioner") or ""
    if not isinstance(provisioner, str):
        raise InvalidValue("provisioner", provisioner, "a provisioner name", where)
    mode = obj.get("volumeBindingMode") or IMMEDIATE
    if mode not in BINDING_MODES:
        raise InvalidValue("volumeBindingMode", mode, " or ".join(BINDING_MODES), where)
    return StorageClass(name, provisioner, str(mode), _topologies(obj.get("allowedTopologies"), where))


def _topologies(value: Any, where: str) -> NodeSelector | None:
    terms = wire.items(value, "allowedTopologies", where)
    if not terms:
        return None
    parsed: list[tuple[Requirement, ...]] = []
    for t, term in enumerate(terms):
        at = f"allowedTopologies[{t}].matchLabelExpressions"
        requirements: list[Requirement] = []
        for i, expression in enumerate(wire.items(term.get("matchLabelExpressions"), at, where)):
            key, values = expression.get("key"), expression.get("values")
            if not isinstance(key, str) or not key:
                raise InvalidValue(f"{at}[{i}].key", key, "a label key", where)
            if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
                raise InvalidValue(f"{at}[{i}].values", values, "a non-empty list of label values", where)
            requirements.append(Requirement(key, "In", tuple(values)))
        parsed.append(tuple(requirements))
    return NodeSelector(tuple(parsed))
