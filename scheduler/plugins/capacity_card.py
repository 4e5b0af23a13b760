"""``capacity-card``: per-queue quotas per GPU card type, thin glue over :mod:`common.model.capacity_card`
(spec ``capacity-card.md``; design.md Semantics 1, 3, 7).

* Enqueue (job mode, "Job Enqueueable Check"): a Pending PodGroup enters its queue when
  :meth:`~common.model.capacity_card.engine.CapacityCard.enqueue` allows; a refusal is a Warning event on the
  PodGroup.
* PreFilter / Filter (task mode, "Task Allocatable Check"): the engine's :class:`TaskCheck` gives a
  verdict per card type; :meth:`TaskCheck.filter_nodes` applies it to every node at once through the
  node x card-type matrix ``has[N, C]`` this plugin keeps aligned with the cluster rows, so an ``A|B``
  pod only passes nodes whose own card type has quota left (Semantics 1). A pod needing a card type no
  node offers yet (``autoscaledCardTypes``) is refused in PreFilter, UnschedulableAndUnresolvable:
  "waits for a node offering X" while its quota holds it (retried when a node joins), never otherwise
  (Semantics 16).
* Score ("Node Ordering"): ``100 * 0.5^i * nodeOrderWeight`` for the i-th alternative the node has.
* Reserve / Unreserve: charge / release the concrete card type of the chosen node, idempotently.
* Queue order: the queue with the lower card share (``max(allocated / deserved)`` over its card
  types, capacity-card.md "Resource Tracking") goes first: the enqueue action admits its PodGroups
  first. It does not reorder allocate's pod queue (``orders_allocation``): gpuq's default
  configuration enables capacity-card, and its pods keep the order they always had (design.md
  Semantics 15).

Quota refusals are UnschedulableAndUnresolvable as far as preemption goes: evicting pods for the
ElasticQuota preemption cannot give a queue card quota back (card preemption is the spec's "Future
Work"). The pod is retried when a pod leaves, a quota or PodGroup changes, or a node changes.

The node inventory is re-read lazily: a node change only marks it stale, and the next decision
rebuilds the catalog once, so adding 5,000 nodes costs one rebuild, not 5,000.

Filter and Score read only ``has[N, C]`` and a few per-pod numbers (the verdict per card type, the
alternatives), so their arrays are memoised per those until ``has`` is rebuilt: pods of a workload
share one N-row computation until a queue's quota verdict or the inventory changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import numpy as np

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.annotations import CARD_NAME
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.capacity_card.engine import CapacityCard
from gpuq_k8s.common.model.capacity_card.task import NodeFilter, TaskCheck
from gpuq_k8s.common.model.cards.catalog import CardCatalog
from gpuq_k8s.common.model.cards.discovery import NodeCards, discover_cards
from gpuq_k8s.common.model.cards.names import parse_card_names
from gpuq_k8s.common.model.crd import PodGroup, Queue
from gpuq_k8s.common.model.devices.charges import naming_from
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.outlook import annotation_outlook, outlook_of, with_outlook
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import units_to_number
from gpuq_k8s.common.model.wire import Obj, section
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import (
    BoolArray,
    ClusterEvent,
    EnqueuePlugin,
    FilterPlugin,
    FilterResult,
    FloatArray,
    GroupInfo,
    Handle,
    PreFilterPlugin,
    PreScorePlugin,
    QueueOrderPlugin,
    ReasonMasks,
    ReservePlugin,
    ScorePlugin,
    StatusPatch,
    read_or_warn,
)
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.plugins.capacity_card_claims import QueueClaims
from gpuq_k8s.scheduler.plugins.dra_attempt import allocate_every_row
from gpuq_k8s.scheduler.plugins.dra_events import freed_devices
from gpuq_k8s.scheduler.plugins.dra_extended import device_claim_keys, uses_devices

_EMPTY_NODE: Final = NodeCards("")
_MAX_CLASSES: Final = 256


def _identity(cards: NodeCards) -> tuple[object, ...]:
    # NodeCards.problems holds exceptions, which compare by identity: compare their text instead.
    return (cards.node, cards.cards, tuple(str(p) for p in cards.problems))


class CapacityCardPlugin(
    EnqueuePlugin, PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, ReservePlugin, QueueOrderPlugin
):
    name = plugin_names.CAPACITY_CARD
    orders_allocation = False
    events = frozenset(
        {
            ClusterEvent.POD_DELETED,
            ClusterEvent.QUOTA_CHANGED,
            ClusterEvent.PODGROUP_CHANGED,
            ClusterEvent.NODE_ADDED,
            ClusterEvent.NODE_CHANGED,
            ClusterEvent.RESOURCE_CLAIM_CHANGED,  # a claim's devices given back: its charge refunded
        }
    )

    def __init__(self, handle: Handle, settings: PluginSettings | None = None) -> None:
        super().__init__(handle)
        args = plugin_args(settings, CapacityCardArgs) or CapacityCardArgs()
        self.engine = CapacityCard(args)
        self._cards: list[NodeCards] = []
        self._identities: list[tuple[object, ...]] = []
        self._has: BoolArray = np.zeros((0, 0), dtype=np.bool_)
        self._stale = False
        # Per ``has``: verdicts per (TaskCheck inputs, n), node-order scores per (alternatives, n).
        self._verdicts: dict[tuple[object, ...], _Verdict] = {}
        self._checked: dict[int, tuple[TaskCheck, int, _Verdict]] = {}  # by TaskCheck identity
        self._orders: dict[tuple[str, int], FloatArray] = {}
        self._scored: dict[str, bool] = {}  # card.name text -> has alternatives to order nodes by
        self._reserved: PodInfo | None = None  # the pod Reserve charged last, until it is assumed
        self._seen_events: set[EventRecord] = set()
        self._refused: dict[str, str] = {}  # PodGroup key -> identity of the last refusal recorded
        self._queue_status: dict[str, dict[str, Any]] = {}
        # Queue shares for queue order, kept while nothing they read changed (see _shares).
        self._shares: tuple[tuple[int, int], dict[str, float]] | None = None
        self._version = 0
        for kind in (kinds.QUEUE, kinds.POD_GROUP):
            for namespace, name, obj in handle.objects.list(kind):
                self._object(kind, namespace, name, obj)
        handle.objects.subscribe(self._object)
        handle.cluster.subscribe(self)
        self.claims = QueueClaims(handle, self.engine)  # DRA devices against card quotas
        self.claims.charges.set_naming(naming_from(args.device_naming))

    def queueing_hint(self, event: ClusterEvent, pod: PodInfo, old: object, new: object) -> bool:
        """A claim event only when it gave devices back (its charge refunded: :func:`freed_devices`);
        every other registered event always."""
        return event is not ClusterEvent.RESOURCE_CLAIM_CHANGED or freed_devices(old, new)

    # -- inventory --------------------------------------------------------------------------------
    def _emit(self) -> None:
        for event in self.engine.take_events():
            if event not in self._seen_events:
                self._seen_events.add(event)
                self.handle.record(event)

    def _sync(self) -> None:
        """Rebuild the catalog and ``has[N, C]`` after node changes (once per batch of changes); the
        pending pods' device demand after DRA object changes."""
        self.claims.refresh_demand()
        if not self._stale:
            return
        self._stale = False
        self.engine.set_nodes([c for c in self._cards if c.node])
        self._has = self.engine.catalog.node_matrix(self._cards)
        self._verdicts.clear()
        self._checked.clear()
        self._orders.clear()
        self._emit()

    @property
    def catalog(self) -> CardCatalog:
        self._sync()
        return self.engine.catalog

    def has(self, n: int) -> BoolArray:
        """``has[n, c]`` for the first ``n`` cluster rows (card type ids are the catalog's)."""
        self._sync()
        return self._has[:n]

    # -- ClusterListener --------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        while len(self._cards) <= row:
            self._cards.append(_EMPTY_NODE)
            self._identities.append(_identity(_EMPTY_NODE))
            self._stale = True  # ``has`` needs the row, even one without cards (a ghost row)
        cards = discover_cards(new) if new is not None else _EMPTY_NODE
        identity = _identity(cards)
        if identity != self._identities[row]:
            self._cards[row] = cards
            self._identities[row] = identity
            self._stale = True

    def pod_added(self, pod: PodInfo, row: int) -> None:
        if pod is self._reserved:
            # The cycle assumes the very pod Reserve just charged on this node: set_pod would
            # recompute the same demand and find the ledger entry already charged.
            self._reserved = None
            return
        self._sync()
        self.engine.set_pod(pod)
        self.claims.pod_known(pod)
        self._emit()

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        """:meth:`pod_added` of each (a BulkPodListener: the start's bound pods a page at a time), the
        catalog synced and the engine's events taken once."""
        self._sync()
        engine, claims = self.engine, self.claims
        for pod in pods:
            if pod is self._reserved:
                self._reserved = None
                continue
            engine.set_pod(pod)
            claims.pod_known(pod)
        self._emit()

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        if self.handle.pending_pod(pod.key) is not None:
            self.engine.unreserve(pod)  # unreserved or unbound: still waiting, still tracked
        else:
            self.engine.remove_pod(pod)

    # -- PendingPodListener -----------------------------------------------------------------------
    def pending_pod_added(self, pod: PodInfo) -> None:
        self._sync()
        self.engine.set_pod(pod)
        self.claims.pod_known(pod)
        self._emit()

    def pending_pod_removed(self, pod: PodInfo) -> None:
        self.engine.remove_pod(pod)
        self.claims.pod_gone(pod.key)

    # -- API objects ------------------------------------------------------------------------------
    def _object(self, kind: Kind, namespace: str, name: str, obj: Obj | None) -> None:
        self._version += 1
        if kind == kinds.QUEUE:
            ref = kinds.QUEUE.ref("", name)
            queue = None if obj is None else read_or_warn(self.handle, ref, Queue.from_dict, obj)
            if queue is not None:
                self.engine.set_queue(queue)
            else:  # deleted, or unreadable: it grants nothing
                self.engine.remove_queue(name)
                if obj is None:
                    self._queue_status.pop(name, None)
                    return
        elif kind == kinds.POD_GROUP:
            key = f"{namespace}/{name}"
            if obj is None:
                self.engine.remove_podgroup(key)
                self._refused.pop(key, None)
                return
            model = read_or_warn(self.handle, f"PodGroup/{namespace}/{name}", PodGroup.from_dict, obj)
            if model is None:
                return
            self._sync()
            tracked = self.handle.group(key)
            self.engine.set_podgroup(
                _with_phase(model, tracked.phase if tracked is not None else model.phase)
            )
        else:
            return
        self._emit()

    # -- enqueue (job mode) -----------------------------------------------------------------------
    def enqueue(self, group: GroupInfo) -> Status:
        if group.model is None:
            return Status.success()
        self._sync()
        refusal = self.engine.enqueue(_with_phase(group.model, group.phase))
        self._emit()
        if refusal is None:
            self._refused.pop(group.key, None)
            return Status.success()
        # One event per distinct refusal: the enqueue action runs again after every change, and a
        # refusal that can never fit stays the same one while the usage it quotes moves.
        if self._refused.get(group.key) != refusal.identity:
            self._refused[group.key] = refusal.identity
            self.handle.record(refusal.event(group.ref))
        return Status.unschedulable(refusal.message)

    def enqueued(self, group: GroupInfo) -> None:
        self._version += 1
        if group.model is not None:
            self.engine.admit(group.model)

    def dequeued(self, group: GroupInfo) -> None:
        self._version += 1
        if group.model is not None and self.handle.group(group.key) is not None:
            self.engine.set_podgroup(_with_phase(group.model, group.phase))

    # -- queue order ------------------------------------------------------------------------------
    def _queue_shares(self) -> dict[str, float]:
        """The engine's queue shares, recomputed only after a pod, object or enqueue change."""
        key = (self.handle.cluster.generation, self._version)
        if self._shares is None or self._shares[0] != key:
            self._sync()
            self._shares = (key, self.engine.shares())
        return self._shares[1]

    def compare_queues(self, left: str, right: str) -> int:
        shares = self._queue_shares()
        if left not in shares or right not in shares or shares[left] == shares[right]:
            return 0
        return -1 if shares[left] < shares[right] else 1

    # -- task mode --------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        self._sync()
        engine = self.engine
        if engine.queue_of(pod) not in engine.quotas:
            return Status.skip()  # Semantics 7: a pod of no existing Queue has no queue quota
        devices = uses_devices(self.handle, pod)
        if devices:
            allocate_every_row(state)  # its devices' card types are checked row by row
        check = engine.task_check(pod)
        if check.failure is not None:
            self.handle.record(check.failure.event(pod.ref))
            message = check.failure.message
            error = check.failure.error
            if isinstance(error, InvalidAnnotation) and outlook_of(message) is None:
                # The pod's own malformed card.name: nothing but the pod can change (Semantics 14).
                message = with_outlook(message, annotation_outlook(error.field))
            return Status.unresolvable(message)
        if not check.groups and not devices:
            return Status.skip()  # no card asked, cpu and memory passed
        unoffered = check.unoffered()
        if unoffered is not None:
            # No current node offers a card type the pod needs: none can take it until a node comes
            # (NodeAdded retries it), or, refused by quota, until the quota changes (Semantics 16).
            return Status.unresolvable(unoffered)
        state.write(plugin_names.CAPACITY_CARD, check)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        n = self.handle.cluster.n
        self._sync()  # a node change since the memo was filled clears it
        check = state.read(plugin_names.CAPACITY_CARD, TaskCheck)
        if check is None:
            check = self.engine.task_check(pod)
        memo = self._checked.get(id(check))
        if memo is None or memo[0] is not check or memo[1] != n:
            # The engine shares one TaskCheck between the pods of a workload while their verdicts
            # stand: key the result by its identity (held by the entry, so the id is not reused).
            if len(self._checked) >= _MAX_CLASSES:
                self._checked.clear()
            memo = self._checked[id(check)] = (check, n, self._verdict(check, n))
        verdict = memo[2]
        if not verdict.any_passed:
            refused = next((r for r in check.refusals.values() if r is not None), None)
            if refused is not None:
                self.handle.record(refused.event(pod.ref))
        devices = self.claims.filter_rows(state, pod, n) if uses_devices(self.handle, pod) else None
        if devices is not None:
            rejected, device_reasons = devices
            base = verdict.reasons

            def reasons() -> ReasonMasks:
                return [*base(), *device_reasons]

            return FilterResult(
                verdict.passed & ~rejected, reasons, unresolvable=verdict.unresolvable | rejected
            )
        return FilterResult(verdict.passed, verdict.reasons, unresolvable=verdict.unresolvable)

    def _verdict(self, check: TaskCheck, n: int) -> _Verdict:
        """``check.filter_nodes(has)``, memoised: it reads nothing else. The result is shared: read-only."""
        self._sync()
        failure = check.failure.message if check.failure is not None else None
        key = (
            n,
            failure,
            check.card_names,
            tuple(ids.tobytes() for ids in check.groups),
            check.allowed.tobytes(),
            check.messages,
            check.none_reasons,
        )
        verdict = self._verdicts.get(key)
        if verdict is None:
            if len(self._verdicts) >= _MAX_CLASSES:
                self._verdicts.clear()
            verdict = self._verdicts[key] = _Verdict(check.filter_nodes(self._has[:n]))
        return verdict

    # -- node ordering ----------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> Status:
        text = pod.annotations.get(CARD_NAME)
        if text is None:
            return Status.skip()
        scored = self._scored.get(text)
        if scored is None:
            # Depends on the text alone (the pod's name only appears in the error, ignored here).
            try:
                scored = len(parse_card_names(text, pod.ref)) > 1
            except InvalidAnnotation:
                scored = False
            if len(self._scored) >= _MAX_CLASSES:
                self._scored.clear()
            self._scored[text] = scored
        return Status.success() if scored else Status.skip()

    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        n = self.handle.cluster.n
        self._sync()
        key = (pod.annotations.get(CARD_NAME, ""), n)
        scores = self._orders.get(key)
        if scores is None:
            if len(self._orders) >= _MAX_CLASSES:
                self._orders.clear()
            scores = self._orders[key] = self.engine.node_order_scores(pod, self._has[:n])
        return scores  # the cache's own: the framework only reads it

    # -- reserve ----------------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, row: int) -> Status:
        self._sync()
        devices = self.claims.reserve(state, pod, row)
        if not devices.is_success:
            return devices
        self.engine.reserve(pod, pod.node_name, state.read(plugin_names.CAPACITY_CARD, TaskCheck))
        self._reserved = pod
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, row: int) -> None:
        self._reserved = None
        self.engine.unreserve(pod)
        self.claims.unreserve(pod)

    # -- status and report ------------------------------------------------------------------------
    def take_status(self, now: datetime) -> tuple[list[StatusPatch], list[EventRecord]]:
        """Queue ``status.allocated`` for queues whose allocation changed since the last sync."""
        patches: list[StatusPatch] = []
        for name in sorted(self.engine.quotas):
            ledger = self.engine.ledgers.get(name)
            if ledger is None:
                continue
            allocated = dict(ledger.allocated.to_quantities())
            if self._queue_status.get(name) == allocated:
                continue
            self._queue_status[name] = allocated
            obj = self.handle.objects.get(kinds.QUEUE, "", name)
            status = dict(section(obj, "status"))
            status["allocated"] = allocated
            patches.append(StatusPatch(kinds.QUEUE, "", name, status))
        return patches, []

    def report(self) -> dict[str, list[dict[str, Any]]]:
        rows: list[dict[str, Any]] = []
        self._sync()
        for name in sorted(self.engine.quotas):
            quota = self.engine.quotas[name]
            ledger = self.engine.ledgers.get(name)
            if ledger is None:
                continue
            rows.append(
                {
                    "name": name,
                    "allocated": ledger.allocated.to_numbers(),
                    "capability": quota.capability.to_numbers(),
                    "inqueue": ledger.inqueue.to_numbers(),
                }
            )
        return {"queues": rows, "nodes": self._node_rows()}

    def _node_rows(self) -> list[dict[str, Any]]:
        """Per node with cards, per card type: ``capacity`` (the node's count) and ``used`` (what its
        pods request of the card's resource), for the utilisation grid of ``simulate -o html``."""
        cluster = self.handle.cluster
        rows: list[dict[str, Any]] = []
        for row in sorted(cluster.live_rows(), key=lambda r: cluster.names[r]):
            cards = self._cards[row] if row < len(self._cards) else _EMPTY_NODE
            if not cards.cards:
                continue
            usage: dict[str, dict[str, int | float]] = {}
            for card in cards.cards:
                column = cluster.columns.index.get(card.resource)
                used = int(cluster.requested[row, column]) if column is not None else 0
                usage[card.name] = {"capacity": card.count, "used": units_to_number(card.resource, used)}
            rows.append({"name": cluster.names[row], "cards": usage})
        return rows

    def pod_fields(self, pod: PodInfo) -> dict[str, Any]:
        """``cardType``: the concrete type the pod is charged to (a pod with DRA claims: its claims'
        first card type); for a pod of no Queue (not charged),
        the card type of its node that it uses, so the placement table still shows it."""
        if not pod.node_name:
            return {}
        charged = self.engine.charged_card_type(pod)
        if charged is None and uses_devices(self.handle, pod):  # DRA devices: their claims' card types
            keys = device_claim_keys(pod)
            charged = next((t for k in keys if (t := self.engine.claim_card_type(k)) is not None), None)
        if charged is None:
            row = self.handle.cluster.row_of.get(pod.node_name)
            cards = self._cards[row] if row is not None and row < len(self._cards) else _EMPTY_NODE
            charged = next((c.name for c in cards.cards if pod.requests.amount(c.resource) > 0), None)
        return {"cardType": charged}


