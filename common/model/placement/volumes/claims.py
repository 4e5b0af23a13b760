"""PersistentVolumeClaims as the volume rules read them (``core/v1``), and the annotations the PV
controller and the scheduler exchange on them (``component-helpers/storage/volume``).

A claim's storage class is its ``volume.beta.kubernetes.io/storage-class`` annotation, else
``spec.storageClassName``, else none (``GetPersistentVolumeClaimClass``); it is *fully bound* when it
names its volume and carries ``pv.kubernetes.io/bind-completed`` (``isPVCFullyBound``). Its selector
is a LabelSelector over PersistentVolume labels (``matchLabels`` ANDed with ``matchExpressions``:
``In``, ``NotIn``, ``Exists``, ``DoesNotExist``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model import kinds, wire
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.quantity import to_units

ANN_SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED: Final = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER: Final = "pv.kubernetes.io/bound-by-controller"
ANN_BETA_STORAGE_CLASS: Final = "volume.beta.kubernetes.io/storage-class"
ANN_STORAGE_PROVISIONER: Final = "volume.kubernetes.io/storage-provisioner"

READ_WRITE_ONCE_POD: Final = "ReadWriteOncePod"
ACCESS_MODES: Final = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", READ_WRITE_ONCE_POD)
FILESYSTEM: Final = "Filesystem"
VOLUME_MODES: Final = (FILESYSTEM, "Block")
CLAIM_LOST: Final = "Lost"
CLAIM_BOUND: Final = "Bound"
SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class Selector:
    """A LabelSelector: ``labels`` (matchLabels) and ``expressions`` (key, operator, values)."""

    labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(key) != value for key, value in self.labels):
            return False
        for key, operator, values in self.expressions:
            value = labels.get(key)
            if operator == "In" and (value is None or value not in values):
                return False
            if operator == "NotIn" and value is not None and value in values:
                return False
            if operator == "Exists" and value is None:
                return False
            if operator == "DoesNotExist" and value is not None:
                return False
        return True


@dataclass(frozen=True, slots=True)
class Claim:
    """One PersistentVolumeClaim. ``request`` is ``spec.resources.requests.storage`` in bytes (0 when
    absent, ``has_request`` then False); ``storage_class`` is ``GetPersistentVolumeClaimClass``;
    ``controller_uid`` the UID of its controlling owner (a generic ephemeral volume's pod), None
    without one."""

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    storage_class: str = ""
    volume_name: str = ""
    phase: str = "Pending"
    access_modes: frozenset[str] = frozenset()
    request: int = 0
    has_request: bool = False
    selector: Selector | None = None
    volume_mode: str = FILESYSTEM
    attributes_class: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False
    controller_uid: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return kinds.PERSISTENT_VOLUME_CLAIM.ref(self.namespace, self.name)

    @property
    def fully_bound(self) -> bool:
        """Bound to its volume by the PV controller (``isPVCFullyBound``)."""
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations

    @property
    def selected_node(self) -> str | None:
        """The node the scheduler chose for its provisioning (``volume.kubernetes.io/selected-node``)."""
        return self.annotations.get(ANN_SELECTED_NODE)


def parse_claim(obj: Any) -> Claim:
    """A PersistentVolumeClaim API object (as JSON); an :class:`InvalidValue` naming the claim and the
    field when it is malformed."""
    kind = kinds.PERSISTENT_VOLUME_CLAIM
    meta, spec, status, namespace, name, where = wire.object_parts(obj, kind.kind, namespaced=True)
    try:
        _, annotations = wire.labels_and_annotations(meta)
        storage_class = annotations.get(ANN_BETA_STORAGE_CLASS)
        if storage_class is None:
            storage_class = _string(spec.get("storageClassName"), "spec.storageClassName")
        requests = wire.mapping(
            wire.mapping(spec.get("resources"), "spec.resources").get("requests"), "spec.resources.requests"
        )
        raw_request = requests.get("storage")
        claim = Claim(
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            storage_class=storage_class,
            volume_name=_string(spec.get("volumeName"), "spec.volumeName"),
            phase=_string(status.get("phase"), "status.phase") or "Pending",
            access_modes=access_modes(spec.get("accessModes"), "spec.accessModes"),
            request=0
            if raw_request is None
            else to_units("storage", raw_request, "spec.resources.requests.storage"),
            has_request=raw_request is not None,
            selector=parse_selector(spec.get("selector"), "spec.selector"),
            volume_mode=volume_mode(spec.get("volumeMode"), "spec.volumeMode"),
            attributes_class=_string(spec.get("volumeAttributesClassName"), "spec.volumeAttributesClassName"),
            annotations=annotations,
            deleting=bool(meta.get("deletionTimestamp")),
            controller_uid=_controller_uid(meta.get("ownerReferences")),
        )
    except InvalidValue as err:
        raise err.located(where) from None
    return claim


def _string(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidValue(field, value, "a string")
    return value


def access_modes(value: Any, field: str) -> frozenset[str]:
    """``accessModes`` of a claim or a volume: a list of the four modes."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(mode in ACCESS_MODES for mode in value):
        raise InvalidValue(field, value, f"a list of {', '.join(ACCESS_MODES)}")
    return frozenset(value)


def volume_mode(value: Any, field: str) -> str:
    """``volumeMode``: Filesystem (the default) or Block."""
    if value is None:
        return FILESYSTEM
    if value not in VOLUME_MODES:
        raise InvalidValue(field, value, " or ".join(VOLUME_MODES))
    return str(value)


def parse_selector(value: Any, field: str) -> Selector | None:
    """A LabelSelector; None when absent (no selection). Malformed expressions are errors, as the
    apiserver (and ``LabelSelectorAsSelector``) refuses them."""
    if value is None:
        return None
    raw = wire.mapping(value, field)
    labels = wire.string_map(raw.get("matchLabels"), f"{field}.matchLabels")
    expressions: list[tuple[str, str, frozenset[str]]] = []
    for i, expression in enumerate(wire.items(raw.get("matchExpressions"), f"{field}.matchExpressions")):
        at = f"{field}.matchExpressions[{i}]"
        key, operator = expression.get("key"), expression.get("operator")
        if not isinstance(key, str) or not key:
            raise InvalidValue(f"{at}.key", key, "a label key")
        if operator not in SELECTOR_OPERATORS:
            raise InvalidValue(f"{at}.operator", operator, f"one of {', '.join(SELECTOR_OPERATORS)}")
        values = expression.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InvalidValue(f"{at}.values", values, "a list of strings")
        if operator in ("In", "NotIn") and not values:
            raise InvalidValue(f"{at}.values", values, f"at least one value for {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise InvalidValue(f"{at}.values", values, f"no values for {operator}")
        expressions.append((key, str(operator), frozenset(values)))
    return Selector(tuple(sorted(labels.items())), tuple(expressions))


def _controller_uid(value: Any) -> str | None:
    for i, owner in enumerate(wire.items(value, "metadata.ownerReferences")):
        if owner.get("controller") is True:
            uid = owner.get("uid") or ""
            if not isinstance(uid, str):
                raise InvalidValue(f"metadata.ownerReferences[{i}].uid", uid, "the owner's UID")
            return uid
    return None
