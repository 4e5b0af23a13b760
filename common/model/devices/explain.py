"""Why a pod's claims cannot be allocated on a node, per claim and request, in words ``explain``
and the PodScheduled condition print.

When the search finds no solution, each request (each ``firstAvailable`` subrequest) is looked at on
its own against the node's devices and what is allocated, and every device that cannot serve it is
named with the first reason: ``gpu-3: DeviceClass/gpu selector #0 false``, ``gpu-1: in use``,
``shared-0: 10Gi of memory left, 40Gi asked``, ``gpu-2: counter gpu-0-counters/memory: 0 left, 5Gi
needed``, ``gpu-4: taint ...``, a selector's runtime error. A request with enough usable devices
on its own failed together with the others (competing requests, constraints, the 32-result limit),
and says so. Pools the node cannot allocate from are named: incomplete (a driver is republishing
it), invalid (with the reason), or no pool at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuq_k8s.common.model.devices.capacity import shortfall
from gpuq_k8s.common.model.devices.claims import ALL
from gpuq_k8s.common.model.devices.counters import fits, remaining
from gpuq_k8s.common.model.devices.pools import NodePool
from gpuq_k8s.common.model.nodes import NodeInfo

if TYPE_CHECKING:
    from gpuq_k8s.common.model.devices.plan import NodeCandidates, PodPlan


@dataclass(frozen=True, slots=True)
class RequestReason:
    claim: str  # ResourceClaim/ns/name
    request: str  # request or request/subrequest; "" for the node as a whole
    message: str

    def __str__(self) -> str:
        if self.request:
            return f"{self.claim} request {self.request}: {self.message}"
        return f"{self.claim}: {self.message}" if self.claim else self.message


@dataclass(frozen=True, slots=True)
class Unfit:
    """The node cannot take the pod's claims; ``reasons`` say why, ``selector_errors`` lists the CEL
    runtime errors met (kube-scheduler reports those as errors; gpuq reports them and goes on)."""

    node: str
    reasons: tuple[RequestReason, ...]
    selector_errors: tuple[str, ...] = ()
    steps: int = 0  # search steps spent before giving up

    @property
    def message(self) -> str:
        return "; ".join(str(r) for r in self.reasons)


def _group(lines: Sequence[tuple[str, str]], limit: int = 6) -> str:
    by_reason: dict[str, list[str]] = {}
    for device, reason in lines:
        by_reason.setdefault(reason, []).append(device)
    parts = []
    for reason, devices in by_reason.items():
        shown = ", ".join(devices[:limit]) + (
            f" and {len(devices) - limit} more" if len(devices) > limit else ""
        )
        parts.append(f"{shown}: {reason}")
    return "; ".join(parts)


def _pool_notes(pools: Sequence[NodePool]) -> list[str]:
    notes = []
    for node_pool in pools:
        pool = node_pool.pool
        if pool.invalid:
            notes.append(f"pool {pool.label} is invalid: {pool.invalid}")
        elif not pool.complete:
            have = len(pool.slices)
            notes.append(
                f"pool {pool.label} is incomplete ({have} of {pool.slice_count} slices of generation "
                f"{pool.generation})"
            )
    return notes


def diagnose(
    plan: PodPlan,
    node: NodeInfo,
    pools: Sequence[NodePool],
    cands: Mapping[tuple[int, int, int], NodeCandidates],
    *,
    constraint: str | None = None,
    steps: int = 0,
) -> Unfit:
    """The reasons (see the module doc)."""
    ledger = plan.allocator.ledger
    reasons: list[RequestReason] = []
    errors: list[str] = []
    notes = _pool_notes(pools)
    if not pools:
        claim = plan.to_allocate[0].claim.ref if plan.to_allocate else ""
        return Unfit(
            node.name, (RequestReason(claim, "", f"no ResourceSlice of any pool reaches node {node.name}"),)
        )
    for c, prepared in enumerate(plan.to_allocate):
        ref = prepared.claim.ref
        for r, alternatives in enumerate(prepared.requests):
            for s, alternative in enumerate(alternatives):
                found = cands[(c, r, s)]
                errors.extend(found.errors)
                lines = [(rej.device, rej.reason) for rej in found.rejected]
                usable = 0
                counters: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
                for cand in found.candidates:
                    did = cand.id
                    if cand.taint is not None:
                        t = cand.taint
                        lines.append((cand.device.name, f"taint {t.key}={t.value}:{t.effect} not tolerated"))
                        continue
                    if not alternative.request.admin_access and (
                        ledger.dedicated(did) or (not cand.device.allow_multiple and ledger.shared(did))
                    ):
                        lines.append((cand.device.name, "in use"))
                        continue
                    short = shortfall(cand.taken, cand.device.capacity, ledger.used_capacity(did))
                    if short is not None:
                        lines.append((cand.device.name, short.message))
                        continue
                    if cand.device.consumes and not (cand.device.allow_multiple and ledger.shared(did)):
                        pid = cand.pool.id
                        left = counters.setdefault(pid, remaining(cand.pool, ledger.allocated_in_pool(pid)))
                        problem = fits(left, cand.device)
                        if problem is not None:
                            lines.append((cand.device.name, problem))
                            continue
                    usable += 1
                request = alternative.request
                wanted = "all" if request.mode == ALL else str(request.count)
                if request.mode == ALL:
                    enough = bool(found.candidates) and usable == len(found.candidates)
                else:
                    enough = usable >= request.count
                if enough:
                    message = (
                        f"{usable} usable devices for {wanted} asked, "
                        "but not together with the claim's other requests and constraints"
                    )
                else:
                    message = f"{usable} of {wanted} devices usable"
                detail = _group(lines)
                reasons.append(
                    RequestReason(ref, alternative.name, f"{message}" + (f" ({detail})" if detail else ""))
                )
    if constraint is not None:
        reasons.append(RequestReason("allocationMode All", "", constraint))
    for note in notes:
        reasons.append(RequestReason(f"node {node.name}", "", note))
    return Unfit(node.name, tuple(reasons), tuple(dict.fromkeys(errors)), steps)
