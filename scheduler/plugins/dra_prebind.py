"""DynamicResources' PreBind (docs/design.md "DRA devices", "The cycle": PreBind): the API writes that
make the pod's claims its own before its binding, as data (:class:`~common.model.prebind.PreBindPlan`)
the backend carries out through the leader-gated client (the writes themselves:
:mod:`common.model.devices.reservation`; the implicit claim's: :mod:`scheduler.plugins.dra_extended`).

* a claim the pod's Reserve allocated: its delete-protection finalizer, then its ``status.allocation``
  and the pod in ``status.reservedFor``; a claim allocated already: only the reservation;
* the pod's implicit claim for extended resources: created with its allocation, then the pod's
  ``status.extendedResourceClaimStatus``;
* then the backend waits until the caches show every claim allocated and reserved for the pod; a
  failed binding takes the reservations back (the rollback writes; a created claim is deleted).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.reservation import (
    RESERVING,
    is_reserved_for,
    reservation_writes,
    reserved,
    rollback_writes,
)
from gpuq_k8s.common.model.devices.results import ClaimAllocation
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import ApiWrite, Lookup, PreBindPlan, Progress
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.plugins.dra_attempt import DraAttempt
from gpuq_k8s.scheduler.plugins.dra_extended import create_writes, pod_status_write
from gpuq_k8s.scheduler.plugins.dra_view import DraView

PRE_BIND_TIMEOUT_SECONDS: Final = 60.0  # the writes are answered at once; this bounds the watch's lag


def claim_writes(
    view: DraView, objects: ObjectStore, data: DraAttempt, pod: PodInfo, row: int, *, plugin: str
) -> PreBindPlan | None:
    """The PreBind plan of ``plugin`` for the attempt ``data`` of ``pod`` on node row ``row``; None
    when there is nothing to write (every claim reserved for the pod already)."""
    allocated: Mapping[str, ClaimAllocation] = data.allocation.claims if data.allocation else {}
    writes: list[ApiWrite] = []
    rollback: list[ApiWrite] = []
    targets: list[tuple[str, str, str]] = []
    for obj in data.claims:
        claim = view.claim(obj)
        current = objects.get(kinds.RESOURCE_CLAIM, claim.namespace, claim.name) or obj
        allocation = allocated.get(claim.key)
        targets.append((claim.namespace, claim.name, claim.uid))
        if allocation is None and is_reserved_for(current, pod.uid):
            continue
        writes.extend(reservation_writes(current, pod, allocation))
        rollback.extend(rollback_writes(current, pod))
    ext = data.extended
    group = data.group_at(row)
    if ext is not None and not ext.existing and group is not None and group.claim is not None:
        made = allocated.get(group.claim.key)
        if made is not None:
            created, undo = create_writes(pod, group, ext.name, made)
            writes.extend(created)
            rollback.extend(undo)
            targets.append((pod.namespace, ext.name, ""))
            writes.append(pod_status_write(pod, ext.name, group.mappings))
    elif ext is not None and ext.existing and ext.mappings:
        writes.append(pod_status_write(pod, ext.name, ext.mappings))
    if not writes:
        return None
    return PreBindPlan(
        plugin,
        tuple(writes),
        functools.partial(_ready, claims=tuple(targets), pod_uid=pod.uid),
        rollback=tuple(rollback),
        timeout=PRE_BIND_TIMEOUT_SECONDS,
        waiting_for=RESERVING,
    )


def _ready(lookup: Lookup, *, claims: tuple[tuple[str, str, str], ...], pod_uid: str) -> Progress:
    return reserved(lookup, claims, pod_uid)
