"""UPDATE ratchets (design.md Semantics 13): an UPDATE is judged on what it changes, never on what the
object already was.

* An object being deleted (``metadata.deletionTimestamp``) is always admitted: removing its finalizers
  must never depend on its content, or a namespace could stay Terminating forever.
* An UPDATE that leaves the spec and gpuq's own annotations as they were (finalizers, labels, other
  annotations, owner references) is admitted unchecked.
* Otherwise a problem the old object already had, word for word (same object, field and value), does
  not block the change: an object that was invalid before the webhook existed can still be updated in
  its valid parts. A problem the change introduces is refused as at CREATE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from common.model.errors import GpuqError

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


def check_update(
    check: Callable[[Mapping[str, Any]], object], obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> None:
    """Run ``check`` on the new object; raise its error unless the old object earns the same one."""
    try:
        check(obj)
    except GpuqError as err:
        if old is None or _error_of(check, old) != str(err):
            raise
        return


def _error_of(check: Callable[[Mapping[str, Any]], object], obj: Mapping[str, Any]) -> str | None:
    try:
        check(obj)
    except GpuqError as err:
        return str(err)
    return None
