"""The capacity-scheduling ledger: every ElasticQuota and the pods charged to it, and the KEP's two
PreFilter checks against it (capacity-scheduling.md, "Additional Preemption Details"; design.md
Semantics 4).

As scheduler-plugins' ``ElasticQuotaInfos``: mutated only in Reserve/Unreserve and by pod events
(reserve / unreserve per pod key, rebuild after a re-list), snapshotted in PreFilter for the rest of
the cycle. Where gpuq deliberately differs from upstream:

* **Which resources PreFilter compares.** Upstream always compares cpu, memory, ephemeral-storage
  and pods, whether the pod asks for them or not, so one quota listing only ``nvidia.com/gpu`` in
  ``min`` makes every namespace "over min" on memory, and a pod asking only for GPUs can be refused
  because of memory. gpuq compares:

  - "exceeds max": the resources the pod requests (a pod cannot push a resource it does not ask
    for over its cap);
  - "exceeds total min": the requested resources that are *guaranteed*, i.e. listed in the ``min``
    of at least one ElasticQuota (:attr:`ElasticQuotaInfos.guaranteed`). A resource no quota
    guarantees has no guaranteed pool to protect, so borrowing it takes nothing from anybody.

* **Namespaces without an ElasticQuota** (as upstream): their pods pass PreFilter unchecked and
  never count towards any ``used``. gpuq still remembers their pods, so an ElasticQuota created later
  starts with the right ``used`` (upstream starts it at zero).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any, Final

from gpuq_k8s.common.model.elastic.quota import ElasticQuota, ElasticQuotaInfo
from gpuq_k8s.common.model.gang import least_total
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import PODS, format_units
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.common.model.resources import EMPTY, Resources

# ``Refusal.rule`` of the two PreFilter checks.
RULE_MAX: Final = "max"
RULE_TOTAL_MIN: Final = "total min"


def add_into(target: dict[str, int], amounts: Mapping[str, int], sign: int) -> None:
    """``target += sign * amounts``, in place."""
    for key, value in amounts.items():
        target[key] = target.get(key, 0) + sign * value


# Per request vector, its items as plain tuples: reading a Resources through the Mapping protocol
# costs a Python-level __getitem__ per key, and every pod of a workload asks for the same vector.
# (all items in order: what a charge adds; the amounts PreFilter compares: positive, not ``pods``,
# sorted.) Bounded: a cleared cache only costs recomputation. ``_LAST`` answers the same object
# again without hashing it: PreFilter then Reserve read one pod's vector back to back.
_MAX_MEMO: Final = 4096
_Items = tuple[tuple[str, int], ...]
_SHAPES: dict[Resources, tuple[_Items, _Items]] = {}
# One (request, shape) pair, replaced as a whole: a reader never pairs one vector with another's shape.
_LAST: list[tuple[object, tuple[_Items, _Items]]] = [(None, ((), ()))]


def _shape(request: Mapping[str, int]) -> tuple[_Items, _Items]:
    last = _LAST[0]
    if request is last[0]:
        return last[1]
    if not isinstance(request, Resources):  # a plain mapping: not hashable, not cached
        return _shape_of(request)
    found = _SHAPES.get(request)
    if found is None:
        if len(_SHAPES) >= _MAX_MEMO:
            _SHAPES.clear()
        found = _SHAPES[request] = _shape_of(request)
    _LAST[0] = (request, found)
    return found


def request_items(request: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """``request``'s items as a tuple, memoised: equal vectors read in a row share one object."""
    return _shape(request)[0]


def _shape_of(request: Mapping[str, int]) -> tuple[_Items, _Items]:
    items = tuple(request.items())
    return items, tuple((k, v) for k, v in sorted(items) if v > 0 and k != PODS)


