"""The GPU quota ledger: :class:`GPUQuotaStore`, the authoritative in-memory usage of every namespace
against its GPUResourceQuota (gpu-resource-quota.md "QuotaStore"; design.md Semantics 5).

Single and total checks (answering :class:`~common.model.refusal.Refusal` ``| None``), an atomic
check-and-charge (:meth:`GPUQuotaStore.reserve`), a clamped release (:meth:`GPUQuotaStore.unreserve`,
the spec's "safeSub"), a full :meth:`GPUQuotaStore.rebuild` from the running pods (spec workflow 4),
the dirty set a status sync drains and the status itself (:mod:`.status`).

Single limits compare the *per-GPU* request and limit with ``maxRequests``/``maxLimits``, the per-GPU
request with the design layout's ``single.min`` (design.md Semantics 12), and the GPU count with
``maxGPUCount``; totals charge ``per-GPU x count`` (as upstream's calculator). An absent
limit is unlimited; an explicit ``0`` is a real limit of 0, for totals and single limits alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.cards.card_type import CardType
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.events import EventRecord, invalid_annotation
from gpuq_k8s.common.model.gang import least_total
from gpuq_k8s.common.model.gpu_quota.card_share import DEFAULT_LABEL_PREFIX, CardShare
from gpuq_k8s.common.model.gpu_quota.quota import GPUResourceQuota, format_tflops
from gpuq_k8s.common.model.gpu_quota.request import (
    GPURequest,
    card_request,
    pod_gpu_request,
    request_from_annotations,
)
from gpuq_k8s.common.model.gpu_quota.status import GPUQuotaStatus, ReportedStatus, quota_status
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import format_bytes
from gpuq_k8s.common.model.quota_exceeded import BelowMinimum, QuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal

# Stands for "no limit" in the store's plain-int hot path: above any real sum, far below int64 overflow.
UNLIMITED: Final = 1 << 62


class _Entry:
    """One namespace: its limits as plain ints (UNLIMITED when unset) and its usage."""

    __slots__ = (
        "lim_tflops",
        "lim_vram",
        "max_gpu_count",
        "max_workers",
        "needs_tflops",
        "needs_vram",
        "pods",
        "quota",
        "reported",
        "req_tflops",
        "req_vram",
        "s_lim_tflops",
        "s_lim_vram",
        "s_min_tflops",
        "s_min_vram",
        "s_req_tflops",
        "s_req_vram",
        "used_lim_tflops",
        "used_lim_vram",
        "used_req_tflops",
        "used_req_vram",
        "workers",
    )

    def __init__(self) -> None:
        self.quota: GPUResourceQuota | None = None
        self.pods: dict[str, tuple[int, int, int, int, int]] = {}  # key -> its totals and workers
        self.used_req_tflops = 0
        self.used_req_vram = 0
        self.used_lim_tflops = 0
        self.used_lim_vram = 0
        self.workers = 0
        self.reported = ReportedStatus()
        self.set_limits(None)

    def set_limits(self, quota: GPUResourceQuota | None) -> None:
        def lim(value: int | None) -> int:
            return UNLIMITED if value is None else value

        self.quota = quota
        q = quota or GPUResourceQuota(namespace="", name="")
        self.req_tflops = lim(q.total_requests.tflops)
        self.req_vram = lim(q.total_requests.vram)
        self.lim_tflops = lim(q.total_limits.tflops)
        self.lim_vram = lim(q.total_limits.vram)
        self.max_workers = lim(q.max_workers)
        self.s_req_tflops = lim(q.max_requests.tflops)
        self.s_req_vram = lim(q.max_requests.vram)
        self.s_lim_tflops = lim(q.max_limits.tflops)
        self.s_lim_vram = lim(q.max_limits.vram)
        self.max_gpu_count = lim(q.max_gpu_count)
        self.s_min_tflops = q.min_requests.tflops or 0
        self.s_min_vram = q.min_requests.vram or 0
        # What a card-derived request must know (pod_gpu_request's require_*), read per pod.
        self.needs_tflops = quota is not None and quota.uses_tflops
        self.needs_vram = quota is not None and quota.uses_vram


class GPUQuotaStore:
    """The authoritative in-memory GPU quota state (spec "QuotaStore"), one entry per namespace.

    Atomicity: the scheduler is single-threaded asyncio and every method here is synchronous, so
    :meth:`reserve` checks and charges in one call that nothing can interleave with; that is the
    whole of the spec's "check + allocate under storeMutex", without a lock.

    Usage is tracked per pod key (``namespace/name``), for namespaces with and without a quota, so
    :meth:`reserve` is idempotent, :meth:`unreserve` releases exactly what was charged, and a quota
    created later starts from the right usage.
    """

    __slots__ = ("_dirty", "_entries")

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._dirty: set[str] = set()

    # -- quota objects ----------------------------------------------------------------------------

    def set_quota(self, quota: GPUResourceQuota) -> None:
        """Add or replace the quota of ``quota.namespace``; usage is kept."""
        entry = self._entries.get(quota.namespace)
        if entry is None:
            entry = self._entries[quota.namespace] = _Entry()
            entry.reported.alerting = quota.alert_active
        elif entry.quota is None:
            entry.reported.alerting = quota.alert_active
        entry.set_limits(quota)
        self._dirty.add(quota.namespace)

    def remove_quota(self, namespace: str) -> None:
        """The namespace becomes unlimited; its pods stay tracked."""
        entry = self._entries.get(namespace)
        if entry is not None:
            entry.set_limits(None)
            entry.reported = ReportedStatus()
        self._dirty.discard(namespace)

    def quota(self, namespace: str) -> GPUResourceQuota | None:
        entry = self._entries.get(namespace)
        return entry.quota if entry else None

    def has_quota(self, namespace: str) -> bool:
        entry = self._entries.get(namespace)
        return entry is not None and entry.quota is not None

    def namespaces(self) -> list[str]:
        """Namespaces that have a quota."""
        return sorted(ns for ns, e in self._entries.items() if e.quota is not None)

    def request_for(
        self,
        pod: PodInfo,
        card: CardType | None = None,
        node_labels: Mapping[str, str] | None = None,
        *,
        node_name: str = "",
        label_prefix: str = DEFAULT_LABEL_PREFIX,
    ) -> GPURequest | None:
        """:func:`pod_gpu_request` with the pod's namespace quota (its defaults and needs)."""
        return pod_gpu_request(
            pod,
            card,
            node_labels,
            quota=self.quota(pod.namespace),
            node_name=node_name,
            label_prefix=label_prefix,
        )

    def card_request(self, namespace: str, units: int, share: CardShare) -> GPURequest | None:
        """:meth:`request_for` of a pod of ``namespace`` without tensor-fusion annotations that asks
        ``units`` (> 0) of a card worth ``share``; ``None`` where :meth:`request_for` raises."""
        e = self._entries.get(namespace)
        if e is None:
            return card_request(units, share, require_tflops=False, require_vram=False)
        return card_request(units, share, require_tflops=e.needs_tflops, require_vram=e.needs_vram)

    # -- checks -----------------------------------------------------------------------------------

    def check_single(self, namespace: str, request: GPURequest) -> Refusal | None:
        """Per-workload limits (``single``); a refusal is unresolvable (the webhook denies it)."""
        e = self._entries.get(namespace)
        if e is None or e.quota is None:
            return None
        return _check_single(e, namespace, request)

    def check(self, namespace: str, request: GPURequest) -> Refusal | None:
        """Single then total limits, without changing anything (the scheduler's Filter)."""
        e = self._entries.get(namespace)
        if e is None or e.quota is None:
            return None
        return _check_single(e, namespace, request) or _check_total(e, namespace, request)

    def check_gang(
        self, namespace: str, requests: Sequence[GPURequest], count: int, gang: str
    ) -> Refusal | None:
        """A gang (``gang``: ``PodGroup ns/name``) whose ``count`` workers (of these ``requests``)
        must be held at once can never fit when even the least they ask together exceeds a total
        limit itself (``maxWorkers``, the TFLOPS and VRAM totals): unresolvable, "never"."""
        e = self._entries.get(namespace)
        if e is None or e.quota is None:
            return None
        quota = e.quota
        rows = [dict(zip(("rt", "rv", "lt", "lv"), r.totals(), strict=True)) for r in requests]
        need = least_total(rows, count)
        limits = (
            ("total.requests.tflops", need.get("rt", 0), e.req_tflops, format_tflops),
            ("total.requests.vram", need.get("rv", 0), e.req_vram, format_bytes),
            ("total.limits.tflops", need.get("lt", 0), e.lim_tflops, format_tflops),
            ("total.limits.vram", need.get("lv", 0), e.lim_vram, format_bytes),
            ("total.maxWorkers", count, e.max_workers, str),
        )
        for resource, asked, limit, fmt in limits:
            if asked > limit:
                error = QuotaExceeded(
                    quota.field_name(resource),
                    fmt(asked),
                    fmt(limit),
                    fmt(limit),
                    scope=f"namespace {namespace} ({quota.ref}) by {gang}'s {count} pods at once",
                    unresolvable=True,
                )
                return Refusal(error)
        return None

    def reserve(self, namespace: str, request: GPURequest, key: str) -> bool:
        """Check every limit and charge pod ``key`` atomically (all or nothing).

        Returns True when charged, False when ``key`` was already charged (idempotent: nothing
        changes). When a limit would be exceeded, changes nothing and raises the refusal's
        :class:`QuotaExceeded` (``unresolvable`` for single limits), the one :meth:`check` returns.
        """
        e = self._entries.get(namespace)
        if e is None:
            e = self._entries[namespace] = _Entry()
        elif key in e.pods:
            return False
        n = request.gpu_count
        rt = request.tflops_request * n
        rv = request.vram_request * n
        lt = request.tflops_limit * n
        lv = request.vram_limit * n
        # New totals computed once, used by the check and by the update (fewer attribute reads).
        new_rt = e.used_req_tflops + rt
        new_rv = e.used_req_vram + rv
        new_lt = e.used_lim_tflops + lt
        new_lv = e.used_lim_vram + lv
        new_w = e.workers + request.workers
        if e.quota is not None and (
            request.tflops_request > e.s_req_tflops
            or request.vram_request > e.s_req_vram
            or request.tflops_limit > e.s_lim_tflops
            or request.vram_limit > e.s_lim_vram
            or n > e.max_gpu_count
            or (request.tflops_request < e.s_min_tflops and request.amounts_known)
            or (request.vram_request < e.s_min_vram and request.amounts_known)
            or new_rt > e.req_tflops
            or new_rv > e.req_vram
            or new_lt > e.lim_tflops
            or new_lv > e.lim_vram
            or (new_w > e.max_workers and request.workers)
        ):
            # The slow path only runs on failure: it finds and describes the first broken limit.
            refusal = _check_single(e, namespace, request) or _check_total(e, namespace, request)
            if refusal is None:  # unreachable: the fast and slow checks test the same limits
                raise RuntimeError(f"{namespace}: GPU quota checks disagree for {request}")
            refusal.raise_error()
        e.pods[key] = (rt, rv, lt, lv, request.workers)
        e.used_req_tflops = new_rt
        e.used_req_vram = new_rv
        e.used_lim_tflops = new_lt
        e.used_lim_vram = new_lv
        e.workers = new_w
        self._dirty.add(namespace)
        return True

    def charge(self, namespace: str, request: GPURequest, key: str) -> None:
        """Charge ``key`` unchecked, replacing what it held: usage that exists already (an allocated DRA
        claim as the API shows it, docs/design.md "Quota over devices"), as :meth:`rebuild` charges
        running pods."""
        self.unreserve(namespace, key)
        e = self._entries.get(namespace)
        if e is None:
            e = self._entries[namespace] = _Entry()
        rt, rv, lt, lv = request.totals()
        e.pods[key] = (rt, rv, lt, lv, request.workers)
        e.used_req_tflops += rt
        e.used_req_vram += rv
        e.used_lim_tflops += lt
        e.used_lim_vram += lv
        e.workers += request.workers
        self._dirty.add(namespace)

    def unreserve(self, namespace: str, key: str) -> bool:
        """Release pod ``key``; False if it was not charged. Usage is clamped at 0 (spec "safeSub")."""
        e = self._entries.get(namespace)
        if e is None:
            return False
        charged = e.pods.pop(key, None)
        if charged is None:
            return False
        rt, rv, lt, lv, w = charged
        # Conditional expressions, not max(): this is the hot path and a builtin call costs more.
        v = e.used_req_tflops - rt
        e.used_req_tflops = v if v > 0 else 0
        v = e.used_req_vram - rv
        e.used_req_vram = v if v > 0 else 0
        v = e.used_lim_tflops - lt
        e.used_lim_tflops = v if v > 0 else 0
        v = e.used_lim_vram - lv
        e.used_lim_vram = v if v > 0 else 0
        v = e.workers - w
        e.workers = v if v > 0 else 0
        self._dirty.add(namespace)
        return True

    def fits_array(
        self,
        namespace: str,
        *,
        tflops_request: npt.ArrayLike,
        vram_request: npt.ArrayLike,
        tflops_limit: npt.ArrayLike,
        vram_limit: npt.ArrayLike,
        gpu_count: npt.ArrayLike,
    ) -> npt.NDArray[np.bool_]:
        """Vectorised :meth:`check` over candidate nodes: per-GPU amounts (one per node, as derived
        from each node's card) in, a boolean per node out. Explain a False with :meth:`check`."""
        t_req = np.asarray(tflops_request, dtype=np.int64)
        v_req = np.asarray(vram_request, dtype=np.int64)
        t_lim = np.asarray(tflops_limit, dtype=np.int64)
        v_lim = np.asarray(vram_limit, dtype=np.int64)
        count = np.asarray(gpu_count, dtype=np.int64)
        shape = np.broadcast_shapes(t_req.shape, v_req.shape, t_lim.shape, v_lim.shape, count.shape)
        e = self._entries.get(namespace)
        if e is None or e.quota is None:
            return np.ones(shape, dtype=np.bool_)
        ok = (
            (t_req <= e.s_req_tflops)
            & (v_req <= e.s_req_vram)
            & (t_lim <= e.s_lim_tflops)
            & (v_lim <= e.s_lim_vram)
            & (count <= e.max_gpu_count)
            & (e.used_req_tflops + t_req * count <= e.req_tflops)
            & (e.used_req_vram + v_req * count <= e.req_vram)
            & (e.used_lim_tflops + t_lim * count <= e.lim_tflops)
            & (e.used_lim_vram + v_lim * count <= e.lim_vram)
            & (e.workers + 1 <= e.max_workers)
        )
        if e.s_min_tflops or e.s_min_vram:  # single.min (Semantics 12): only quotas that set one pay
            ok &= (t_req >= e.s_min_tflops) & (v_req >= e.s_min_vram)
        return np.broadcast_to(ok, shape).copy()

    # -- usage ------------------------------------------------------------------------------------

    def usage(self, namespace: str) -> GPURequest:
        """Current usage as totals: ``gpu_count`` holds the number of workers."""
        e = self._entries.get(namespace)
        if e is None:
            return GPURequest(0, 0, 0, 0, 0)
        return GPURequest(e.used_req_tflops, e.used_req_vram, e.used_lim_tflops, e.used_lim_vram, e.workers)

    def is_reserved(self, namespace: str, key: str) -> bool:
        e = self._entries.get(namespace)
        return e is not None and key in e.pods

    def rebuild(
        self,
        pods: Iterable[PodInfo],
        request_of: Callable[[PodInfo], GPURequest | None] | None = None,
    ) -> list[EventRecord]:
        """Reset all usage to zero and rebuild it from the pods that hold resources (spec workflow 4).

        ``request_of`` gives a pod's request (the scheduler passes one that knows the pod's node and
        card); by default the pod's annotations with its namespace quota's defaults. Totals are not
        enforced here: the pods already run. A pod whose request cannot be read is not charged and
        yields a Warning event on the pod (Semantics 3). Every namespace with a quota becomes dirty.
        """
        resolve = request_of or (lambda pod: request_from_annotations(pod, self.quota(pod.namespace)))
        for entry in self._entries.values():
            entry.pods = {}
            entry.used_req_tflops = entry.used_req_vram = entry.used_lim_tflops = 0
            entry.used_lim_vram = entry.workers = 0
        events: list[EventRecord] = []
        for pod in pods:
            if not pod.holds_resources:
                continue
            try:
                request = resolve(pod)
            except InvalidValue as err:
                events.append(invalid_annotation(pod.ref, f"GPU quota not charged: {err}"))
                continue
            if request is None:
                continue
            e = self._entries.get(pod.namespace)
            if e is None:
                e = self._entries[pod.namespace] = _Entry()
            if pod.key in e.pods:
                continue
            rt, rv, lt, lv = request.totals()
            e.pods[pod.key] = (rt, rv, lt, lv, request.workers)
            e.used_req_tflops += rt
            e.used_req_vram += rv
            e.used_lim_tflops += lt
            e.used_lim_vram += lv
            e.workers += request.workers
        self._dirty.update(ns for ns, e in self._entries.items() if e.quota is not None)
        return events

    # -- status -----------------------------------------------------------------------------------

    def take_dirty(self) -> set[str]:
        """Namespaces with a quota whose status needs syncing; the set is emptied."""
        dirty, self._dirty = self._dirty, set()
        return {ns for ns in dirty if self.has_quota(ns)}

    def status(self, namespace: str, now: datetime) -> GPUQuotaStatus:
        """The status to write for ``namespace`` (spec "Status Reporting Structure", :mod:`.status`).

        ``availablePercent`` has a two-decimal string per limited resource (``"25.00"``); both
        conditions are always present, keeping ``lastTransitionTime`` while their status holds. The
        alert event is returned only when usage crosses the threshold upward, not on every call.
        Raises ``KeyError`` for a namespace without a quota.
        """
        e = self._entries[namespace]
        if e.quota is None:
            raise KeyError(namespace)
        return quota_status(e.quota, self.usage(namespace), e.reported, now)


