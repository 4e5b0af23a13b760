"""ElasticQuota: min/max per namespace, borrowing, and quota-aware preemption (capacity-scheduling.md).

The reference is scheduler-plugins' ``pkg/capacityscheduling``. gpuq keeps its structure (a live
:class:`ElasticQuotaInfos` mutated only in Reserve/Unreserve and by pod events, a snapshot taken in
PreFilter that the rest of the cycle reads) and deliberately differs where upstream is a trap:

* **Absent keys** (DESIGN.md Semantics 4, the KEP's "Max is infinite ... min is 0 by default"): a
  resource absent from ``max`` is unlimited and absent from ``min`` is 0, for every resource. Upstream
  applies those defaults only when the whole list is missing; a ``max`` without ``memory`` caps memory
  at 0 there.
* **Which resources are compared.** Upstream always compares cpu, memory, ephemeral-storage and pods,
  whether the pod asks for them or not, so one quota listing only ``nvidia.com/gpu`` in ``min`` makes
  every namespace "over min" on memory, and a pod asking only for GPUs can be refused because of
  memory. gpuq compares:

  - PreFilter "exceeds max": the resources the pod requests (a pod cannot push a resource it does
    not ask for over its cap);
  - PreFilter "exceeds total min": the requested resources that are *guaranteed*, i.e. listed in the
    ``min`` of at least one ElasticQuota. A resource no quota guarantees has no guaranteed pool to
    protect, so borrowing it takes nothing from anybody;
  - "used over min" (who is a borrower, whether a preemptor is reclaiming its guarantee): every
    guaranteed resource, with a quota's own absent ``min`` key counting as 0.

* **Namespaces without an ElasticQuota** (as upstream): their pods pass PreFilter unchecked, never
  count towards any ``used``, may only preempt lower-priority pods of other such namespaces, and are
  never victims of a preemptor that has a quota. gpuq still remembers their pods, so an ElasticQuota
  created later starts with the right ``used`` (upstream starts it at zero).
* **Gangs.** Upstream knows no PodGroups and may evict one member of a running gang, leaving it
  below minMember with its other members still holding their nodes. gpuq takes from a gang only
  its members beyond minMember (:func:`spare_gang_members`, Volcano's gang preemptable rule).

Everything here is synchronous and pure over explicit state; the scheduler is single-threaded
asyncio, so the live state needs no lock (upstream's RWMutex guards informer goroutines).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from common.model.crd import ELASTIC_QUOTA_API_VERSION, ELASTIC_QUOTA_KIND, ElasticQuotaWire
from common.model.errors import InvalidValue, QuotaExceeded
from common.model.pods import PodInfo
from common.model.quantity import PODS, format_units
from common.model.resources import EMPTY, Resources
from common.model.wire import namespaced_object

API_VERSION: Final = ELASTIC_QUOTA_API_VERSION
KIND: Final = ELASTIC_QUOTA_KIND
PREEMPT_NEVER: Final = "Never"


# --------------------------------------------------------------------------------------------------
# The object
# --------------------------------------------------------------------------------------------------


class ElasticQuota(BaseModel):
    """An ElasticQuota (``scheduling.x-k8s.io/v1alpha1``) with amounts in gpuq's integer units.

    ``min``/``max`` keep exactly the keys the object lists (explicit zeros included); the meaning of
    an absent key (Semantics 4) is applied by the checks, not by filling the maps.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    namespace: str
    name: str
    min: Resources = EMPTY
    max: Resources = EMPTY
    status_used: Resources = EMPTY

    @property
    def ref(self) -> str:
        return f"{KIND}/{self.namespace}/{self.name}"

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> ElasticQuota:
        """Parse an API object; raises :class:`InvalidValue` naming the object and the field."""
        wire, namespace, name, where = namespaced_object(ElasticQuotaWire, obj, KIND)
        try:
            return cls(
                namespace=namespace,
                name=name,
                min=Resources.parse(wire.spec.min, "spec.min"),
                max=Resources.parse(wire.spec.max, "spec.max"),
                status_used=Resources.parse(wire.status.used, "status.used"),
            )
        except InvalidValue as err:
            raise err.located(where) from None

    def validate_spec(self) -> None:
        """The webhook's semantic checks: amounts non-negative and ``min <= max`` where both are set.

        Raises the first :class:`InvalidValue`, naming the object, ``spec.min[<res>]`` or
        ``spec.max[<res>]``, the value and what was expected.
        """
        for field, limits in (("spec.min", self.min), ("spec.max", self.max)):
            for key in sorted(limits):
                if limits[key] < 0:
                    raise InvalidValue(
                        f"{field}[{key}]", format_units(key, limits[key]), "a non-negative quantity", self.ref
                    )
        for key in sorted(self.min):
            if key in self.max and self.min[key] > self.max[key]:
                raise InvalidValue(
                    f"spec.min[{key}]",
                    format_units(key, self.min[key]),
                    f"at most spec.max[{key}] = {format_units(key, self.max[key])}",
                    self.ref,
                )


