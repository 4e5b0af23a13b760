"""``GPUShare``: tensor-fusion pods placed on one specific shared GPU, thin glue over
:mod:`common.model.gpu_share` (design.md Semantics 19).

A member of the ``gpu-quota`` entry (built whenever gpu-quota is configured, in its tier, under its
switches): a plugin of its own rather than more of :mod:`scheduler.plugins.gpu_quota`, because placing
a share is a placement rule (Filter, Reserve, PreBind over the nodes' devices) while gpu-quota is a
namespace quota; the charge stays gpu-quota's and is made atomically with the allocation by the
framework's Reserve (gpu-quota's Reserve charges, this one allocates; either refusing unreserves both).

* PreFilter: the pod's request (a malformed annotation: unresolvable, naming pod, annotation, value and
  expectation); a whole-card pod is looked at only while some GPU is shared.
* Filter: a shared-GPU pod passes a node with ``gpu-count`` devices that each have its TFLOPS and VRAM
  left (the nodes nobody uses as arrays, the others device by device, cached until their use
  changes); a whole-card pod a node where its cards, the cards held whole and the devices carrying
  shares fit the node's devices. The reasons name the devices (``gpu-0 on node-a: 20 TFLOPS left, 50
  asked``).
* Score: a shared-GPU pod's nodes by ``gpuPlacement`` (how used its devices end up there).
* Reserve: the devices chosen by the configured placement (``gpuPlacement``), held in the ledger so
  that a pod in flight is never given room another holds; Unreserve gives them back. A whole-card
  pod's cards are counted when the cluster adds it (right after Reserve), as every bound pod's.
* PreBind: ``tensor-fusion.ai/gpu-ids`` written on the pod (leader-gated like every write, rolled back
  when the binding fails).
* A bound pod is charged from its annotation (a restart rebuilds the ledger from the pods), else from
  the allocation it held before (preemption's dry run), else from a fresh choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.annotations import TF_GPU_IDS
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.events import invalid_annotation
from gpuq_k8s.common.model.gpu_quota.quota import GPUResourceQuota
from gpuq_k8s.common.model.gpu_share.args import GPUQuotaArgs
from gpuq_k8s.common.model.gpu_share.choice import (
    Placement,
    Refusal,
    choose,
    chosen_ids,
    least_used,
    node_score,
    whole_refusal,
)
from gpuq_k8s.common.model.gpu_share.devices import NodeGPUs, node_gpus
from gpuq_k8s.common.model.gpu_share.gpu_ids import read_gpu_ids
from gpuq_k8s.common.model.gpu_share.ledger import Share, ShareLedger
from gpuq_k8s.common.model.gpu_share.request import ShareRequest, share_request, whole_units
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.outlook import annotation_outlook, with_outlook
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import DONE, ApiWrite, PreBindPlan, Progress
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    FilterPlugin,
    FilterResult,
    FloatArray,
    Handle,
    PreBindPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReasonMasks,
    ReservePlugin,
    ScorePlugin,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status

_STATE: Final = plugin_names.GPU_SHARE
_SCORES: Final = f"{plugin_names.GPU_SHARE}:scores"
ANNOTATION: Final = f"{plugin_names.GPU_SHARE}:annotation"
# The grouped reason of a node without shareable GPUs (one line for every such node).
NO_GPU: Final = "no GPU to share (no whole-card GPU resource on the node)"
# Beyond this many nodes refused for their devices, the FitError message groups them by what they
# lack instead of listing each node's devices (the explanation still has every device).
_MAX_NODE_REASONS: Final = 8
# Nodes whose choices are cached at once (a cleared cache only costs recomputation).
_MAX_CACHED_NODES: Final = 65536
Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class _Pod:
    """What PreFilter worked out: a shared-GPU request, or None for a whole-card pod."""

    request: ShareRequest | None


@dataclass(frozen=True, slots=True)
class _Capacity:
    count: Int64Array
    tflops: Int64Array
    vram: Int64Array


@dataclass(frozen=True, slots=True)
class _Chosen:
    share: Share
    ids: str
    previous: str | None  # the pod's gpu-ids before PreBind (restored by the rollback)


def _ready(_lookup: object) -> Progress:
    return DONE


class GPUShare(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, ReservePlugin, PreBindPlugin):
    name = plugin_names.GPU_SHARE
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_CHANGED})
    # The pod's own malformed annotation: only its own update cures it (Semantics 14).
    event_groups: ClassVar[Mapping[str, frozenset[ClusterEvent]]] = {ANNOTATION: frozenset()}

    def __init__(self, handle: Handle, placement: Placement = Placement.COMPACT_FIRST) -> None:
        super().__init__(handle)
        self.placement = placement
        self.ledger = ShareLedger()
        self._gpus: list[NodeGPUs | None] = []
        self._gpu_rows: dict[int, NodeGPUs] = {}  # the rows with shareable GPUs
        self._capacity: _Capacity | None = None  # their devices as arrays over rows (Filter's idle nodes)
        # per node: the ledger version it was computed at, and the choice for each request since
        self._choices: dict[str, tuple[int, dict[ShareRequest, tuple[int, ...] | Refusal]]] = {}
        # The card resources shared on some node (a whole-card pod asking none of them is no concern).
        self._resources: frozenset[str] | None = None
        self._quotas: dict[str, GPUResourceQuota] = {}
        for namespace, name, obj in handle.objects.list(kinds.GPU_RESOURCE_QUOTA):
            self._object(kinds.GPU_RESOURCE_QUOTA, namespace, name, obj)
        handle.objects.subscribe(self._object)
        handle.cluster.subscribe(self)

    @classmethod
    def member(cls, handle: Handle, settings: PluginSettings) -> GPUShare:
        args = plugin_args(settings, GPUQuotaArgs) or GPUQuotaArgs()
        return cls(handle, args.placement)

    # -- inputs -----------------------------------------------------------------------------------
    def _object(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        """The namespace's GPUResourceQuota, for its default requests (gpu-quota warns of a bad one)."""
        if kind != kinds.GPU_RESOURCE_QUOTA:
            return
        quota = None
        if obj is not None:
            try:
                quota = GPUResourceQuota.from_dict(obj)
            except InvalidValue:
                quota = None
        if quota is None:
            self._quotas.pop(namespace, None)
        else:
            self._quotas[namespace] = quota

    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        while len(self._gpus) <= row:
            self._gpus.append(None)
        gpus = self._gpus[row] = node_gpus(new) if new is not None else None
        if gpus is None:
            self._gpu_rows.pop(row, None)
        else:
            self._gpu_rows[row] = gpus
        self._resources = None
        self._capacity = None
        self._choices.clear()

    def _request(self, pod: PodInfo) -> ShareRequest | None:
        return share_request(pod, self._quotas.get(pod.namespace))

    def pod_added(self, pod: PodInfo, row: int) -> None:
        """A bound pod: its share from its annotation, else as before, else chosen now (it runs)."""
        key = pod.key
        if key in self.ledger:
            return
        gpus = self._gpus[row] if row < len(self._gpus) else None
        if gpus is None:
            return
        try:
            request = self._request(pod)
        except InvalidValue:
            return  # its PreFilter reported it; a running pod with a bad annotation holds no share
        if request is None:
            cards = whole_units(pod, gpus.resource)
            if cards > 0:
                self.ledger.reserve_whole(key, gpus.node, cards)
            return
        devices: tuple[int, ...] | None = None
        try:
            devices = read_gpu_ids(pod, gpus, request.count)
        except InvalidValue as err:
            self.handle.record(invalid_annotation(pod.ref, f"GPU share placed anew: {err}"))
        recent = self.ledger.recent(key)
        if devices is None and recent is not None and recent.node == gpus.node:
            devices = recent.devices
        if devices is None:
            use = self.ledger.use(gpus.node)
            chosen = choose(gpus, use, request, self.placement)
            # A running pod the devices cannot hold (placed by another scheduler): the least used.
            devices = chosen if not isinstance(chosen, Refusal) else least_used(gpus, use, request.count)
        self.ledger.reserve_share(key, Share(gpus.node, devices, request.tflops, request.vram))

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        self.ledger.release(pod.key)

    # -- extension points -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        try:
            request = self._request(pod)
        except InvalidValue as err:
            self.handle.record(invalid_annotation(pod.ref, str(err)))
            return Status.unresolvable(
                with_outlook(str(err), annotation_outlook(err.field)), plugin=ANNOTATION
            )
        if request is None:
            # A whole-card pod: only a node where shares hold devices has anything to add to resource
            # fit (its cards are counted when the cluster adds it: pod_added).
            if not self.ledger.busy_nodes():
                return Status.skip()
            if self._resources is None:
                self._resources = frozenset(g.resource for g in self._gpus if g is not None)
            if not any(pod.requests.amount(resource) > 0 for resource in self._resources):
                return Status.skip()
        state.write(_STATE, _Pod(request))
        return Status.success()

    def _arrays(self, n: int) -> _Capacity:
        """Per node row: its devices' count and each one's TFLOPS and VRAM (``-1``: unknown)."""
        cap = self._capacity
        if cap is not None and cap.count.shape[0] >= n:
            return cap
        count = np.zeros(n, dtype=np.int64)
        tflops = np.full(n, -1, dtype=np.int64)
        vram = np.full(n, -1, dtype=np.int64)
        for row, gpus in self._gpu_rows.items():
            if row < n:
                count[row] = gpus.count
                tflops[row] = -1 if gpus.tflops is None else gpus.tflops
                vram[row] = -1 if gpus.vram is None else gpus.vram
        cap = self._capacity = _Capacity(count, tflops, vram)
        return cap

    def _choice(self, gpus: NodeGPUs, request: ShareRequest) -> tuple[int, ...] | Refusal:
        """:func:`choose` on the node's current use, cached until its use changes."""
        version = self.ledger.version(gpus.node)
        cached = self._choices.get(gpus.node)
        if cached is None or cached[0] != version:
            if len(self._choices) >= _MAX_CACHED_NODES:
                self._choices.clear()
            cached = self._choices[gpus.node] = (version, {})
        answers = cached[1]
        answer = answers.get(request)
        if answer is None:
            answer = answers[request] = choose(gpus, self.ledger.use(gpus.node), request, self.placement)
        return answer

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        n = self.handle.cluster.n
        data = state.read(_STATE, _Pod)
        if data is None:
            return FilterResult.all_pass(n)
        request = data.request
        refusals: dict[int, Refusal | str] = {}
        row_of = self.handle.cluster.row_of
        if request is None:
            # A whole-card pod: only nodes where shares hold devices add anything to resource fit.
            passed = np.ones(n, dtype=np.bool_)
            unresolvable = np.zeros(n, dtype=np.bool_)
            for node in self.ledger.busy_nodes():
                row = row_of.get(node, n)
                gpus = self._gpu_rows.get(row) if row < n else None
                cards = whole_units(pod, gpus.resource) if gpus is not None else 0
                whole = whole_refusal(gpus, self.ledger.use(node), cards) if gpus and cards else None
                if whole is not None:
                    passed[row] = False
                    refusals[row] = whole
            no_gpu = unresolvable
        else:
            # Nodes nobody uses yet, all at once: every device is free.
            cap = self._arrays(n)
            count, tflops, vram = cap.count[:n], cap.tflops[:n], cap.vram[:n]
            no_gpu = count == 0
            passed = count >= request.count
            if request.tflops > 0:
                passed &= tflops >= request.tflops
            if request.vram > 0:
                passed &= vram >= request.vram
            unresolvable = ~passed  # even idle the node cannot take it (or has no GPU)
            load = np.zeros(n, dtype=np.float64)
            if request.tflops > 0:
                load += np.where(tflops > 0, request.tflops / np.maximum(tflops, 1), 0.0)
            if request.vram > 0:
                load += np.where(vram > 0, request.vram / np.maximum(vram, 1), 0.0)
            load = np.minimum(load / 2, 1.0)
            scores = 100.0 * (load if self.placement is Placement.COMPACT_FIRST else 1.0 - load)
            # Nodes in use: their devices one by one (cached per node until its use changes).
            for node in self.ledger.nodes_in_use():
                row = row_of.get(node, n)
                gpus = self._gpu_rows.get(row) if row < n else None
                if gpus is None or not passed[row]:
                    continue  # no GPU, or not even idle devices take it
                chosen = self._choice(gpus, request)
                if isinstance(chosen, Refusal):
                    passed[row] = False
                    refusals[row] = chosen
                else:
                    scores[row] = node_score(gpus, self.ledger.use(node), chosen, request, self.placement)
            state.write(_SCORES, scores)

        def refusal_of(row: int) -> Refusal | str | None:
            found = refusals.get(row)
            if found is None and request is not None and not passed[row]:
                gpus = self._gpu_rows.get(row)
                if gpus is not None:
                    answer = self._choice(gpus, request)
                    found = answer if isinstance(answer, Refusal) else None
            return found

        def detail(row: int) -> str | None:
            """The devices' reasons where the FitError grouped the nodes (otherwise it names them)."""
            if np.count_nonzero(~passed & ~no_gpu) <= _MAX_NODE_REASONS:
                return None
            found = refusal_of(row)
            return found.message if isinstance(found, Refusal) else None

        def reasons() -> ReasonMasks:
            out: list[tuple[BoolArray, str]] = []
            refused = [int(r) for r in np.flatnonzero(~passed & ~no_gpu)]
            bare = no_gpu & ~passed
            if bare.any():
                out.append((bare, NO_GPU))
            grouped = len(refused) > _MAX_NODE_REASONS
            by_message: dict[str, BoolArray] = {}
            for row in refused:
                found = refusal_of(row)
                if found is None:
                    continue
                text = found if isinstance(found, str) else found.summary if grouped else found.message
                mask = by_message.get(text)
                if mask is None:
                    mask = by_message[text] = np.zeros(n, dtype=np.bool_)
                mask[row] = True
            out.extend((mask, text) for text, mask in by_message.items())
            return out

        return FilterResult(passed, reasons, unresolvable, detail)

    def pre_score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> Status:
        return Status.success() if _SCORES in state else Status.skip()

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        """A shared-GPU pod's node preference by ``gpuPlacement`` (0-100): how used the devices it
        would get there end up."""
        scores = state.read(_SCORES, np.ndarray)
        out = np.zeros(feasible.shape[0], dtype=np.float64)
        if scores is not None:
            m = min(out.shape[0], scores.shape[0])
            out[:m] = scores[:m]
        return out

    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        data = state.read(_STATE, _Pod)
        gpus = self._gpus[row] if row < len(self._gpus) else None
        if data is None or gpus is None or pod.key in self.ledger:
            return Status.success()
        request = data.request
        if request is None:
            return Status.success()  # Filter checked its cards; the cluster's add counts them
        chosen = choose(gpus, self.ledger.use(gpus.node), request, self.placement)
        if isinstance(chosen, Refusal):
            return Status.unschedulable(chosen.message)
        share = Share(gpus.node, chosen, request.tflops, request.vram)
        self.ledger.reserve_share(pod.key, share)
        state.write(
            f"{_STATE}:chosen", _Chosen(share, chosen_ids(gpus, chosen), pod.annotations.get(TF_GPU_IDS))
        )
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        if state.read(_STATE, _Pod) is not None:
            self.ledger.release(pod.key)

    def pre_bind(self, state: CycleState, pod: PodInfo, row: int) -> PreBindPlan | Status:
        chosen = state.read(f"{_STATE}:chosen", _Chosen)
        if chosen is None:
            return Status.skip()
        meta: dict[str, Any] = {"uid": pod.uid} if pod.uid else {}
        write = ApiWrite(
            kinds.POD,
            pod.namespace,
            pod.name,
            {"metadata": {**meta, "annotations": {TF_GPU_IDS: chosen.ids}}},
            merge_keys={},
        )
        undo = ApiWrite(
            kinds.POD,
            pod.namespace,
            pod.name,
            {"metadata": {**meta, "annotations": {TF_GPU_IDS: chosen.previous}}},
            merge_keys={},
        )
        return PreBindPlan(
            self.name, (write,), _ready, rollback=(undo,), timeout=60.0, waiting_for="writing gpu-ids"
        )

    # -- gpuq simulate's report ---------------------------------------------------------------------
    def report(self) -> Mapping[str, list[dict[str, Any]]]:
        return {}

    def pod_fields(self, pod: PodInfo) -> Mapping[str, Any]:
        """A shared-GPU pod: ``gpuIds``, the devices it holds (``tensor-fusion.ai/gpu-ids``)."""
        share = self.ledger.share(pod.key)
        if share is None:
            return {}
        return {"gpuIds": ",".join(f"{share.node}-gpu-{index}" for index in share.devices)}