def _exceeded(
    namespace: str,
    quota: GPUResourceQuota,
    resource: str,
    requested: str,
    *,
    used: int,
    limit: int,
    fmt: Callable[[int], str],
    unresolvable: bool,
) -> Refusal:
    available = fmt(max(limit - used, 0)) if not unresolvable else fmt(limit)
    error = QuotaExceeded(
        resource,
        requested,
        available,
        fmt(limit),
        scope=f"namespace {namespace} ({quota.ref})",
        used=None if unresolvable else fmt(used),
        unresolvable=unresolvable,
    )
    return Refusal(error)


def _check_single(e: _Entry, namespace: str, request: GPURequest) -> Refusal | None:
    quota = e.quota
    if quota is None:
        return None
    rows = (
        ("single.maxRequests.tflops", request.tflops_request, e.s_req_tflops, format_tflops),
        ("single.maxRequests.vram", request.vram_request, e.s_req_vram, format_bytes),
        ("single.maxLimits.tflops", request.tflops_limit, e.s_lim_tflops, format_tflops),
        ("single.maxLimits.vram", request.vram_limit, e.s_lim_vram, format_bytes),
        ("single.maxGPUCount", request.gpu_count, e.max_gpu_count, str),
    )
    for resource, asked, limit, fmt in rows:
        if asked > limit:
            name = quota.field_name(resource)
            return _exceeded(
                namespace, quota, name, fmt(asked), used=0, limit=limit, fmt=fmt, unresolvable=True
            )
    minima = (
        ("single.min.tflops", request.tflops_request, e.s_min_tflops, format_tflops),
        ("single.min.vram", request.vram_request, e.s_min_vram, format_bytes),
    )
    for resource, asked, minimum, fmt in minima:
        if asked < minimum and request.amounts_known:
            shown, scope = fmt(minimum), f"namespace {namespace} ({quota.ref})"
            return Refusal(BelowMinimum(resource, fmt(asked), shown, shown, scope=scope, unresolvable=True))
    return None


def _check_total(e: _Entry, namespace: str, request: GPURequest) -> Refusal | None:
    quota = e.quota
    if quota is None:
        return None
    rt, rv, lt, lv = request.totals()
    rows = (
        ("total.requests.tflops", rt, e.used_req_tflops, e.req_tflops, format_tflops),
        ("total.requests.vram", rv, e.used_req_vram, e.req_vram, format_bytes),
        ("total.limits.tflops", lt, e.used_lim_tflops, e.lim_tflops, format_tflops),
        ("total.limits.vram", lv, e.used_lim_vram, e.lim_vram, format_bytes),
        ("total.maxWorkers", request.workers, e.workers, e.max_workers, str),
    )
    for resource, asked, used, limit, fmt in rows:
        if used + asked > limit and (asked or resource != "total.maxWorkers"):
            name = quota.field_name(resource)
            return _exceeded(
                namespace, quota, name, fmt(asked), used=used, limit=limit, fmt=fmt, unresolvable=False
            )
    return None