def validate_elastic_quota(obj: Mapping[str, Any]) -> ElasticQuota:
    """Parse and semantically validate an ElasticQuota for admission (CREATE/UPDATE)."""
    quota = ElasticQuota.from_dict(obj)
    quota.validate_spec()
    return quota


# --------------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElasticQuotaInfo:
    """One namespace's quota and usage. Immutable: the owner replaces it on every change."""

    namespace: str
    name: str
    min: Resources
    max: Resources
    used: Resources = EMPTY

    @property
    def ref(self) -> str:
        return f"{KIND}/{self.namespace}/{self.name}"

    def over_max_with(self, request: Mapping[str, int]) -> list[str]:
        """Requested resources for which ``used + request > max`` (absent ``max`` = unlimited)."""
        over = []
        for key, amount in request.items():
            if amount > 0 and key in self.max and self.used.amount(key) + amount > self.max[key]:
                over.append(key)
        return sorted(over)

    def over_min_with(self, request: Mapping[str, int], guaranteed: Iterable[str]) -> bool:
        """``used + request > min`` on any guaranteed resource (absent ``min`` = 0)."""
        return any(self.used.amount(key) + request.get(key, 0) > self.min.get(key, 0) for key in guaranteed)

    def over_min(self, guaranteed: Iterable[str]) -> bool:
        """The quota is borrowing: ``used > min`` on some guaranteed resource."""
        return self.over_min_with(EMPTY, guaranteed)


class Verdict(enum.Enum):
    OK = "OK"
    EXCEEDS_MAX = "ExceedsMax"
    EXCEEDS_TOTAL_MIN = "ExceedsTotalMin"


@dataclass(frozen=True, slots=True)
class PreFilterDecision:
    """The outcome of the two PreFilter checks; ``message`` is ready for the PodScheduled condition."""

    verdict: Verdict
    message: str = ""
    error: QuotaExceeded | None = None

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK


ALLOWED: Final = PreFilterDecision(Verdict.OK)


