"""The pure part of the informer: object keys, and what changed between two snapshots.

A re-list (after 410 Gone, an inactivity timeout or a reconnect) replaces the cache wholesale; the
handlers must still hear about each object that appeared, changed or vanished in between, exactly
once, or a scheduler would keep charging quota for a pod deleted while the watch was down.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpuq_k8s.common.model.wire import Obj

Key = tuple[str, str]
ChangeType = Literal["add", "update", "delete"]


def object_key(obj: Obj) -> Key:
    """``(namespace, name)``; the namespace is empty for cluster-scoped objects."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True, slots=True)
class Change:
    """One delivered change: ``obj`` is the new object (the last known one for a delete)."""

    type: ChangeType
    key: Key
    obj: Obj
    old: Obj | None = None


def diff(old: Mapping[Key, Obj], new: Mapping[Key, Obj]) -> list[Change]:
    """Changes turning ``old`` into ``new``: deletes first, then adds and updates, each by key.

    An object counts as updated when its resourceVersion differs, or when its uid differs (deleted
    and re-created under the same name while nobody watched: handlers see an update whose ``old`` has
    another uid, and can tell).
    """
    changes: list[Change] = [Change("delete", key, obj) for key, obj in sorted(old.items()) if key not in new]
    for key in sorted(new):
        obj = new[key]
        before = old.get(key)
        if before is None:
            changes.append(Change("add", key, obj))
        elif resource_version(before) != resource_version(obj) or _uid(before) != _uid(obj):
            changes.append(Change("update", key, obj, before))
    return changes


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def strip_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The default informer transform: managedFields are often half an object and nobody reads them."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj
