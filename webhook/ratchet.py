"""UPDATE ratchets (design.md Semantics 13): an UPDATE is judged on what it changes, never on what the
object already was.

* An object being deleted (``metadata.deletionTimestamp``) is always admitted: removing its finalizers
  must never depend on its content, or a namespace could stay Terminating forever.
* An UPDATE that leaves the spec and gpuq's own annotations as they were (finalizers, labels, other
  annotations, owner references) is admitted unchecked.
* Otherwise a problem the old object already had, word for word (same object, field and value), does
  not block the change: an object that was invalid before the webhook existed can still be updated in
  its valid parts. A problem the change introduces is refused as at CREATE, even when a check that
  stops at the first problem meets the old one first: the unchanged field behind an old problem is set
  aside (removed from both versions) and the check runs again, until it passes or finds a problem the
  old version does not share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from gpuq_k8s.common.model.errors import GpuqError, InvalidValue

# The annotation families gpuq reads (common.model.annotations): a change there is a change gpuq judges.
GPUQ_ANNOTATION_PREFIXES: Final = (
    "volcano.sh/",
    "scheduling.volcano.sh/",
    "scheduling.k8s.io/",
    "tensor-fusion.ai/",
)


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_metadata(obj).get("deletionTimestamp"))


def annotation(obj: Mapping[str, Any], key: str) -> Any:
    annotations = _metadata(obj).get("annotations")
    return annotations.get(key) if isinstance(annotations, Mapping) else None


def _governed(obj: Mapping[str, Any]) -> tuple[Any, dict[Any, Any]]:
    annotations = _metadata(obj).get("annotations")
    own = (
        {k: v for k, v in annotations.items() if str(k).startswith(GPUQ_ANNOTATION_PREFIXES)}
        if isinstance(annotations, Mapping)
        else {}
    )
    return obj.get("spec"), own


def settled(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    """True for an UPDATE admitted without a look at its content: the object is being deleted, or only
    metadata other than gpuq's annotations changed."""
    return deleting(obj) or (old is not None and _governed(obj) == _governed(old))


Path = tuple[str, ...]


def check_update(
    check: Callable[[Mapping[str, Any]], object], obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> None:
    """Run ``check`` on the new object; raise the first problem the old object does not share.

    ``check`` raises at its first problem. When the new object's first problem is one the old object
    had word for word, the unchanged field behind it (the leaf whose removal from the old object makes
    that problem go away) is removed from both versions and the check runs again, so a new problem in
    a field checked later is still found. Each round removes one leaf, so this ends.
    """
    new: Mapping[str, Any] = obj
    before: Mapping[str, Any] | None = old
    while True:
        err = _error_of(check, new)
        if err is None:
            return
        if before is None or _problem(_error_of(check, before)) != _problem(err):
            raise err
        culprit = _culprit(check, new, before, _problem(err))
        if culprit is None:
            return  # an old problem no single unchanged field explains: the ratchet lets it be
        new, before = _without(new, culprit), _without(before, culprit)


def _problem(err: GpuqError | None) -> object:
    """What makes two problems the same, word for word: a malformed value's object, field, value and
    expectation (its message quotes a long value cut, so two long values could read alike); any
    other problem's message."""
    if isinstance(err, InvalidValue):
        value = repr(err.value) if isinstance(err.value, float) else err.value  # nan == nan
        return (type(err), err.where, err.field, value, err.expected)
    return None if err is None else str(err)


def _error_of(check: Callable[[Mapping[str, Any]], object], obj: Mapping[str, Any]) -> GpuqError | None:
    try:
        check(obj)
    except GpuqError as err:
        return err
    return None


def _culprit(
    check: Callable[[Mapping[str, Any]], object],
    new: Mapping[str, Any],
    old: Mapping[str, Any],
    problem: object,
) -> Path | None:
    """An unchanged leaf of the judged parts (spec, status, gpuq's annotations) without which the old
    object no longer has ``problem``."""
    for path in _leaves(old):
        if _at(new, path) != _at(old, path):
            continue  # a changed field is judged, never set aside
        err = _error_of(check, _without(old, path))
        if err is None or _problem(err) != problem:
            return path
    return None


_MISSING: Final = object()


def _leaves(obj: Mapping[str, Any]) -> list[Path]:
    """Paths of the scalar and list values under spec, status and gpuq's annotations."""
    found: list[Path] = []

    def walk(value: Any, path: Path) -> None:
        if isinstance(value, Mapping):
            for key in value:
                walk(value[key], (*path, str(key)))
        else:
            found.append(path)

    for top in ("spec", "status"):
        if isinstance(obj.get(top), Mapping):
            walk(obj[top], (top,))
    annotations = _metadata(obj).get("annotations")
    if isinstance(annotations, Mapping):
        found += [
            ("metadata", "annotations", str(k))
            for k in annotations
            if str(k).startswith(GPUQ_ANNOTATION_PREFIXES)
        ]
    return found


def _at(obj: Mapping[str, Any], path: Path) -> Any:
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _without(obj: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """A copy of ``obj`` without the value at ``path`` (the mappings along it copied, nothing else)."""
    head, *rest = path
    copy = dict(obj)
    if not rest:
        copy.pop(head, None)
    elif isinstance(copy.get(head), Mapping):
        copy[head] = _without(copy[head], tuple(rest))
    return copy