def _add_into(target: dict[str, int], amounts: Mapping[str, int], sign: int) -> None:
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

    def charged(self, namespace: str, key: str) -> Resources | None:
        """What pod ``key`` is charged in ``namespace``, or ``None`` if it is not tracked."""
        return self._pods.get(namespace, {}).get(key)

    # -- quota objects ----------------------------------------------------------------------------

    def upsert(self, quota: ElasticQuota) -> None:
        """Add or replace a namespace's quota; usage is recomputed from the pods already tracked."""
        self._drop(quota.namespace)
        used: dict[str, int] = {}
        for request in self._pods.get(quota.namespace, {}).values():
            _add_into(used, request, 1)
        info = ElasticQuotaInfo(quota.namespace, quota.name, quota.min, quota.max, Resources(used))
        self._infos[quota.namespace] = info
        self._used[quota.namespace] = used
        self._max[quota.namespace] = dict(quota.max)
        _add_into(self._total_min, info.min, 1)
        _add_into(self._total_used, info.used, 1)
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
        _add_into(self._total_min, old.min, -1)
        _add_into(self._total_used, used, -1)
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

        Called at start and after every re-list (DESIGN.md, Data flow): nothing is persisted, so a
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
                _add_into(used, request, 1)
            self._used[namespace] = used
            self._infos[namespace] = dataclasses.replace(info, used=Resources(used))
            _add_into(self._total_used, used, 1)
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
        """``used`` in each resource's own unit, for ``elastic_quota_used{namespace,resource}``."""
        info = self.get(namespace)
        if info is None:
            raise KeyError(namespace)
        return info.used.to_numbers()

    # -- PreFilter --------------------------------------------------------------------------------

    def prefilter(self, namespace: str, request: Mapping[str, int], pod_ref: str = "") -> PreFilterDecision:
        """The KEP's two PreFilter checks ("Additional Preemption Details") for a pod of ``namespace``.

        1. ``used + request > max`` of the pod's quota -> :attr:`Verdict.EXCEEDS_MAX`;
        2. ``sum(used) + request > sum(min)`` over all quotas -> :attr:`Verdict.EXCEEDS_TOTAL_MIN`.

        A namespace without an ElasticQuota is not checked. Both failures are resolvable by
        preemption (the scheduler should run PostFilter).
        """
        used = self._used.get(namespace)
        if used is None:
            return ALLOWED
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
        return ALLOWED

    def _prefilter_slow(self, namespace: str, request: Mapping[str, int], pod_ref: str) -> PreFilterDecision:
        info = self.get(namespace)
        if info is None:
            return ALLOWED
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
            )
            return PreFilterDecision(Verdict.EXCEEDS_MAX, _prefix(pod_ref, str(error)), error)
        key_over = self._over_total_min(request)
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
            )
            return PreFilterDecision(Verdict.EXCEEDS_TOTAL_MIN, _prefix(pod_ref, str(error)), error)
        return ALLOWED

    def _over_total_min(self, request: Mapping[str, int], freed: Mapping[str, int] = EMPTY) -> str | None:
        """The first requested guaranteed resource with ``sum(used) - freed + request > sum(min)``."""
        for key in sorted(request):
            amount = request[key]
            if amount <= 0 or self._min_refs.get(key, 0) <= 0:
                continue
            used = self._total_used.get(key, 0) - freed.get(key, 0)
            if used + amount > self._total_min.get(key, 0):
                return key
        return None


def _prefix(pod_ref: str, message: str) -> str:
    return f"{pod_ref}: {message}" if pod_ref else message


# --------------------------------------------------------------------------------------------------
# PostFilter: who may be preempted, and the victims on one node
# --------------------------------------------------------------------------------------------------


def _priority(pod: PodInfo) -> int:
    return pod.priority or 0


class VictimScope(enum.Enum):
    """Where a preemptor may take victims from (capacity-scheduling.md, PostFilter)."""

    NONE = "None"  # preemptionPolicy: Never
    BORROWERS = "Borrowers"  # used + request <= min: other namespaces whose used > min, any priority
    SAME_NAMESPACE = "SameNamespace"  # used + request > min: lower-priority pods of its own namespace
    NO_QUOTA = "NoQuota"  # preemptor without quota: lower-priority pods of namespaces without quota


def victim_scope(
    preemptor: PodInfo, infos: ElasticQuotaInfos, request: Mapping[str, int] | None = None
) -> VictimScope:
    """Which pods ``preemptor`` may preempt (KEP PostFilter; Semantics 4).

    ``preemptionPolicy: Never`` never preempts. With a quota, ``used + request <= min`` on every
    guaranteed resource means the preemptor is reclaiming its guarantee, so it may take from
    borrowers in other namespaces whatever their priority; otherwise only lower-priority pods of its
    own namespace ("restricted single-namespace preemption"). A request for no guaranteed resource
    reclaims nothing, so it is restricted to its own namespace too.
    """
    if preemptor.preemption_policy == PREEMPT_NEVER:
        return VictimScope.NONE
    info = infos.get(preemptor.namespace)
    if info is None:
        return VictimScope.NO_QUOTA
    req = {k: v for k, v in (preemptor.requests if request is None else request).items() if k != PODS}
    guaranteed = infos.guaranteed
    # A request that touches no guaranteed resource has no guarantee to reclaim.
    reclaims = any(amount > 0 and key in guaranteed for key, amount in req.items())
    if not reclaims or info.over_min_with(req, guaranteed):
        return VictimScope.SAME_NAMESPACE
    return VictimScope.BORROWERS


