"""Reading user input as it arrives (JSON or YAML decoded into Python): objects, arguments, weights.

An API object that went through an apiserver has the right shapes, but gpuq also reads manifests
(``gpuq simulate``), scheduler configuration files and objects that predate the webhook. A list
where a map belongs, or a number where a string belongs, must be an :class:`InvalidValue` naming the
object, the field and the value (design.md, "Engineering conventions"), never an ``AttributeError``
from deep inside a parser. These readers are the one place the engines get that from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, NamedTuple, TypeAlias, TypeVar

from pydantic import BaseModel, ValidationError

from gpuq_k8s.common.model.errors import InvalidValue

# An API object as the API returns it or a manifest holds it: decoded JSON, read-only by convention.
Obj: TypeAlias = Mapping[str, Any]

# Kubernetes resource names (a qualified name with an optional prefix): ``cpu``, ``nvidia.com/gpu``.
RESOURCE_NAME_RE: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$")
# Volcano's weights are Go ints, but gpuq multiplies them into float64 scores: a weight beyond this
# would overflow the float conversion (``int too large to convert to float``) inside the scheduler.
MAX_WEIGHT: Final = 1_000_000
_INTEGER_TEXT: Final = re.compile(r"\s*[+]?[0-9]{1,18}\s*")


def rfc3339_seconds(text: str) -> float | None:
    """A Kubernetes timestamp (``2026-11-26T10:15:57Z``, RFC 3339) as seconds since the epoch; None
    when it is empty or not such a timestamp (an object the apiserver did not write)."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


def object_ref(kind: str, namespace: str, name: str) -> str:
    """How messages and events name an object (design.md "Object references"): ``Kind/namespace/name``
    for a namespaced object, ``Kind/name`` for a cluster-scoped one (empty ``namespace``): ``Pod/ns/p``,
    ``Queue/team-a``, ``Node/n1``."""
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def split_ref(ref: str) -> tuple[str, str, str]:
    """``(kind, namespace, name)`` of an :func:`object_ref`; the namespace is empty for ``Kind/name``
    (object names never hold a ``/``)."""
    kind, _, rest = ref.partition("/")
    namespace, slash, name = rest.partition("/")
    return (kind, namespace, name) if slash else (kind, "", namespace)


def section(obj: Any, name: str) -> Mapping[str, Any]:
    """``obj[name]`` (an object's ``status``, ``spec`` or ``metadata``) when both are mappings, else
    empty: for readers of what gpuq writes or merely passes on, which must never fail on an object
    whose own reader reports it malformed (design.md Semantics 17)."""
    part = obj.get(name) if isinstance(obj, Mapping) else None
    return part if isinstance(part, Mapping) else {}


def mapping(value: Any, field: str, where: str = "") -> Mapping[str, Any]:
    """``value`` as a mapping; ``None`` (an absent or ``null`` field) is an empty one."""
    if type(value) is dict:  # decoded JSON: no ABC check (a cold start parses 150,000 pods)
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidValue(field, value, "a mapping", where)
    return value


def items(value: Any, field: str, where: str = "") -> list[Mapping[str, Any]]:
    """``value`` as a list of mappings (containers, taints, conditions); ``None`` is empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidValue(field, value, "a list of mappings", where)
    for i, item in enumerate(value):
        if type(item) is not dict and not isinstance(item, Mapping):
            raise InvalidValue(f"{field}[{i}]", item, "a mapping", where)
    return value


def string_map(value: Any, field: str, where: str = "") -> dict[str, str]:
    """``value`` as a map of string to string (labels, annotations, nodeSelector)."""
    if value is None:
        return {}
    if type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items()):
        return dict(value)  # decoded JSON, all strings: the common case without a check per entry
    result: dict[str, str] = {}
    for key, item in mapping(value, field, where).items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidValue(f"{field}[{key}]", item, "a string value under a string key", where)
        result[key] = item
    return result


class ObjectParts(NamedTuple):
    """A core API object's parts as mappings, with the ``Kind/namespace/name`` that errors name."""

    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    namespace: str
    name: str
    where: str


def object_parts(obj: Any, kind: str, *, namespaced: bool) -> ObjectParts:
    """``obj``'s metadata, spec and status, checked to be mappings, and its non-empty name.

    A namespaced object without a namespace is in ``default``, as the apiserver defaults it; a
    cluster-scoped one has the empty namespace (its ``where`` is ``Node/name``).
    """
    obj = mapping(obj, kind)
    meta = mapping(obj.get("metadata"), "metadata", kind)
    namespace = str(meta.get("namespace") or "default") if namespaced else ""
    name = str(meta.get("name") or "")
    where = object_ref(kind, namespace, name)
    if not name:
        raise InvalidValue("metadata.name", name, f"a non-empty {kind.lower()} name", where)
    try:
        spec = mapping(obj.get("spec"), "spec")
        status = mapping(obj.get("status"), "status")
    except InvalidValue as err:
        raise err.located(where) from None
    return ObjectParts(meta, spec, status, namespace, name, where)


def labels_and_annotations(metadata: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """An object's labels and annotations as string maps: the values feed parsers that take strings
    (card discovery, quota annotations), as the apiserver enforces."""
    return (
        string_map(metadata.get("labels"), "metadata.labels"),
        string_map(metadata.get("annotations"), "metadata.annotations"),
    )


def weight(value: Any, field: str, error: type[InvalidValue], *, minimum: int) -> int:
    """A plugin weight: an integer (or integral float or digit string) from ``minimum`` to MAX_WEIGHT.

    ``2.5`` is refused rather than truncated to 2, as Volcano's ``GetInt`` would.
    """
    expected = f"an integer from {minimum} to {MAX_WEIGHT}"
    if isinstance(value, bool):
        raise error(field, value, expected)
    if isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        number = int(value)
    else:
        raise error(field, value, expected)
    if not minimum <= number <= MAX_WEIGHT:
        raise error(field, value, expected)
    return number


def validation_error(err: ValidationError, where: str) -> InvalidValue:
    """The first problem of a pydantic ``ValidationError`` as one :class:`InvalidValue` line.

    The field is the dotted path (union member tags such as ``str``/``int`` dropped), the expected
    part pydantic's message without its "Input should be" preamble.
    """
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"] if str(p) not in _UNION_TAGS)
    expected = first["msg"].removeprefix("Input should be ").removeprefix("Input ")
    return InvalidValue(field or "object", first.get("input"), expected, where)


Model = TypeVar("Model", bound=BaseModel)


def namespaced_object(model: type[Model], obj: Any, kind: str) -> tuple[Model, str, str, str]:
    """Validate a namespaced API object with its wire ``model``.

    Returns the parsed object, its namespace (``default`` when unset, as the apiserver defaults it),
    its name and its ``Kind/namespace/name`` location. Every problem, a shape error or a missing
    name, is one :class:`InvalidValue` naming that location.
    """
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    where = object_ref(kind, str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    try:
        parsed = model.model_validate(obj)
    except ValidationError as err:
        raise validation_error(err, where) from None
    # Validation passed, so metadata's name and namespace are strings (or absent).
    name = str(meta.get("name") or "")
    if not name:
        raise InvalidValue("metadata.name", name, "a non-empty name", where)
    return parsed, str(meta.get("namespace") or "default"), name, where


# pydantic names the member of a `str | int | float` union a value failed against in the location.
_UNION_TAGS: Final = frozenset({"str", "int", "float", "bool"})