class _Verdict:
    """A memoised :class:`NodeFilter` and what Filter derives from it: computed once per verdict,
    not per pod. Every part is immutable once built, so a ``reasons`` call that comes late (after
    further pods were bound, or the inventory changed) still describes the Filter call it came from."""

    __slots__ = ("_reasons", "any_passed", "nodes", "passed", "unresolvable")

    def __init__(self, nodes: NodeFilter) -> None:
        self.nodes = nodes
        self.passed = nodes.mask
        self.any_passed = bool(nodes.mask.any())
        self.unresolvable: BoolArray = ~nodes.mask
        self._reasons: ReasonMasks | None = None

    def reasons(self) -> ReasonMasks:
        """One (rejected rows, message) pair per distinct reason, built on first demand (FitError)."""
        if self._reasons is None:
            index = self.nodes.reason_index
            messages = self.nodes.reasons
            # The codes in use, ascending: np.bincount does what np.unique would, without its sort
            # (and its ~10 ms lazy import on the first call).
            used = np.flatnonzero(np.bincount(index[index >= 0], minlength=len(messages)))
            self._reasons = [(index == code, messages[int(code)]) for code in used]
        return list(self._reasons)


def _with_phase(group: PodGroup, phase: str) -> PodGroup:
    if group.phase == phase:
        return group
    return group.model_copy(update={"status": group.status.model_copy(update={"phase": phase})})