def is_eligible_victim(
    scope: VictimScope, preemptor: PodInfo, victim: PodInfo, infos: ElasticQuotaInfos
) -> bool:
    """Whether ``victim`` may be preempted by ``preemptor`` under ``scope`` (see :func:`victim_scope`)."""
    if victim.key == preemptor.key or not victim.holds_resources:
        return False
    victim_info = infos.get(victim.namespace)
    if scope is VictimScope.BORROWERS:
        return (
            victim_info is not None
            and victim.namespace != preemptor.namespace
            and victim_info.over_min(infos.guaranteed)
        )
    if scope is VictimScope.SAME_NAMESPACE:
        return victim.namespace == preemptor.namespace and _priority(victim) < _priority(preemptor)
    if scope is VictimScope.NO_QUOTA:
        return victim_info is None and _priority(victim) < _priority(preemptor)
    return False


@dataclass(frozen=True, slots=True)
class VictimSelection:
    """Victims on one node, least important first; ``ok`` False with a ``reason`` when none work."""

    ok: bool
    victims: tuple[PodInfo, ...] = ()
    reason: str = ""

    @property
    def highest_priority(self) -> int:
        return max((_priority(p) for p in self.victims), default=-(2**31))


# Upper bound on the subsets the exact "fewest victims" search evaluates before falling back to
# kube-scheduler's greedy reprieve; with 12 candidates every subset fits in it.
DEFAULT_SEARCH_BUDGET: Final = 4096


def select_victims_on_node(
    preemptor: PodInfo,
    node_pods: Sequence[PodInfo],
    node_free: Mapping[str, int],
    infos: ElasticQuotaInfos,
    *,
    request: Resources | None = None,
    fits: Callable[[Sequence[PodInfo]], bool] | None = None,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
) -> VictimSelection:
    """Choose the victims on one node so that ``preemptor`` fits it and passes the quota checks.

    ``node_pods`` are the pods running on the node, ``node_free`` the node's allocatable minus what
    they request (include ``pods`` to count pod slots), ``infos`` the cycle's snapshot. ``fits``, if
    given, runs the scheduler's other filters with the given pods removed from the node.

    Upstream ``SelectVictimsOnNode``: take every eligible pod (:func:`is_eligible_victim`); if the
    preemptor does not fit with all of them gone, or the quota checks (own ``max``, total ``min``)
    still fail, the node is no candidate (the KEP's cross-node limitation). Then, as Semantics 4
    asks, the *fewest* victims, ties broken by the lowest highest priority, then the lowest priority
    sum, then least important (newest) first: an exact search up to ``search_budget`` subsets, and
    beyond that kube-scheduler's reprieve (add victims back most important first while the preemptor
    still fits). Feasibility only grows with more victims, so an exact answer needs no reprieve.
    """
    req = preemptor.requests if request is None else request
    scope = victim_scope(preemptor, infos, req)
    if scope is VictimScope.NONE:
        return VictimSelection(
            False, reason=f"{preemptor.ref}: not eligible to preempt (preemptionPolicy=Never)"
        )
    candidates = [p for p in node_pods if is_eligible_victim(scope, preemptor, p, infos)]
    if not candidates:
        return VictimSelection(
            False, reason=f"{preemptor.ref}: no eligible victims on the node ({scope.value})"
        )
    # Least important first: lower priority, then the newer pod (kube-scheduler's MoreImportantPod).
    candidates.sort(key=lambda p: (_priority(p), _neg_time(p.creation_timestamp), p.key))

    quota_req = {k: v for k, v in req.items() if k != PODS}
    node_req = dict(quota_req)
    if PODS in node_free:
        node_req[PODS] = 1
    own = infos.get(preemptor.namespace)
    charges = [_charge_of(p, infos) for p in candidates]

    def feasible(chosen: Sequence[int]) -> bool:
        freed_node: dict[str, int] = {}
        freed_own: dict[str, int] = {}
        freed_quota: dict[str, int] = {}
        for i in chosen:
            victim = candidates[i]
            _add_into(freed_node, victim.requests, 1)
            freed_node[PODS] = freed_node.get(PODS, 0) + 1
            charge = charges[i]
            if charge is not None:
                _add_into(freed_quota, charge, 1)
                if victim.namespace == preemptor.namespace:
                    _add_into(freed_own, charge, 1)
        for key, amount in node_req.items():
            if amount > 0 and node_free.get(key, 0) + freed_node.get(key, 0) < amount:
                return False
        if own is not None:
            for key, amount in quota_req.items():
                if (
                    amount > 0
                    and key in own.max
                    and own.used.amount(key) - freed_own.get(key, 0) + amount > own.max[key]
                ):
                    return False
            if infos._over_total_min(quota_req, freed_quota) is not None:
                return False
        return fits is None or fits([candidates[i] for i in chosen])

    everyone = range(len(candidates))
    if not feasible(everyone):
        return VictimSelection(
            False,
            reason=(
                f"{preemptor.ref}: preempting every eligible pod on the node ({len(candidates)}) "
                "would not make room within the node and the elastic quotas"
            ),
        )
    best = _fewest(candidates, feasible, search_budget)
    if best is None:
        best = _reprieve(len(candidates), feasible)
    return VictimSelection(True, tuple(candidates[i] for i in sorted(best)))


