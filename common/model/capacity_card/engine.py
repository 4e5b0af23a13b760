"""The capacity-card engine over cluster state: catalog, queue quotas, ledgers and the checks over
them (capacity-card.md; design.md Semantics 1, 3, 7, "Data flow").

The scheduler's ``capacity-card`` plugin and ``gpuq simulate`` feed :class:`CapacityCard` informer
events and ask it the job-mode (:mod:`.enqueue`), task-mode (:mod:`.task`) and node-ordering
(:mod:`.ordering`) questions; Reserve and Unreserve charge and release pods in their queue's
:class:`~common.model.capacity_card.ledger.QueueLedger`. The checks answer
:class:`~common.model.refusal.Refusal` values with the upstream event reasons; this module never emits
anything, its Warning events for malformed objects wait in :meth:`CapacityCard.take_events`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.annotations import CARD_NAME
from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.capacity_card.demand import CardDemand, pod_card_demand, resolve_charge
from gpuq_k8s.common.model.capacity_card.enqueue import check_enqueue, job_min_from_podgroup
from gpuq_k8s.common.model.capacity_card.ledger import QueueLedger
from gpuq_k8s.common.model.capacity_card.metrics import (
    QueueCardMetric,
    deserved_cards,
    queue_card_metrics,
    queue_share,
)
from gpuq_k8s.common.model.capacity_card.ordering import FloatArray, node_order_scores
from gpuq_k8s.common.model.capacity_card.quota import CPU_MEMORY, QueueQuota, queue_quota
from gpuq_k8s.common.model.capacity_card.refusals import empty_capability, exceeded, queue_closed
from gpuq_k8s.common.model.capacity_card.task import (
    BoolArray,
    TaskCheck,
    TaskPlan,
    unrestricted_check,
    with_failure,
)
from gpuq_k8s.common.model.cards.catalog import CardCatalog
from gpuq_k8s.common.model.cards.discovery import NodeCards
from gpuq_k8s.common.model.cards.names import parse_card_names
from gpuq_k8s.common.model.crd import PodGroup, Queue
from gpuq_k8s.common.model.errors import InvalidAnnotation, InvalidValue
from gpuq_k8s.common.model.events import (
    GET_TASK_REQUEST_RESOURCE_FAILED,
    INSUFFICIENT_SCALAR_QUOTA,
    EventRecord,
    invalid_annotation,
)
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.queues import podgroup_key_of, queue_of
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.common.model.resources import EMPTY, Resources

# Bounds of CapacityCard's memos: far above the distinct pod classes of a real cluster; a workload
# past them only recomputes.
_MAX_MEMO: Final = 4096
_MAX_NODE_MEMO: Final = 65536
# The card types of a node not in the inventory (its pods charged by resolve_charge's node_known=False);
# not a card name, so never equal to a real node's set.
_UNKNOWN_NODE: Final = frozenset({"\0unknown node"})
# The ledger key of an allocated DRA claim's device charge (never a pod key: those have one slash and
# no colon).
_CLAIM: Final = "claim:"


@dataclass(slots=True)
class _PodState:
    pod: PodInfo
    queue: str
    job: str | None
    demand: CardDemand | None
    error: InvalidValue | None


class CapacityCard:
    """The capacity-card plugin's state: catalog, queue quotas, ledgers, and the checks over them.

    The scheduler (and ``gpuq simulate``) feeds it informer events (:meth:`set_nodes`,
    :meth:`set_queue`, :meth:`set_podgroup`, :meth:`set_pod` and the removals) and asks it for
    :meth:`enqueue`, :meth:`task_check`, :meth:`node_order_scores`; Reserve / Unreserve call
    :meth:`reserve` / :meth:`unreserve`. Usage is derived from pods only, so :meth:`rebuild` after a
    restart or re-list reproduces the same ledgers. Warning events for malformed objects accumulate
    in :meth:`take_events`.
    """

    def __init__(self, args: CapacityCardArgs | None = None) -> None:
        self.args = args or CapacityCardArgs()
        self.catalog = CardCatalog()
        self.nodes: dict[str, NodeCards] = {}
        self.quotas: dict[str, QueueQuota] = {}
        self.ledgers: dict[str, QueueLedger] = {}
        self.podgroups: dict[str, PodGroup] = {}
        self._pods: dict[str, _PodState] = {}
        # Allocated DRA claims: claim key -> (queue charged, cards per card type); the card demand of
        # pending pods' claims not allocated yet (pod key -> milli-cards per card key, ``A|B`` too).
        self._device_pending: dict[str, Resources] = {}
        self._claims: dict[str, tuple[str, Resources]] = {}
        self._events: list[EventRecord] = []
        # Memos over the current catalog (cleared by set_nodes). Demands are shared by pods of the same
        # requests and card.name, so plans and charges can be keyed by the demand's identity; each
        # entry holds its key objects, and a hit compares them with ``is``, so a recycled id never
        # matches.
        self._demands: dict[tuple[Resources, str | None], CardDemand] = {}
        self._plans: dict[tuple[int, int], TaskPlan] = {}
        self._node_names: dict[str, frozenset[str]] = {}
        self._name_sets: dict[frozenset[str], frozenset[str]] = {}
        self._charges: dict[
            tuple[int, int, frozenset[str]], tuple[CardDemand, TaskCheck | None, Resources]
        ] = {}

    @classmethod
    def rebuild(
        cls,
        args: CapacityCardArgs,
        nodes_cards: Iterable[NodeCards],
        queues: Iterable[Queue],
        podgroups: Iterable[PodGroup],
        pods: Iterable[PodInfo],
    ) -> CapacityCard:
        """Derive all state from a full listing (start-up, re-list)."""
        engine = cls(args)
        engine.set_nodes(nodes_cards)
        for group in podgroups:
            engine.podgroups[group.key] = group
        for queue in queues:
            engine.set_queue(queue)
        for pod in pods:
            engine.set_pod(pod)
        return engine

    # -- events

    def take_events(self) -> list[EventRecord]:
        events, self._events = self._events, []
        return events

    # -- informer updates

    def set_nodes(self, nodes_cards: Iterable[NodeCards]) -> None:
        """Replace the node card inventory; replays every pod (demands and charges depend on it).

        Call it when a node's cards change (labels, allocatable of a card resource), not on every
        status heartbeat; :class:`NodeCards` compares by value for that.
        """
        self.nodes = {n.node: n for n in nodes_cards}
        catalog = CardCatalog.build(self.nodes.values())
        for node_cards in self.nodes.values():
            self._events.extend(node_cards.events())
        unnamed = kinds.NODE.ref("", "")
        self._events.extend(invalid_annotation(p.where or unnamed, str(p)) for p in catalog.problems)
        self.catalog = catalog
        self._demands.clear()
        self._plans.clear()
        self._node_names.clear()
        self._name_sets.clear()
        self._charges.clear()
        self._replay()

    def set_queue(self, queue: Queue) -> None:
        quota = queue_quota(queue)
        previous = self.quotas.get(queue.name)
        if previous is not None and previous == quota:
            # A status write or an unrelated edit: keep the object, whose identity keys the task plans.
            quota = previous
        self.quotas[queue.name] = quota
        if previous is None or previous.events != quota.events:
            self._events.extend(quota.events)
        if queue.name not in self.ledgers:
            self._replay_queue(queue.name)

    def remove_queue(self, name: str) -> None:
        self.quotas.pop(name, None)
        self.ledgers.pop(name, None)

    def set_podgroup(self, group: PodGroup) -> None:
        previous = self.podgroups.get(group.key)
        self.podgroups[group.key] = group
        ledger = self.ledgers.get(group.queue)
        if ledger is not None:
            self._set_job(ledger, group)
        if previous is None or previous.queue != group.queue:
            # Its pods were accounted before the group existed (jobless) or in its old queue.
            if previous is not None and previous.queue in self.ledgers:
                self.ledgers[previous.queue].remove_job(group.key)
            self._reroute(group.key)

    def remove_podgroup(self, key: str) -> None:
        group = self.podgroups.pop(key, None)
        if group is not None and group.queue in self.ledgers:
            self.ledgers[group.queue].remove_job(key)
        if group is not None:
            self._reroute(key)

    def set_pod(self, pod: PodInfo) -> None:
        """Add or update a pod: pending pods are tracked, bound ones charged, finished ones forgotten.

        An update still showing a pod unbound after :meth:`reserve` (binding in flight) keeps the
        charge: only :meth:`unreserve` (Unreserve) or the pod's end releases it.
        """
        key = pod.key
        old = self._pods.get(key)
        if pod.terminal:
            self.remove_pod(pod)
            return
        queue = queue_of(pod, self.podgroups)
        if old is not None and old.pod.node_name and not pod.node_name and old.queue == queue:
            return
        if old is not None and (old.queue != queue or old.pod.node_name != pod.node_name):
            self.remove_pod(old.pod)
        state = self._pod_state(pod, queue)
        self._pods[key] = state
        ledger = self.ledgers.get(queue)
        if ledger is not None:
            self._account(ledger, state)

    def remove_pod(self, pod: PodInfo) -> None:
        self._device_pending.pop(pod.key, None)
        state = self._pods.pop(pod.key, None)
        if state is not None and state.queue in self.ledgers:
            self.ledgers[state.queue].untrack(pod.key)

    # -- decisions

    def enqueue(self, group: PodGroup) -> Refusal | None:
        """Job mode check for a Pending PodGroup; the caller then records the phase with :meth:`admit`.

        A PodGroup whose Queue does not exist is allowed (Semantics 7); one whose pods' requests cannot
        be read is refused with ``GetTaskRequestResourceFailed``.
        """
        quota = self.quotas.get(group.queue)
        ledger = self.ledgers.get(group.queue)
        if quota is None or ledger is None:
            return None
        for state in self._pods.values():
            if state.job == group.key and state.error is not None:
                return Refusal(state.error, GET_TASK_REQUEST_RESOURCE_FAILED)
        minimum = ledger.job_minimum(group.key)
        if minimum is None:
            min_cpu_memory, card_request, _ = job_min_from_podgroup(group)
            minimum = min_cpu_memory + card_request
        return check_enqueue(quota, ledger, minimum, self.args)

    def admit(self, group: PodGroup) -> None:
        """The PodGroup went Pending -> Inqueue: reserve its minimum in its queue."""
        admitted = group.model_copy(update={"status": group.status.model_copy(update={"phase": "Inqueue"})})
        self.set_podgroup(admitted)

    def task_check(self, pod: PodInfo) -> TaskCheck:
        """Task mode verdicts for a pending pod (tracked or not)."""
        state = self._pods.get(pod.key)
        if state is not None and state.pod is pod:
            queue = state.queue
        else:
            queue = queue_of(pod, self.podgroups)
            state = self._known_pod_state(pod, queue)
        quota = self.quotas.get(queue)
        ledger = self.ledgers.get(queue)
        if quota is None or ledger is None:
            return unrestricted_check(queue, state.demand or CardDemand())
        if state.error is not None or state.demand is None:
            error = state.error or InvalidValue("pod", pod.ref, "a readable card request", pod.ref)
            check = TaskCheck(queue, CardDemand(), self.catalog.names)
            return with_failure(check, Refusal(error, GET_TASK_REQUEST_RESOURCE_FAILED))
        return self._plan(quota, state.demand).check(ledger)

    def queue_of(self, pod: PodInfo) -> str:
        """:func:`~common.model.queues.queue_of` against the known PodGroups; for the tracked pod
        object itself, the queue its state holds, which is the same: :meth:`set_podgroup` and
        :meth:`remove_podgroup` re-route the pods of a group whenever its queue could change."""
        state = self._pods.get(pod.key)
        if state is not None and state.pod is pod:
            return state.queue
        return queue_of(pod, self.podgroups)

    def _plan(self, quota: QueueQuota, demand: CardDemand) -> TaskPlan:
        key = (id(quota), id(demand))
        plan = self._plans.get(key)
        if plan is None or plan.quota is not quota or plan.demand is not demand:
            if len(self._plans) >= _MAX_MEMO:
                self._plans.clear()
            plan = self._plans[key] = TaskPlan(quota, demand, self.catalog, self.args)
        return plan

    def node_order_scores(self, pod: PodInfo, has: BoolArray) -> FloatArray:
        text = pod.annotations.get(CARD_NAME)
        if text is None:
            return np.zeros(has.shape[0], dtype=np.float64)
        try:
            alternatives = parse_card_names(text, pod.ref)
        except InvalidAnnotation:
            return np.zeros(has.shape[0], dtype=np.float64)
        return node_order_scores(alternatives, self.catalog, has, self.args.node_order_weight)

    def reserve(self, pod: PodInfo, node_name: str, check: TaskCheck | None = None) -> Resources:
        """Reserve: charge the pod in its queue for the card type of ``node_name``. Idempotent."""
        bound = pod.with_node_name(node_name)
        old = self._pods.get(pod.key)
        if (
            old is not None
            and old.pod.annotations is bound.annotations
            and old.pod.requests is bound.requests
            and old.pod.uid == bound.uid
        ):
            # The tracked pod, bound (Reserve): its queue, job and demand read only the annotations
            # and requests, and the tracked state keeps them current (see queue_of).
            queue = old.queue
            state = _PodState(bound, queue, old.job, old.demand, old.error)
        else:
            queue = queue_of(bound, self.podgroups)
            state = self._known_pod_state(bound, queue)
        self._pods[pod.key] = state
        ledger = self.ledgers.get(queue)
        if ledger is None or state.demand is None:
            return EMPTY
        charge = self._charge(state.demand, node_name, check)
        if not ledger.reserve(pod.key, charge, state.job):
            return ledger.charge_of(pod.key) or EMPTY
        return charge

    def unreserve(self, pod: PodInfo) -> Resources | None:
        """Unreserve / preemption: release the pod's charge (no-op if it holds none); it stays pending."""
        state = self._pods.get(pod.key)
        if state is None or state.queue not in self.ledgers:
            return None
        released = self.ledgers[state.queue].unreserve(pod.key)
        unbound = state.pod.with_node_name("")
        self._pods[pod.key] = _PodState(unbound, state.queue, state.job, state.demand, state.error)
        return released

    def charged_card_type(self, pod: PodInfo) -> str | None:
        """The concrete card type a pod is charged to (the simulator's ``cardType``)."""
        state = self._pods.get(pod.key)
        ledger = self.ledgers.get(state.queue) if state is not None else None
        charge = ledger.charge_of(pod.key) if ledger is not None else None
        if not charge:
            return None
        return next((name for name in sorted(charge) if name not in CPU_MEMORY), None)

    # -- DRA claims (docs/design.md "Quota over devices")

    def charge_claim(self, key: str, queue: str, cards: Resources) -> None:
        """Charge an allocated claim's devices (cards per card type) to ``queue``, once whatever
        number of pods share it; idempotent, and a new queue or amount replaces the old charge."""
        if self._claims.get(key) == (queue, cards):
            return
        self.refund_claim(key)
        self._claims[key] = (queue, cards)
        ledger = self.ledgers.get(queue)
        if ledger is not None and cards:
            ledger.reserve(_CLAIM + key, cards)

    def refund_claim(self, key: str) -> None:
        """The claim's allocation is gone (cleared, deleted, or an in-flight one unreserved)."""
        old = self._claims.pop(key, None)
        if old is not None and old[0] in self.ledgers:
            self.ledgers[old[0]].untrack(_CLAIM + key)

    def set_device_demand(self, pod_key: str, cards: Resources) -> None:
        """What a pending pod's claims not allocated yet ask of the card quotas (per card key, an
        ``A|B`` key for a claim whose devices may be of several types): part of its job's minimum
        for the job-mode enqueue check, as a ``card.name`` pod's request is."""
        if self._device_pending.get(pod_key, EMPTY) == cards:
            return
        if cards:
            self._device_pending[pod_key] = cards
        else:
            self._device_pending.pop(pod_key, None)
        state = self._pods.get(pod_key)
        ledger = self.ledgers.get(state.queue) if state is not None else None
        if state is not None and ledger is not None and not state.pod.node_name:
            self._account(ledger, state)  # track() replaces an uncharged entry

    def tracked_pod(self, pod_key: str) -> PodInfo | None:
        """The pod tracked under ``pod_key`` (``namespace/name``), if any."""
        state = self._pods.get(pod_key)
        return state.pod if state is not None else None

    def claim_card_type(self, key: str) -> str | None:
        """The first card type (by name) claim ``key`` is charged under, None when it charges none."""
        held = self._claims.get(key)
        return min(held[1], default=None) if held is not None else None

    def claim_queue(self, key: str) -> str | None:
        """The queue claim ``key`` is charged to, None when it is not charged."""
        held = self._claims.get(key)
        return held[0] if held is not None else None

    def device_refusal(self, pod: PodInfo, cards: Resources) -> Refusal | None:
        """May ``pod`` take devices worth ``cards`` (milli-cards per card type) in its queue? Each
        card type on its own: ``allocated + asked <= quota`` (a card type the queue's card quota does not
        name has quota 0, as for device-plugin cards); None for a pod of no existing Queue (Semantics 7)
        or devices without a card type."""
        queue = self.queue_of(pod)
        quota = self.quotas.get(queue)
        ledger = self.ledgers.get(queue)
        if quota is None or ledger is None or not cards:
            return None
        if not quota.open:
            return queue_closed(quota.name, "it takes no new pods")
        if not quota.configured:
            return empty_capability(quota)
        allocated = ledger.allocated_amounts
        for name, asked in sorted(cards.items()):
            used = allocated.get(name, 0)
            limit = quota.capability.amount(name)
            if used + asked > limit:
                return Refusal(exceeded(quota.name, name, asked, used, limit), INSUFFICIENT_SCALAR_QUOTA)
        return None

    # -- metrics

    def metrics(self) -> list[QueueCardMetric]:
        deserved = deserved_cards(self.quotas.values())
        samples: list[QueueCardMetric] = []
        for name in sorted(self.quotas):
            samples.extend(queue_card_metrics(self.quotas[name], self.ledgers[name], deserved[name]))
        return samples

    def shares(self) -> dict[str, float]:
        deserved = deserved_cards(self.quotas.values())
        return {name: queue_share(self.ledgers[name], deserved[name]) for name in sorted(self.quotas)}

    # -- internals

    def _charge(self, demand: CardDemand, node_name: str, check: TaskCheck | None) -> Resources:
        """``resolve_charge`` on ``node_name`` with ``check``'s verdicts, memoised: it reads only the
        demand, the verdicts and which card types the node has."""
        names = self._node_names.get(node_name)
        if names is None:
            node = self.nodes.get(node_name)
            names = frozenset(node.names) if node is not None else _UNKNOWN_NODE
            # One object per distinct set, so the memo key below compares by identity.
            names = self._name_sets.setdefault(names, names)
            if len(self._node_names) >= _MAX_NODE_MEMO:
                self._node_names.clear()
            self._node_names[node_name] = names
        key = (id(demand), id(check), names)
        memo = self._charges.get(key)
        if memo is not None and memo[0] is demand and memo[1] is check:
            return memo[2]
        allowed = check.allowed_names if check is not None else None
        node_cards = self.nodes.get(node_name)
        charge = resolve_charge(
            demand, node_cards or NodeCards(node_name), self.args, allowed, node_known=node_cards is not None
        )
        if len(self._charges) >= _MAX_MEMO:
            self._charges.clear()
        self._charges[key] = (demand, check, charge)
        return charge

    def _demand(self, pod: PodInfo) -> CardDemand:
        """``pod_card_demand``, shared by pods with the same requests and ``card.name``: it reads
        nothing else of the pod but its name, and that only in the error it raises (never memoised)."""
        key = (pod.requests, pod.annotations.get(CARD_NAME))
        demand = self._demands.get(key)
        if demand is None:
            demand = pod_card_demand(pod, self.catalog, autoscaled=self.args.autoscaled_card_types)
            if len(self._demands) >= _MAX_MEMO:
                self._demands.clear()
            self._demands[key] = demand
        return demand

    def _pod_state(self, pod: PodInfo, queue: str) -> _PodState:
        try:
            demand: CardDemand | None = self._demand(pod)
            error = None
        except InvalidValue as err:
            demand, error = None, err
        job = podgroup_key_of(pod)
        if job is not None and job not in self.podgroups:
            job = None
        return _PodState(pod, queue, job, demand, error)

    def _known_pod_state(self, pod: PodInfo, queue: str) -> _PodState:
        """:meth:`_pod_state`, reusing the tracked state's card demand when the pod's inputs to it
        (requests, ``card.name``) are unchanged: every tracked state is derived from the current
        catalog (:meth:`set_nodes` replays them all), so the demand would come out the same."""
        old = self._pods.get(pod.key)
        if old is None:
            return self._pod_state(pod, queue)
        before = old.pod
        if before is not pod and (
            before.uid != pod.uid
            or (before.requests is not pod.requests and before.requests != pod.requests)
            or before.annotations.get(CARD_NAME) != pod.annotations.get(CARD_NAME)
        ):
            return self._pod_state(pod, queue)
        job = podgroup_key_of(pod)
        if job is not None and job not in self.podgroups:
            job = None
        return _PodState(pod, queue, job, old.demand, old.error)

    def _account(self, ledger: QueueLedger, state: _PodState) -> None:
        demand = state.demand or CardDemand()
        devices = self._device_pending.get(state.pod.key)
        pending = demand.pending + devices if devices else demand.pending
        uses_cards = demand.uses_cards or bool(devices)
        ledger.track(state.pod.key, state.job, pending, uses_cards=uses_cards)
        if state.pod.node_name:
            node = self.nodes.get(state.pod.node_name)
            name = state.pod.node_name
            charge = resolve_charge(demand, node or NodeCards(name), self.args, node_known=node is not None)
            ledger.reserve(state.pod.key, charge, state.job)

    def _set_job(self, ledger: QueueLedger, group: PodGroup) -> None:
        min_cpu_memory, card_request, event = job_min_from_podgroup(group)
        if event is not None:
            self._events.append(event)
        ledger.set_job(
            group.key,
            min_cpu_memory=min_cpu_memory,
            card_request=card_request,
            has_min_resources=group.spec.minResources is not None,
            phase=group.phase,
            min_member=group.spec.minMember,
        )

    def _reroute(self, job_key: str) -> None:
        for key in [k for k, state in self._pods.items() if podgroup_key_of(state.pod) == job_key]:
            pod = self._pods[key].pod
            self.remove_pod(pod)
            self.set_pod(pod)

    def _replay(self) -> None:
        pods = [state.pod for state in self._pods.values()]
        self._pods = {}
        self.ledgers = {}
        for pod in pods:
            self._pods[pod.key] = self._pod_state(pod, queue_of(pod, self.podgroups))
        for name in self.quotas:
            self._replay_queue(name)

    def _replay_queue(self, name: str) -> None:
        ledger = QueueLedger(name, card_unlimited_cpu_memory=self.args.card_unlimited_cpu_memory)
        self.ledgers[name] = ledger
        for group in sorted(self.podgroups.values(), key=lambda g: g.key):
            if group.queue == name:
                self._set_job(ledger, group)
        for key in sorted(self._pods):
            state = self._pods[key]
            if state.queue == name:
                self._account(ledger, state)
        for key in sorted(self._claims):
            queue, cards = self._claims[key]
            if queue == name and cards:
                ledger.reserve(_CLAIM + key, cards)
