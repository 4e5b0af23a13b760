"""Building and applying the JSONPatch (RFC 6902) operations the mutators emit.

Mutators only set map entries (annotations, ``spec.schedulerName``), so building is: "make sure the
parent map exists, then add or replace the key". Applying is here too, for ``gpuq simulate
--admission`` and for tests that check a patch does what it says on a copy of the object.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from gpuq_k8s.webhook.review import PatchOp


def escape(token: str) -> str:
    """A JSON Pointer reference token (RFC 6901: ``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def set_entries(obj: Mapping[str, Any], path: tuple[str, ...], entries: Mapping[str, Any]) -> list[PatchOp]:
    """Operations that set ``entries`` in the map at ``path`` (created if missing) of ``obj``.

    Entries whose current value already equals the new one produce no operation, which makes every
    mutation idempotent: a second pass over the mutated object yields an empty patch.
    """
    current: Any = obj
    ops: list[PatchOp] = []
    pointer = ""
    for depth, key in enumerate(path):
        child = current.get(key) if isinstance(current, Mapping) else None
        pointer += "/" + escape(key)
        if not isinstance(child, Mapping):
            if not entries:
                return []
            value: Any = dict(entries)
            for inner in reversed(path[depth + 1 :]):
                value = {inner: value}
            return [{"op": "add", "path": pointer, "value": value}]
        current = child
    for key, value in entries.items():
        if key in current:
            if current[key] != value:
                ops.append({"op": "replace", "path": f"{pointer}/{escape(key)}", "value": value})
        else:
            ops.append({"op": "add", "path": f"{pointer}/{escape(key)}", "value": value})
    return ops


class PatchError(ValueError):
    """A patch does not apply to the document."""


def apply(document: Mapping[str, Any], ops: Iterable[PatchOp]) -> dict[str, Any]:
    """A deep copy of ``document`` with ``ops`` applied (add, replace, remove on maps and lists)."""
    result: Any = copy.deepcopy(dict(document))
    for op in ops:
        kind = op.get("op")
        path = str(op.get("path", ""))
        if not path.startswith("/"):
            raise PatchError(f"path {path!r} is not a JSON pointer")
        tokens = [unescape(t) for t in path[1:].split("/")]
        parent: Any = result
        for token in tokens[:-1]:
            parent = _child(parent, token, path)
        last = tokens[-1]
        if kind not in ("add", "replace", "remove"):
            raise PatchError(f"unsupported op {kind!r}")
        if not isinstance(parent, (dict, list)):
            raise PatchError(f"parent of {path!r} is not a container")
        value = copy.deepcopy(op.get("value"))
        if isinstance(parent, dict):
            if kind != "add" and last not in parent:
                raise PatchError(f"{kind} of missing {path!r}")
            if kind == "remove":
                del parent[last]
            else:
                parent[last] = value
        elif last == "-" and kind == "add":
            parent.append(value)
        else:
            index = _index(parent, last, path, inserting=kind == "add")
            if kind == "add":
                parent.insert(index, value)
            elif kind == "replace":
                parent[index] = value
            else:
                del parent[index]
    out: dict[str, Any] = result
    return out


def _child(parent: Any, token: str, path: str) -> Any:
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"{path!r}: missing {token!r}")
        return parent[token]
    if isinstance(parent, list):
        return parent[_index(parent, token, path, inserting=False)]
    raise PatchError(f"{path!r}: {token!r} is not in a container")


def _index(items: list[Any], token: str, path: str, *, inserting: bool) -> int:
    if not token.isdigit():
        raise PatchError(f"{path!r}: {token!r} is not a list index")
    index = int(token)
    if index > len(items) or (index == len(items) and not inserting):
        raise PatchError(f"{path!r}: index {index} out of range")
    return index
