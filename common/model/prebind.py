"""What a PreBind plugin asks of the cluster before a pod is bound (kube-scheduler's PreBind extension
point), as data: *these API writes, then wait for this condition, with this rollback on failure*.

A :class:`PreBindPlan` is made in the scheduling cycle (pure: the plugin decides) and carried out by
the backend (``scheduler/backend.py`` ``ClusterBackend.pre_bind``): against a cluster the writes go
through gpuq's client (leader-gated, each a JSON merge patch, conditional on the resourceVersion it
names), then the backend waits on its informer caches (never a fresh GET) until every written object
shows at least the version the write produced (:func:`version_reached`) and the plan's ``ready``
condition says done, or fails, or ``timeout`` seconds pass; ``gpuq simulate`` applies the writes to
its in-memory objects (:func:`apply_merge_patch`) and lets its in-memory controllers act before it asks
``ready``. A failure runs the ``rollback`` writes (best effort) of every plan already carried out, and
the pod is unreserved and tried again.

The volume binder's plan writes ``spec.claimRef`` on a PersistentVolume or the
``volume.kubernetes.io/selected-node`` annotation on a claim and waits for the PV controller to bind
the claims (no rollback, as upstream: the PV controller finishes or undoes it); a DRA plan writes a
ResourceClaim's ``status.allocation`` and ``reservedFor`` and rolls them back when the pod's binding
fails.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.wire import Obj

# (kind, namespace, name) -> the object as the caches hold it, or None.
Lookup = Callable[[Kind, str, str], Obj | None]


class State(enum.Enum):
    DONE = "done"
    WAIT = "wait"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Progress:
    """The condition's answer: done, not yet (wait), or failed with ``message`` (no point waiting)."""

    state: State
    message: str = ""

    @staticmethod
    def failed(message: str) -> Progress:
        return Progress(State.FAILED, message)


DONE = Progress(State.DONE)
WAIT = Progress(State.WAIT)


@dataclass(frozen=True, slots=True)
class ApiWrite:
    """A JSON merge patch (RFC 7386) of one object (``subresource``: ``status`` for a status write). A
    ``metadata.resourceVersion`` in the patch makes it conditional: the apiserver refuses it (Conflict)
    when the object changed since."""

    kind: Kind
    namespace: str
    name: str
    patch: Mapping[str, Any]
    subresource: str = ""
    # A strategic merge patch instead (built-in kinds only): lists named here merge their items by the
    # given key (``{"reservedFor": "uid"}``, as the API type's patchMergeKey says) and an item
    # ``{"$patch": "delete", <key>: ...}`` removes one; other lists are replaced. A ``metadata.uid`` in
    # the patch is a precondition: the apiserver refuses the patch (Conflict) for another object.
    merge_keys: Mapping[str, str] | None = None
    # ``PATCH`` (the default); ``POST``: create ``patch`` (the whole object, named ``name``) in its
    # collection (AlreadyExists is an error); ``DELETE``: delete the object (``patch`` unused).
    verb: str = "PATCH"

    @property
    def strategic(self) -> bool:
        return self.merge_keys is not None

    @property
    def ref(self) -> str:
        return self.kind.ref(self.namespace, self.name)

    @property
    def path(self) -> str:
        base = self.kind.object_path(self.namespace, self.name)
        if self.verb == "POST":
            return base.rsplit("/", 1)[0]
        return f"{base}/{self.subresource}" if self.subresource else base


@dataclass(frozen=True, slots=True)
class PreBindPlan:
    """One plugin's PreBind for one pod (see the module docstring). ``ready`` reads objects through a
    :data:`Lookup` of the caches; ``timeout`` bounds the wait, in seconds; ``waiting_for`` names
    the wait in a timeout's message (``binding volumes: timed out after 600s``)."""

    plugin: str
    writes: tuple[ApiWrite, ...]
    ready: Callable[[Lookup], Progress]
    rollback: tuple[ApiWrite, ...] = ()
    timeout: float = 600.0
    waiting_for: str = "waiting"

    def failure(self, message: str) -> str:
        """How a failure reads in the pod's condition, as kube-scheduler's framework wraps it."""
        return f'running PreBind plugin "{self.plugin}": {message}'

    def timed_out(self) -> str:
        return self.failure(f"{self.waiting_for}: timed out after {self.timeout:g}s")


def resource_version(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def version_reached(cached: str, written: str) -> bool:
    """Whether an object the caches hold at ``cached`` is at least as new as the ``written`` one.

    resourceVersions are opaque to clients, but kube-apiserver's are etcd revisions, and the
    scheduler's volume binder compares them as integers (``storage.APIObjectVersioner``); gpuq
    does the same, and falls back to equality for versions that are not integers."""
    if not written:
        return True
    if cached.isdigit() and written.isdigit():
        return int(cached) >= int(written)
    return cached == written


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``target`` (a new object; neither argument is changed). A ``None``
    member removes the key; a mapping merges into a mapping; anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    result: dict[str, Any] = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def apply_strategic_patch(target: Any, patch: Any, merge_keys: Mapping[str, str]) -> Any:
    """A strategic merge patch of ``target`` as the apiserver applies the subset gpuq writes: maps
    merge (a ``None`` member removes the key), the lists named in ``merge_keys`` merge their items by
    that key (``{"$patch": "delete", key: value}`` removes the item), other values replace."""
    if not isinstance(patch, Mapping):
        return patch
    result: dict[str, Any] = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif key in merge_keys and isinstance(value, list):
            by = merge_keys[key]
            items = [dict(item) for item in (result.get(key) or []) if isinstance(item, Mapping)]
            for change in value:
                if not isinstance(change, Mapping):
                    continue
                found = next((i for i, item in enumerate(items) if item.get(by) == change.get(by)), None)
                if change.get("$patch") == "delete":
                    if found is not None:
                        items.pop(found)
                elif found is None:
                    items.append(dict(change))
                else:
                    items[found] = apply_strategic_patch(items[found], change, merge_keys)
            if items:
                result[key] = items
            else:
                result.pop(key, None)
        else:
            result[key] = apply_strategic_patch(result.get(key), value, merge_keys)
    return result
