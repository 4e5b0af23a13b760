"""The shape every API object admission reads must have, checked before any rule reads it.

The apiserver guarantees it for what it sends; ``gpuq simulate --admission`` and malformed request bodies
do not. A refusal names the object and the field (:class:`~common.model.crd.ObjectShape` is the model).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from gpuq_k8s.common.model.crd import ObjectShape
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.wire import object_ref


def check_shape(obj: Mapping[str, Any], kind: str) -> None:
    """Raise :class:`InvalidValue` when ``obj`` is not shaped like an API object (metadata with a
    string name and namespace, string-to-string labels and annotations, mapping spec and status)."""
    if _plain_shape(obj):
        return  # nearly every object: no pydantic pass, which costs more than the rest of the check
    try:
        ObjectShape.model_validate(obj)
    except pydantic.ValidationError as err:
        first = err.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "(object)"
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
        namespace = namespace if isinstance(namespace, str) else ""
        where = object_ref(kind, namespace, name) if isinstance(name, str) else kind
        raise InvalidValue(field, first.get("input"), first["msg"], where) from None


def _plain_shape(obj: Any) -> bool:
    """True only for objects :class:`ObjectShape` accepts, checked without pydantic; False when unsure.

    Exact types (``type(x) is str``) are stricter than pydantic's strict mode, so anything this does
    not vouch for goes through :class:`ObjectShape`, and every refusal and its message come from there.
    """
    if type(obj) is not dict:
        return False
    meta = obj.get("metadata")
    if type(meta) is not dict or type(meta.get("name", "")) is not str:
        return False
    if type(meta.get("namespace", "")) is not str:
        return False
    for key in ("labels", "annotations"):
        entries = meta.get(key)
        if entries is not None and (
            type(entries) is not dict
            or not all(type(k) is str and type(v) is str for k, v in entries.items())
        ):
            return False
    spec, status = obj.get("spec"), obj.get("status")
    return (spec is None or type(spec) is dict) and (status is None or type(status) is dict)