def spare_gang_members(
    pods: Sequence[PodInfo], gang_of: Callable[[PodInfo], tuple[str, int] | None]
) -> list[PodInfo]:
    """The pods preemption may take without breaking a gang. ``gang_of(pod)`` is None for a pod
    outside a gang (a PodGroup with minMember above 1), else its gang's key and how many members it
    runs beyond minMember. A gang gives up at most that many, its least important first (Volcano's
    gang rule: a job is preemptable only while it keeps minAvailable running); every other pod stays
    eligible. Least important first, as :func:`select_victims_on_node` orders them."""
    spare: dict[str, int] = {}
    out: list[PodInfo] = []
    for pod in sorted(pods, key=lambda p: (_priority(p), _neg_time(p.creation_timestamp), p.key)):
        gang = gang_of(pod)
        if gang is None:
            out.append(pod)
            continue
        key, beyond_min = gang
        left = spare.setdefault(key, beyond_min)
        if left > 0:
            spare[key] = left - 1
            out.append(pod)
    return out


def _neg_time(timestamp: str) -> tuple[int, ...]:
    # RFC 3339 timestamps in UTC sort as strings; negate character codes to put the newest first.
    return tuple(-ord(c) for c in timestamp)


def _charge_of(pod: PodInfo, infos: ElasticQuotaInfos) -> Resources | None:
    if pod.namespace not in infos:
        return None
    charged = infos.charged(pod.namespace, pod.key)
    return charged if charged is not None else pod.requests


def _fewest(
    candidates: Sequence[PodInfo], feasible: Callable[[Sequence[int]], bool], budget: int
) -> list[int] | None:
    """The best feasible subset of minimum size, or ``None`` when the search budget runs out."""
    n = len(candidates)
    spent = 0
    for size in range(n + 1):
        best: tuple[tuple[int, int, tuple[int, ...]], list[int]] | None = None
        for combo in itertools.combinations(range(n), size):
            spent += 1
            if spent > budget:
                return None
            if feasible(combo):
                prios = [_priority(candidates[i]) for i in combo]
                rank = (max(prios, default=0), sum(prios), combo)
                if best is None or rank < best[0]:
                    best = (rank, list(combo))
        if best is not None:
            return best[1]
    return None


def _reprieve(n: int, feasible: Callable[[Sequence[int]], bool]) -> list[int]:
    """kube-scheduler's reprieve: start from all victims, give back the most important first."""
    victims = list(range(n))
    for i in reversed(range(n)):
        trial = [v for v in victims if v != i]
        if feasible(trial):
            victims = trial
    return victims