class ElasticQuotaInfos:
    """All ElasticQuotas and the pods charged to them; the capacity-scheduling cache.

    Usage is tracked per pod key, so :meth:`reserve` and :meth:`unreserve` are idempotent (a Reserve
    followed by the informer's add of the same bound pod counts once) and an unreserve releases
    exactly what was charged even if the pod object changed since.

    :meth:`snapshot` is copy-on-write: O(number of quotas), sharing each namespace's pod table until
    one side changes it, so PreFilter can snapshot on every cycle with thousands of namespaces.

    A namespace's ``used`` lives in a plain mutable dict that every charge updates in place; the
    immutable :class:`ElasticQuotaInfo` handed out by :meth:`get` is rebuilt from it only when read
    after a change (Reserve runs for every pod, readers are PostFilter and the status sync).
    """

    __slots__ = (
        "_dirty",
        "_infos",
        "_max",
        "_min_refs",
        "_owned",
        "_pods",
        "_stale",
        "_total_min",
        "_total_used",
        "_used",
    )

    def __init__(self) -> None:
        # Each quota's info; its ``used`` is outdated for the namespaces in ``_stale``.
        self._infos: dict[str, ElasticQuotaInfo] = {}
        self._used: dict[str, dict[str, int]] = {}
        self._max: dict[str, dict[str, int]] = {}
        self._stale: set[str] = set()
        # Every bound pod of every namespace, quota or not: a quota created later starts right.
        self._pods: dict[str, dict[str, Resources]] = {}
        self._owned: set[str] = set()
        self._total_min: dict[str, int] = {}
        self._total_used: dict[str, int] = {}
        self._min_refs: dict[str, int] = {}
        self._dirty: set[str] = set()

    # -- reads ------------------------------------------------------------------------------------

    def __contains__(self, namespace: object) -> bool:
        return namespace in self._infos

    def __len__(self) -> int:
        return len(self._infos)

    def get(self, namespace: str) -> ElasticQuotaInfo | None:
        info = self._infos.get(namespace)
        if info is not None and namespace in self._stale:
            info = self._infos[namespace] = ElasticQuotaInfo(
                info.namespace, info.name, info.min, info.max, Resources(self._used[namespace])
            )
            self._stale.discard(namespace)
        return info

    def namespaces(self) -> list[str]:
        return sorted(self._infos)

    @property
    def guaranteed(self) -> frozenset[str]:
        """Resources listed in the ``min`` of at least one quota (see the module doc)."""
        return frozenset(k for k, n in self._min_refs.items() if n > 0)

    @property
    def total_min(self) -> Resources:
        return Resources({k: v for k, v in self._total_min.items() if self._min_refs.get(k, 0) > 0})

    @property
    def total_used(self) -> Resources:
        return Resources({k: v for k, v in self._total_used.items() if v})

    def reserved(self, namespace: str, key: str) -> Resources | None:
        """What :meth:`reserve` charged pod ``key`` in ``namespace``, or ``None`` if it is not tracked."""
        return self._pods.get(namespace, {}).get(key)

    # -- quota objects ----------------------------------------------------------------------------

    def upsert(self, quota: ElasticQuota) -> None:
        """Add or replace a namespace's quota; usage is recomputed from the pods already tracked."""
        self._drop(quota.namespace)
        used: dict[str, int] = {}
        for request in self._pods.get(quota.namespace, {}).values():
            add_into(used, request, 1)
        info = ElasticQuotaInfo(quota.namespace, quota.name, quota.min, quota.max, Resources(used))
        self._infos[quota.namespace] = info
        self._used[quota.namespace] = used
        self._max[quota.namespace] = dict(quota.max)
        add_into(self._total_min, info.min, 1)
        add_into(self._total_used, info.used, 1)
        for key in info.min:
            self._min_refs[key] = self._min_refs.get(key, 0) + 1
        self._dirty.add(quota.namespace)

    def remove(self, namespace: str) -> None:
        """Forget a namespace's quota (its pods stay tracked, uncharged)."""
        self._drop(namespace)
        self._dirty.discard(namespace)

    def _drop(self, namespace: str) -> None:
        old = self._infos.pop(namespace, None)
        if old is None:
            return
        used = self._used.pop(namespace)
        del self._max[namespace]
        self._stale.discard(namespace)
        add_into(self._total_min, old.min, -1)
        add_into(self._total_used, used, -1)
        for key in old.min:
            self._min_refs[key] -= 1

    # -- pods -------------------------------------------------------------------------------------

    def _own_pods(self, namespace: str) -> dict[str, Resources]:
        pods = self._pods.get(namespace)
        if pods is None:
            pods = self._pods[namespace] = {}
            self._owned.add(namespace)
        elif namespace not in self._owned:
            pods = self._pods[namespace] = dict(pods)
            self._owned.add(namespace)
        return pods

    def _charge(self, namespace: str, delta: Mapping[str, int], sign: int) -> None:
        used = self._used.get(namespace)
        if used is None:
            return
        total = self._total_used
        for key, value in _shape(delta)[0]:
            change = value if sign > 0 else -value
            used[key] = used.get(key, 0) + change
            total[key] = total.get(key, 0) + change
        self._stale.add(namespace)
        self._dirty.add(namespace)

    def reserve(self, namespace: str, key: str, request: Resources) -> bool:
        """Charge pod ``key`` (``namespace/name``); False if it was already charged (idempotent)."""
        pods = self._pods.get(namespace)
        if pods is not None and key in pods:
            return False
        if pods is None or namespace not in self._owned:
            pods = self._own_pods(namespace)
        pods[key] = request
        used = self._used.get(namespace)
        if used is not None:
            # _charge inlined: this runs for every pod the scheduler places.
            total = self._total_used
            for resource, amount in _shape(request)[0]:
                used[resource] = used.get(resource, 0) + amount
                total[resource] = total.get(resource, 0) + amount
            self._stale.add(namespace)
            self._dirty.add(namespace)
        return True

    def reserve_pod(self, pod: PodInfo) -> bool:
        return self.reserve(pod.namespace, pod.key, pod.requests)

    def unreserve(self, namespace: str, key: str) -> bool:
        """Release pod ``key``; False if it was not charged (idempotent)."""
        pods = self._pods.get(namespace)
        if pods is None or key not in pods:
            return False
        request = self._own_pods(namespace).pop(key)
        self._charge(namespace, request, -1)
        return True

    def unreserve_pod(self, pod: PodInfo) -> bool:
        return self.unreserve(pod.namespace, pod.key)

    def rebuild(self, pods: Iterable[PodInfo]) -> None:
        """Reset all usage and recharge every pod that holds resources (bound, not terminal).

        Called at start and after every re-list (design.md, Data flow): nothing is persisted, so a
        restart or a lost watch never double-counts.
        """
        self._pods = {}
        self._owned = set()
        for pod in pods:
            if pod.holds_resources:
                self._own_pods(pod.namespace)[pod.key] = pod.requests
        self._total_used = {}
        self._stale = set()
        for namespace, info in list(self._infos.items()):
            used: dict[str, int] = {}
            for request in self._pods.get(namespace, {}).values():
                add_into(used, request, 1)
            self._used[namespace] = used
            self._infos[namespace] = dataclasses.replace(info, used=Resources(used))
            add_into(self._total_used, used, 1)
        self._dirty.update(self._infos)

    def snapshot(self) -> ElasticQuotaInfos:
        """An independent copy for one scheduling cycle (upstream ``snapshotElasticQuota``)."""
        copy = ElasticQuotaInfos()
        copy._infos = dict(self._infos)
        copy._used = {ns: dict(used) for ns, used in self._used.items()}
        copy._max = dict(self._max)
        copy._stale = set(self._stale)
        copy._pods = dict(self._pods)
        copy._total_min = dict(self._total_min)
        copy._total_used = dict(self._total_used)
        copy._min_refs = dict(self._min_refs)
        # From now on both sides share every pod table; whichever writes first copies it.
        self._owned = set()
        return copy

    # -- status -----------------------------------------------------------------------------------

    def take_dirty(self) -> set[str]:
        """Namespaces whose ``status.used`` changed since the last call (for the batched sync)."""
        dirty, self._dirty = self._dirty, set()
        return {ns for ns in dirty if ns in self._infos}

    def status(self, namespace: str) -> dict[str, Any]:
        """The ``status`` to patch: ``{"used": {resource: quantity}}`` (Semantics 4)."""
        info = self.get(namespace)
        if info is None:
            raise KeyError(namespace)
        return {"used": info.used.nonzero().to_quantities()}

    def used_numbers(self, namespace: str) -> dict[str, int | float]:
        """``used`` in each resource's own unit, for ``gpuq_elastic_quota_used{namespace,resource}``."""
        info = self.get(namespace)
        if info is None:
            raise KeyError(namespace)
        return info.used.to_numbers()

    # -- audit ------------------------------------------------------------------------------------

    def audit(self, bound: Iterable[PodInfo]) -> list[str]:
        """What the ledger holds that ``bound`` (the pods the scheduler counts as holding resources)
        does not say, for the cache debugger (scheduler/cache_debugger.py): a namespace's pods charged
        but not bound (a leak) or bound but not charged, and running sums (a namespace's ``used``,
        the pool's total) that are not the sum of what is charged. Empty when consistent."""
        steps = self.audit_steps(bound)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                lines: list[str] = done.value
                return lines

    def audit_steps(self, bound: Iterable[PodInfo], chunk: int = 1000) -> Generator[None, None, list[str]]:
        """:meth:`audit`, pausing (``yield``) every ``chunk`` pods or charges. Run it on a
        :meth:`snapshot` (which later events do not change) when the pauses let them in."""
        expected: dict[str, set[str]] = {}
        for i, pod in enumerate(bound, 1):
            if pod.holds_resources:
                expected.setdefault(pod.namespace, set()).add(pod.key)
            if not i % chunk:
                yield
        out: list[str] = []
        for namespace in sorted(set(self._pods) | set(expected)):
            yield
            charged = set(self._pods.get(namespace, {}))
            want = expected.get(namespace, set())
            if charged - want:
                out.append(
                    f"ElasticQuota ledger of {namespace}: charged, not bound: {sorted(charged - want)}"
                )
            if want - charged:
                out.append(
                    f"ElasticQuota ledger of {namespace}: bound, not charged: {sorted(want - charged)}"
                )
        total: dict[str, int] = {}
        for namespace in sorted(self._infos):
            summed: dict[str, int] = {}
            for i, request in enumerate(self._pods.get(namespace, {}).values(), 1):
                add_into(summed, request, 1)
                if not i % chunk:
                    yield
            add_into(total, summed, 1)
            used = {k: v for k, v in self._used[namespace].items() if v}
            summed = {k: v for k, v in summed.items() if v}
            if used != summed:
                out.append(
                    f"ElasticQuota ledger of {namespace}: used {used} is not the sum of its pods {summed}"
                )
        running = {k: v for k, v in self._total_used.items() if v}
        total = {k: v for k, v in total.items() if v}
        if running != total:
            out.append(f"ElasticQuota ledger: pool used {running} is not the sum of the quotas' pods {total}")
        return out

    # -- PreFilter --------------------------------------------------------------------------------

    def prefilter(self, namespace: str, request: Mapping[str, int], pod_ref: str = "") -> Refusal | None:
        """The KEP's two PreFilter checks ("Additional Preemption Details") for a pod of ``namespace``.

        1. ``used + request > max`` of the pod's quota -> rule :data:`RULE_MAX`;
        2. ``sum(used) + request > sum(min)`` over all quotas -> rule :data:`RULE_TOTAL_MIN`.

        ``None`` when both pass. A namespace without an ElasticQuota is not checked. Both failures
        are resolvable by preemption (the scheduler should run PostFilter); ``pod_ref`` is the
        refusal's subject, prefixed to its message.
        """
        used = self._used.get(namespace)
        if used is None:
            return None
        # Plain-int pass over the compared amounts; any failure goes to the reference checks
        # below, which find and describe it (the two test the same inequalities).
        limits = self._max[namespace]
        refs, total_used, total_min = self._min_refs, self._total_used, self._total_min
        for key, amount in _shape(request)[1]:
            limit = limits.get(key)
            if limit is not None and used.get(key, 0) + amount > limit:
                return self._prefilter_slow(namespace, request, pod_ref)
            if refs.get(key, 0) > 0 and total_used.get(key, 0) + amount > total_min.get(key, 0):
                return self._prefilter_slow(namespace, request, pod_ref)
        return None

    def _prefilter_slow(self, namespace: str, request: Mapping[str, int], pod_ref: str) -> Refusal | None:
        info = self.get(namespace)
        if info is None:
            return None
        request = {k: v for k, v in request.items() if k != PODS}
        over = info.over_max_with(request)
        if over:
            key = over[0]
            limit = info.max[key]
            used = info.used.amount(key)
            error = QuotaExceeded(
                key,
                format_units(key, request[key]),
                format_units(key, max(limit - used, 0)),
                format_units(key, limit),
                scope=f"{info.ref} (max)",
                used=format_units(key, used),
                # Over max itself: no pod leaving, no preemption helps (it can never fit).
                unresolvable=request[key] > limit,
            )
            return Refusal(error, rule=RULE_MAX, subject=pod_ref)
        key_over = self.over_total_min(request)
        if key_over is not None:
            limit = self._total_min.get(key_over, 0)
            used = self._total_used.get(key_over, 0)
            error = QuotaExceeded(
                key_over,
                format_units(key_over, request[key_over]),
                format_units(key_over, max(limit - used, 0)),
                format_units(key_over, limit),
                scope="the sum of all ElasticQuota min (guaranteed pool)",
                used=format_units(key_over, used),
                unresolvable=request[key_over] > limit,
            )
            return Refusal(error, rule=RULE_TOTAL_MIN, subject=pod_ref)
        return None

    def gang_refusal(
        self, namespace: str, requests: Sequence[Mapping[str, int]], count: int, gang: str
    ) -> Refusal | None:
        """A gang (``gang``: ``PodGroup ns/name``) of ``namespace`` whose ``count`` pods (of these
        ``requests``) must be held at once can never fit when even the least they ask together
        (:func:`~common.model.gang.least_total`) exceeds its quota's ``max``, or the guaranteed pool
        of a guaranteed resource: unresolvable, "never". None when it might fit."""
        info = self.get(namespace)
        if info is None:
            return None
        need = least_total([{k: v for k, v in r.items() if k != PODS} for r in requests], count)
        for key in sorted(need):
            amount = need[key]
            limit = info.max.get(key)
            scope = f"{info.ref} (max)"
            if limit is None or amount <= limit:
                if self._min_refs.get(key, 0) <= 0 or amount <= self._total_min.get(key, 0):
                    continue
                limit, scope = (
                    self._total_min.get(key, 0),
                    "the sum of all ElasticQuota min (guaranteed pool)",
                )
            shown = format_units(key, limit)
            error = QuotaExceeded(
                key,
                format_units(key, amount),
                shown,
                shown,
                scope=f"{scope} by {gang}'s {count} pods at once",
                unresolvable=True,
            )
            return Refusal(error, rule=RULE_MAX)
        return None

    def over_total_min(self, request: Mapping[str, int], freed: Mapping[str, int] = EMPTY) -> str | None:
        """The first requested guaranteed resource with ``sum(used) - freed + request > sum(min)``
        (PreFilter's second check; PostFilter's with the victims' charges ``freed``)."""
        for key in sorted(request):
            amount = request[key]
            if amount <= 0 or self._min_refs.get(key, 0) <= 0:
                continue
            used = self._total_used.get(key, 0) - freed.get(key, 0)
            if used + amount > self._total_min.get(key, 0):
                return key
        return None
