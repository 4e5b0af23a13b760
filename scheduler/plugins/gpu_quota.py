"""``gpu-quota``: GPUResourceQuota (TFLOPS, VRAM, workers per namespace), thin glue over
:mod:`common.model.gpu_quota` (spec ``gpu-resource-quota.md``; design.md Semantics 5).

A pod's request comes from its tensor-fusion annotations, else from the card of the node it would
land on, so it can differ per node:

* annotated pods: PreFilter checks the single limits (UnschedulableAndUnresolvable, retried only when
  a quota changes: ``gpu-quota:single``) and the totals (retried when a pod leaves or a quota changes);
* card-derived pods: Filter asks :meth:`GPUQuotaStore.fits_array` with each node's per-GPU TFLOPS and
  VRAM (from this plugin's per-resource node arrays, rebuilt only when a node changes).

Reserve charges with :meth:`GPUQuotaStore.reserve` (check and charge in one step, so two pods
cannot both take the last share); Unreserve releases with :meth:`GPUQuotaStore.unreserve`. Every
rejection is unresolvable for preemption: evicting ElasticQuota victims does not return GPU quota to
the namespace.

Status: the store's dirty namespaces are written once per sync (:meth:`take_status`) with
``used``, ``availablePercent`` and the ``Ready`` / ``AlertThresholdReached`` conditions, and the
QuotaAlertThreshold event when usage crosses the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.cards.card_type import CARD_UNIT, CardType
from gpuq_k8s.common.model.cards.discovery import NodeCards, discover_cards
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.events import EventRecord, invalid_annotation
from gpuq_k8s.common.model.gpu_quota.card_share import CardShare, card_share, with_unidentified_cards
from gpuq_k8s.common.model.gpu_quota.quota import GPUResourceQuota
from gpuq_k8s.common.model.gpu_quota.request import GPURequest, has_tf_annotations, request_from_annotations
from gpuq_k8s.common.model.gpu_quota.store import GPUQuotaStore
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.outlook import annotation_outlook, with_outlook
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    GroupInfo,
    Handle,
    PreFilterPlugin,
    ReasonMasks,
    ReservePlugin,
    StatusPatch,
    read_or_warn,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.dra_attempt import allocate_every_row
from gpuq_k8s.scheduler.plugins.dra_events import freed_devices
from gpuq_k8s.scheduler.plugins.dra_extended import uses_devices
from gpuq_k8s.scheduler.plugins.gpu_quota_claims import NamespaceClaims

SINGLE: Final = f"{plugin_names.GPU_QUOTA}:single"
# A gang whose minMember workers the namespace's totals can never hold at once.
GANG: Final = f"{plugin_names.GPU_QUOTA}:gang"
_EMPTY_NODE: Final = NodeCards("")
# A per-GPU amount gpuq cannot derive on that node (unknown product, no .memory label).
_UNKNOWN: Final = -1

Int64Array = npt.NDArray[np.int64]
_MAX_PREPARED: Final = 4096


@dataclass(frozen=True, slots=True)
class _Shares:
    """Per node row, what one unit of ``resource`` is worth there (``_UNKNOWN`` where underivable)."""

    tflops: Int64Array
    vram: Int64Array
    present: BoolArray  # the node has a card type for the resource


@dataclass(frozen=True, slots=True)
class _GpuPod:
    """What PreFilter worked out for one attempt: a fixed request, or the card resource to derive it."""

    request: GPURequest | None
    resource: str = ""
    count: int = 0


_UNPREPARED: Final = _GpuPod(None)


class GPUQuota(PreFilterPlugin, FilterPlugin, ReservePlugin):
    name = plugin_names.GPU_QUOTA
    events = frozenset(
        {
            ClusterEvent.POD_DELETED,
            ClusterEvent.QUOTA_CHANGED,
            ClusterEvent.NODE_ADDED,
            ClusterEvent.NODE_CHANGED,
            ClusterEvent.RESOURCE_CLAIM_CHANGED,  # a claim's devices given back: its charge refunded
        }
    )
    event_groups: ClassVar[Mapping[str, frozenset[ClusterEvent]]] = {
        SINGLE: frozenset({ClusterEvent.QUOTA_CHANGED}),
        GANG: frozenset({ClusterEvent.QUOTA_CHANGED, ClusterEvent.PODGROUP_CHANGED, ClusterEvent.POD_ADDED}),
    }

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        self.store = GPUQuotaStore()
        self._cards: list[NodeCards] = []
        self._labels: list[Mapping[str, str]] = []
        self._shares: dict[str, _Shares] = {}
        self._card_resources: frozenset[str] | None = None
        # Per node row, its card types with what one unit of each is worth, in discovery order:
        # computed when the node changes, read for every pod charged there.
        self._row_shares: list[tuple[tuple[CardType, CardShare], ...]] = []
        # Per request vector, what PreFilter prepares for a card-derived pod (None: no card asked);
        # depends on the cluster's card resources, so cleared with them.
        self._prepared: dict[Resources, _GpuPod | None] = {}
        # The pod (key, row) this plugin's Reserve settled last (charged, or nothing to charge): the
        # cluster's add of that pod follows and has nothing to do. Forgotten on anything that could
        # change the answer (Unreserve, a removal, a node change).
        self._settled: tuple[str, int] | None = None
        self._status: dict[str, dict[str, Any]] = {}
        for namespace, name, obj in handle.objects.list(kinds.GPU_RESOURCE_QUOTA):
            self._object(kinds.GPU_RESOURCE_QUOTA, namespace, name, obj)
        handle.objects.subscribe(self._object)
        handle.cluster.subscribe(self)
        self.claims = NamespaceClaims(handle, self.store)  # DRA devices (gpu_quota_claims.py)

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        """A claim event only when it gave devices back (its charge refunded: :func:`freed_devices`);
        every other registered event always."""
        return event is not ClusterEvent.RESOURCE_CLAIM_CHANGED or freed_devices(old, new)

    # -- inputs -----------------------------------------------------------------------------------
    def _object(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        if kind != kinds.GPU_RESOURCE_QUOTA:
            return
        if obj is None:
            self.store.remove_quota(namespace)
            self._status.pop(namespace, None)
            return
        ref = kinds.GPU_RESOURCE_QUOTA.ref(namespace, name)
        quota = read_or_warn(self.handle, ref, GPUResourceQuota.from_dict, obj)
        if quota is not None:
            self.store.set_quota(quota)

    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        while len(self._cards) <= row:
            self._cards.append(_EMPTY_NODE)
            self._labels.append({})
            self._row_shares.append(())
        # Unlabelled GPU resources count too: a quota must not be bypassed on a node without labels.
        cards = self._cards[row] = (
            with_unidentified_cards(new, discover_cards(new)) if new is not None else _EMPTY_NODE
        )
        labels = self._labels[row] = new.labels if new is not None else {}
        self._row_shares[row] = tuple((card, card_share(card, labels)) for card in cards.cards)
        self._settled = None
        self._shares.clear()
        self._card_resources = None
        self._prepared.clear()

    def pod_added(self, pod: PodInfo, row: int) -> None:
        """A bound pod: charged unchecked when someone else bound it (it runs already)."""
        settled = self._settled
        if settled is not None:
            self._settled = None
            if settled[1] == row and settled[0] == pod.key:
                return
        if self.store.is_reserved(pod.namespace, pod.key):
            return
        try:
            request = self._charged_request(pod, row)
        except InvalidValue as err:
            self.handle.record(invalid_annotation(pod.ref, f"GPU quota not charged: {err}"))
            return
        if request is None:
            return
        try:
            self.store.reserve(pod.namespace, request, pod.key)
        except QuotaExceeded:
            # Running pods over the quota (lowered under them): the store charges unchecked only
            # through a full rebuild, which this rare case can afford.
            self._rebuild()

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        self._settled = None
        self.store.unreserve(pod.namespace, pod.key)

    def _rebuild(self) -> None:
        cluster = self.handle.cluster

        def request_of(pod: PodInfo) -> GPURequest | None:
            return self._charged_request(pod, cluster.pod_row(pod.node_name))

        for event in self.store.rebuild(list(cluster.pods.values()), request_of):
            self.handle.record(event)
        self.claims.recharge()

    # -- requests ---------------------------------------------------------------------------------
    def _charged_request(self, pod: PodInfo, row: int) -> GPURequest | None:
        """What the pod itself is charged on node ``row``: its request (:meth:`_request_on`), else,
        for a pod with DRA claims or an extended resource a DeviceClass serves (its implicit claim),
        one worker (its devices are charged with its claims, once whatever number of pods share them:
        docs/design.md "Quota over devices")."""
        request = self._request_on(pod, row)
        if request is None and uses_devices(self.handle, pod):
            return GPURequest.worker_only()
        return request

    def _request_on(self, pod: PodInfo, row: int) -> GPURequest | None:
        """The pod's request on node ``row`` (Semantics 5); raises InvalidValue when underivable.

        Runs in Reserve and for every bound pod: a pod without tensor-fusion annotations is answered
        from the row's cached card shares; the rest, and every error, by :meth:`_request_slow`."""
        if row >= len(self._cards) or has_tf_annotations(pod):
            return self._request_slow(pod, row)
        requests = pod.requests
        for card, share in self._row_shares[row]:
            units = requests.amount(card.resource)
            if units > 0:
                request = self.store.card_request(pod.namespace, units, share)
                return request if request is not None else self._request_slow(pod, row)
        return None

    def _request_slow(self, pod: PodInfo, row: int) -> GPURequest | None:
        """The reference derivation :meth:`_request_on` must agree with."""
        cards = self._cards[row] if row < len(self._cards) else _EMPTY_NODE
        card = next((c for c in cards.cards if pod.requests.amount(c.resource) > 0), None)
        return self.store.request_for(pod, card, self._labels[row] if card else None, node_name=cards.node)

    def _shares_of(self, resource: str, n: int) -> _Shares:
        shares = self._shares.get(resource)
        if shares is not None and shares.present.shape[0] >= n:
            return shares
        tflops = np.full(n, _UNKNOWN, dtype=np.int64)
        vram = np.full(n, _UNKNOWN, dtype=np.int64)
        present = np.zeros(n, dtype=np.bool_)
        for row, row_shares in enumerate(self._row_shares[:n]):
            share = next((share for card, share in row_shares if card.resource == resource), None)
            if share is None:
                continue
            present[row] = True
            tflops[row] = _UNKNOWN if share.tflops is None else share.tflops
            vram[row] = _UNKNOWN if share.vram is None else share.vram
        shares = self._shares[resource] = _Shares(tflops, vram, present)
        return shares

    # -- extension points -------------------------------------------------------------------------
    def _gang_refusal(self, group: GroupInfo, namespace: str) -> str | None:
        """The gang's minMember workers are held at once: can the namespace's totals ever hold them?"""
        quota = self.store.quota(namespace)
        requests: list[GPURequest] = []
        for member in self.handle.group_members(group):
            try:
                request = request_from_annotations(member, quota) if has_tf_annotations(member) else None
            except InvalidValue:
                request = None  # its own PreFilter says why; here it counts as asking nothing
            # Without annotations only the worker counts before a node is chosen (Semantics 5).
            requests.append(request if request is not None else GPURequest.count_only(1))
        refusal = self.store.check_gang(namespace, requests, group.min_member, f"PodGroup {group.key}")
        return None if refusal is None else refusal.message

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        namespace = pod.namespace
        if not self.store.has_quota(namespace):
            return Status.skip()
        if uses_devices(self.handle, pod):
            allocate_every_row(state)  # its devices' TFLOPS and VRAM are checked row by row
        group = self.handle.group_of(pod)
        if group is not None and group.min_member > 1:
            never = self._gang_refusal(group, namespace)
            if never is not None:
                return Status.unresolvable(never, plugin=GANG)
        if has_tf_annotations(pod):
            try:
                request = request_from_annotations(pod, self.store.quota(namespace))
            except InvalidValue as err:
                self.handle.record(invalid_annotation(pod.ref, str(err)))
                # The pod's own annotation: no usage change cures it (design.md Semantics 14).
                message = with_outlook(str(err), annotation_outlook(err.field))
                return Status.unresolvable(message, plugin=SINGLE)
            assert request is not None
            single = self.store.check_single(namespace, request)
            if single is not None:
                return Status.unresolvable(single.message, plugin=SINGLE)
            total = self.store.check(namespace, request)
            if total is not None:
                return Status.unresolvable(total.message)
            return Status.skip()  # the same on every node: nothing for Filter to add
        requests = pod.requests
        prepared = self._prepared.get(requests, _UNPREPARED)
        if prepared is _UNPREPARED:
            prepared = self._prepare(requests)
            if len(self._prepared) >= _MAX_PREPARED:
                self._prepared.clear()
            self._prepared[requests] = prepared
        if prepared is None:
            # A pod with DRA claims is checked on the rows DynamicResources found devices on.
            return Status.success() if uses_devices(self.handle, pod) else Status.skip()
        state.write(plugin_names.GPU_QUOTA, prepared)
        return Status.success()

    def _prepare(self, requests: Resources) -> _GpuPod | None:
        resource = next((r for r in sorted(requests) if requests[r] > 0 and self._is_card_resource(r)), "")
        if not resource:
            return None
        return _GpuPod(None, resource, -(-requests[resource] // CARD_UNIT))

    def _is_card_resource(self, resource: str) -> bool:
        if self._card_resources is None:
            self._card_resources = frozenset(c.resource for cards in self._cards for c in cards.cards)
        return resource in self._card_resources

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        n = self.handle.cluster.n
        prepared = state.read(plugin_names.GPU_QUOTA, _GpuPod)
        if prepared is None:
            devices = self.claims.filter_rows(state, pod, n) if uses_devices(self.handle, pod) else None
            if devices is None:
                return FilterResult.all_pass(n)
            rejected, device_reasons = devices
            return FilterResult(~rejected, lambda: device_reasons, unresolvable=rejected)
        shares = self._shares_of(prepared.resource, n)
        tflops, vram = shares.tflops[:n], shares.vram[:n]
        quota = self.store.quota(pod.namespace)
        known = np.ones(n, dtype=np.bool_)
        if quota is not None and quota.uses_tflops:
            known &= tflops != _UNKNOWN
        if quota is not None and quota.uses_vram:
            known &= vram != _UNKNOWN
        t = np.maximum(tflops, 0)
        v = np.maximum(vram, 0)
        fits = self.store.fits_array(
            pod.namespace,
            tflops_request=t,
            vram_request=v,
            tflops_limit=t,
            vram_limit=v,
            gpu_count=prepared.count,
        )
        # A node without the card resource cannot take the pod anyway (resource fit says why).
        passed: BoolArray = ~shares.present[:n] | (known & fits)
        namespace = pod.namespace

        def reasons() -> ReasonMasks:
            out: list[tuple[BoolArray, str]] = []
            rejected = ~passed
            unknown = rejected & ~known
            for row in np.flatnonzero(unknown)[:1].tolist():
                try:
                    self._request_on(pod, row)
                except InvalidValue as err:
                    out.append((unknown, str(err)))
            over = rejected & known
            if over.any():
                pairs = np.stack([t, v], axis=1)
                for tv in np.unique(pairs[over], axis=0):
                    same = over & (t == tv[0]) & (v == tv[1])
                    request = GPURequest(int(tv[0]), int(tv[1]), int(tv[0]), int(tv[1]), prepared.count)
                    refusal = self.store.check(namespace, request)
                    out.append((same, refusal.message if refusal is not None else "GPU quota exceeded"))
            return out

        return FilterResult(passed, reasons, unresolvable=~passed)

    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        devices = self.claims.reserve(state, pod, row)
        if not devices.is_success:
            return devices
        try:
            request = self._charged_request(pod, row)
        except InvalidValue as err:
            self.claims.unreserve(pod)
            return Status.unresolvable(str(err))
        key = pod.key
        if request is not None:
            try:
                self.store.reserve(pod.namespace, request, key)
            except QuotaExceeded as err:
                self.claims.unreserve(pod)
                return Status.unresolvable(
                    str(err), plugin=SINGLE if err.unresolvable else plugin_names.GPU_QUOTA
                )
        self._settled = (key, row)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        self._settled = None
        self.store.unreserve(pod.namespace, pod.key)
        self.claims.unreserve(pod)

    # -- status and report ------------------------------------------------------------------------
    def take_status(self, now: datetime) -> tuple[list[StatusPatch], list[EventRecord]]:
        patches: list[StatusPatch] = []
        events: list[EventRecord] = []
        for namespace in sorted(self.store.take_dirty()):
            quota = self.store.quota(namespace)
            if quota is None:
                continue
            computed = self.store.status(namespace, now)
            self._status[namespace] = computed.status
            patches.append(StatusPatch(kinds.GPU_RESOURCE_QUOTA, namespace, quota.name, computed.status))
            if computed.event is not None:
                events.append(computed.event)
        return patches, events

    def report(self) -> dict[str, list[dict[str, Any]]]:
        rows: list[dict[str, Any]] = []
        for namespace in self.store.namespaces():
            quota = self.store.quota(namespace)
            assert quota is not None
            status = self._status.get(namespace, {})
            rows.append(
                {
                    "namespace": namespace,
                    "name": quota.name,
                    "status": {
                        k: status[k] for k in ("used", "availablePercent", "conditions") if k in status
                    },
                }
            )
        return {"gpuResourceQuotas": rows}

    def pod_fields(self, pod: PodInfo) -> dict[str, Any]:
        return {}
