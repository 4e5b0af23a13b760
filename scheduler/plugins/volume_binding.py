"""VolumeBinding (kube-scheduler's ``volumebinding``): a pod's PersistentVolumeClaims must be bound, or
bindable or provisionable on the node, and the ``WaitForFirstConsumer`` ones are bound in PreBind,
before the pod: the rules are :mod:`common.model.placement.volumes.binder`'s.

* PreFilter: a missing, lost or deleting claim, or an unbound ``Immediate`` one, keeps the pod pending,
  UnschedulableAndUnresolvable, with kube-scheduler's message; a pod without claims is skipped.
* Filter, over every node row at once: a bound claim's volume must take the node (its node affinity,
  cached per volume until node labels change), and every delayed claim needs a static volume the
  node may use (smallest fit first, one volume per claim) or a class that may provision there. Each
  row equals :func:`~common.model.placement.volumes.binder.find_pod_volumes` on that node (a test
  holds them to it).
* Reserve: the chosen node's bindings and provisionings are assumed (the ledger), so the next pod
  never takes the same volume and a pod sharing the claim follows it; Unreserve forgets them.
* PreBind: the plan writes each chosen volume's claimRef and each provisioned claim's selected-node
  annotation, then waits (``volumebinding.bindTimeoutSeconds``) until the PV controller bound them all;
  the pod is bound after, and a failure unreserves and retries it (scheduler/cycle.py).

With ``gpuq simulate`` the report gains a ``persistentVolumeClaims`` section: each claim, its phase,
its volume and the node it was provisioned for.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.placement.volumes.binder import (
    BINDING_VOLUMES,
    ERR_BIND_CONFLICT,
    ERR_NODE_CONFLICT,
    ERR_PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    NodeVolumes,
    SortedClaims,
    bindings_ready,
    find_pod_volumes,
    sort_claims,
    writes,
)
from gpuq_k8s.common.model.placement.volumes.claim_lookup import binding_claims, claim_volumes
from gpuq_k8s.common.model.placement.volumes.claims import Claim, parse_claim
from gpuq_k8s.common.model.placement.volumes.ledger import VolumeLedger
from gpuq_k8s.common.model.placement.volumes.matching import could_take, passes_basics
from gpuq_k8s.common.model.placement.volumes.persistent_volumes import parse_volume
from gpuq_k8s.common.model.placement.volumes.storage import Storage
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import Lookup, PreBindPlan, Progress
from gpuq_k8s.common.model.predicates import DEFAULT_BIND_TIMEOUT_SECONDS
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    Handle,
    PreBindPlugin,
    PreFilterPlugin,
    ReservePlugin,
)
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.storage_view import StorageView, claim_event_concerns, storage_view

_CLAIMS: Final = f"{plugin_names.VOLUME_BINDING}/claims"
_CHOSEN: Final = f"{plugin_names.VOLUME_BINDING}/chosen"
_NO_SIZE: Final = np.iinfo(np.int64).max
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class _Chosen:
    node: str
    labels: Mapping[str, str]
    volumes: NodeVolumes


class VolumeBinding(PreFilterPlugin, FilterPlugin, ReservePlugin, PreBindPlugin):
    name = plugin_names.VOLUME_BINDING
    # kube-scheduler's EventsToRegister: StorageClass, PVC and PV added or updated, node added or
    # relabelled, CSINode added or updated (a claim event only for the pods that use the claim).
    events = frozenset(
        {
            ClusterEvent.STORAGE_CLASS_CHANGED,
            ClusterEvent.PVC_CHANGED,
            ClusterEvent.PV_CHANGED,
            ClusterEvent.NODE_ADDED,
            ClusterEvent.NODE_CHANGED,
            ClusterEvent.CSI_NODE_CHANGED,
        }
    )

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        return claim_event_concerns(event, pod, old, new)

    def __init__(self, handle: Handle, timeout: float = DEFAULT_BIND_TIMEOUT_SECONDS) -> None:
        super().__init__(handle)
        self.timeout = timeout
        self.storage: StorageView = storage_view(handle.objects)
        self.ledger = VolumeLedger()
        handle.objects.subscribe(self._object)

    def _object(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        """Assumptions end once the caches show what was assumed (or the object is gone)."""
        if not len(self.ledger):
            return
        try:
            if kind is kinds.PERSISTENT_VOLUME_CLAIM:
                if obj is None:
                    self.ledger.forget(claim_key=f"{namespace}/{name}")
                else:
                    self.ledger.observe_claim(parse_claim(obj))
            elif kind is kinds.PERSISTENT_VOLUME:
                if obj is None:
                    self.ledger.forget(volume=name)
                else:
                    self.ledger.observe_volume(parse_volume(obj))
        except InvalidValue:
            pass  # a malformed object is reported where a pod's attempt reads it

    def _view(self) -> Storage:
        return self.ledger.view(self.storage)

    # -- PreFilter / Filter -----------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not claim_volumes(pod):
            return Status.skip()
        storage = self._view()
        found = binding_claims(pod, storage)
        if found.problem:
            return Status.unresolvable(found.problem)
        claims = sort_claims(found.claims, storage)
        if claims.immediate:
            return Status.unresolvable(UNBOUND_IMMEDIATE)
        state.write(_CLAIMS, claims)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        claims = state.read(_CLAIMS, SortedClaims)
        cluster = self.handle.cluster
        n = cluster.n
        if claims is None:
            return FilterResult.all_pass(n)
        storage = self._view()
        node_conflict = np.zeros(n, dtype=np.bool_)
        missing = np.zeros(n, dtype=np.bool_)
        remaining = np.ones(n, dtype=np.bool_)
        for claim in claims.bound:  # checkBoundClaims: the first failing claim decides, per node
            volume = storage.volume(claim.volume_name)
            if volume is None:
                missing |= remaining
                break
            if volume.node_affinity is not None:
                fits = self.storage.node_mask(cluster, volume.node_affinity)
                node_conflict |= remaining & ~fits
                remaining &= fits
        bind_conflict = self._unbound(claims.delayed, storage, n) if claims.delayed else np.zeros(n, np.bool_)
        failed = node_conflict | bind_conflict | missing
        if not failed.any():
            return FilterResult.all_pass(n)

        def reasons() -> tuple[tuple[BoolArray, str], ...]:
            pairs = (
                (node_conflict, ERR_NODE_CONFLICT),
                (bind_conflict, ERR_BIND_CONFLICT),
                (missing, ERR_PV_NOT_EXIST),
            )
            return tuple((mask, message) for mask, message in pairs if mask.any())

        return FilterResult(~failed, reasons, failed)

    def _unbound(self, claims: tuple[Claim, ...], storage: Storage, n: int) -> BoolArray:
        """The rows where the delayed claims can be neither matched nor provisioned (``FindPodVolumes``'
        unbound part over every row; see the module docstring)."""
        cluster = self.handle.cluster
        ok = np.ones(n, dtype=np.bool_)
        to_provision: list[tuple[Claim, BoolArray | None]] = []  # (claim, rows needing it; None: all)
        for claim in claims:
            if claim.selected_node is not None:
                selected = np.zeros(n, dtype=np.bool_)
                row = cluster.row_of.get(claim.selected_node)
                if row is not None and row < n:
                    selected[row] = True
                ok &= selected
                to_provision.append((claim, None))
        taken: dict[str, BoolArray] = {}
        for claim in sorted((c for c in claims if c.selected_node is None), key=lambda c: c.request):
            chosen = self._match(claim, storage, taken, n)
            matched = chosen >= 0
            candidates = storage.volumes_of_class(claim.storage_class)
            for index in np.unique(chosen[matched]).tolist():
                name = candidates[index].name
                rows = chosen == index
                taken[name] = taken[name] | rows if name in taken else rows
            to_provision.append((claim, ~matched))
        for claim, rows in to_provision:
            possible = self._provisionable(claim, storage, n)
            ok &= possible if rows is None else (~rows | possible)
        return ~ok

    def _match(self, claim: Claim, storage: Storage, taken: Mapping[str, BoolArray], n: int) -> IntArray:
        """Per row, the index (among the class's volumes) of the volume ``find_matching_volume`` picks
        for ``claim`` there, -1 for none."""
        cluster = self.handle.cluster
        chosen = np.full(n, -1, dtype=np.int64)
        decided = np.zeros(n, dtype=np.bool_)
        smallest = np.full(n, _NO_SIZE, dtype=np.int64)
        everywhere = np.ones(n, dtype=np.bool_)
        for index, volume in enumerate(storage.volumes_of_class(claim.storage_class)):
            if not passes_basics(claim, volume):
                continue
            bound_here = volume.bound_to(claim)
            if volume.claim_ref is not None and not bound_here:
                continue
            available = ~decided
            if volume.name in taken:
                available &= ~taken[volume.name]
            fits = (
                everywhere
                if volume.node_affinity is None
                else self.storage.node_mask(cluster, volume.node_affinity)
            )
            if bound_here:  # the first volume bound to the claim decides the rows still open
                chosen[available & fits] = index
                chosen[available & ~fits] = -1
                decided |= available
                continue
            if not could_take(claim, volume):
                continue
            better = available & fits & (smallest > volume.capacity)
            chosen[better] = index
            smallest[better] = volume.capacity
        return chosen

    def _provisionable(self, claim: Claim, storage: Storage, n: int) -> BoolArray:
        storage_class = storage.storage_class(claim.storage_class) if claim.storage_class else None
        if storage_class is None or not storage_class.provisions:
            return np.zeros(n, dtype=np.bool_)
        if storage_class.allowed_topologies is None:
            return np.ones(n, dtype=np.bool_)
        return self.storage.node_mask(self.handle.cluster, storage_class.allowed_topologies)

    # -- Reserve / PreBind -----------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        claims = state.read(_CLAIMS, SortedClaims)
        if claims is None or not claims.delayed:
            return Status.success()  # every claim bound: nothing to bind
        node = self.handle.cluster.nodes[row]
        if node is None:
            return Status.error(f"node row {row} has no node")
        volumes = find_pod_volumes(claims, node.name, node.labels, self._view())
        if volumes.reasons:
            return Status.error(
                f"{pod.ref} cannot use its volumes on {node.ref}: {', '.join(volumes.reasons)}"
            )
        conflict = self.ledger.reserve(pod.key, node.name, volumes)
        if conflict is not None:
            return Status.error(conflict)
        state.write(_CHOSEN, _Chosen(node.name, node.labels, volumes))
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        self.ledger.unreserve(pod.key)

    def pre_bind(self, state: CycleState, pod: PodInfo, row: int) -> PreBindPlan | Status:
        chosen = state.read(_CHOSEN, _Chosen)
        if chosen is None or not (chosen.volumes.bindings or chosen.volumes.provisions):
            return Status.skip()
        return PreBindPlan(
            self.name,
            writes(chosen.volumes, chosen.node),
            functools.partial(_ready, volumes=chosen.volumes, node=chosen.node, labels=chosen.labels),
            timeout=self.timeout,
            waiting_for=BINDING_VOLUMES,
        )

    # -- gpuq simulate's report ----------------------------------------------------------------------
    def report(self) -> Mapping[str, list[dict[str, Any]]]:
        rows: list[dict[str, Any]] = []
        for namespace, name, _ in self.handle.objects.list(kinds.PERSISTENT_VOLUME_CLAIM):
            try:
                claim = self.storage.claim(namespace, name)
            except InvalidValue:
                continue
            if claim is None:
                continue
            rows.append(
                {
                    "namespace": namespace,
                    "name": name,
                    "phase": claim.phase,
                    "volume": claim.volume_name or None,
                    "storageClass": claim.storage_class or None,
                    "selectedNode": claim.selected_node,
                }
            )
        return {"persistentVolumeClaims": rows} if rows else {}

    def pod_fields(self, pod: PodInfo) -> Mapping[str, Any]:
        return {}


def _ready(lookup: Lookup, *, volumes: NodeVolumes, node: str, labels: Mapping[str, str]) -> Progress:
    return bindings_ready(lookup, volumes, node, labels)
