"""The batched status sync's part of the framework: a plugin whose bookkeeping is written back to custom
resources (:class:`StatusSource`) answers with :class:`StatusPatch` values, merged to one per object
(:func:`merge_status_patches`) before the backend writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.kinds import Kind


@dataclass(frozen=True, slots=True)
class StatusPatch:
    """A custom resource status to write: one per dirty object per sync, never one per pod."""

    kind: Kind
    namespace: str
    name: str
    status: Mapping[str, Any]


def merge_status_patches(
    patches: Sequence[StatusPatch], current: Callable[[Kind, str, str], Mapping[str, Any]]
) -> list[StatusPatch]:
    """One patch per object: several sources may each want a status of one object (a Queue's
    ``allocated`` from capacity-card, its PodGroup counts from the tracker), each a whole status
    built from what the object holds (``current``). Each source's changes to that are kept; a later
    source wins on a key both change."""
    by_object: dict[tuple[Kind, str, str], list[StatusPatch]] = {}
    for patch in patches:
        by_object.setdefault((patch.kind, patch.namespace, patch.name), []).append(patch)
    merged: list[StatusPatch] = []
    for (kind, namespace, name), wanted in by_object.items():
        if len(wanted) == 1:
            merged.append(wanted[0])
            continue
        base = current(kind, namespace, name)
        status = dict(base)
        for patch in wanted:
            for key in set(base) | set(patch.status):
                if key not in patch.status:
                    if key in base:
                        status.pop(key, None)
                elif patch.status[key] != base.get(key):
                    status[key] = patch.status[key]
        merged.append(StatusPatch(kind, namespace, name, status))
    return merged


@runtime_checkable
class StatusSource(Protocol):
    """A plugin whose usage bookkeeping is written back to custom resources (batched status sync).

    ``now`` stamps conditions and ``lastUpdateTime``; events are returned with the patches (the
    GPU quota's QuotaAlertThreshold is decided when its status is computed).
    """

    def take_status(self, now: datetime) -> tuple[list[StatusPatch], list[EventRecord]]: ...
