"""The day's invariant checker: a recount of every quota from the pods the API shows, independent of
gpuq's code (only the quantity parser is shared), and the five invariants of issue 28, checked
after every step.

1. **No quota overspent** (:func:`over_limits`): recounted from the pods that hold resources
   (bound and not finished, those terminating included: they still run): node allocatable, each
   Queue's card quota per card type (a pod charges its node's card type), each ElasticQuota's max
   and the guaranteed pool (the sum of the ElasticQuotas' used GPUs never above the sum of their
   min), the GPUResourceQuota's totals, crossquota's CPU per GPU node.
2. **No pod bound twice** (:class:`tests.e2e.chaos.invariants.BindLedger`).
3. **Every job that fits eventually runs**: a pending pod, or a gang's pending pods together, that
   fit somewhere now (:func:`place`: greedily, node room and every quota considered) and have fit
   at every check for :data:`FIT_GRACE` seconds since the last fault, are a violation. The room a
   preemption made is its preemptor's: a pending pod nominated to a node (``status.nominatedNodeName``)
   counts there, and on its quotas, for every pod of lower or equal priority (kube-scheduler's rule,
   design.md Semantics 18).
4. **No queue waits while another borrows its guarantee beyond what reclaim allows**: a single
   training pod of a team within its ElasticQuota's min, waiting for :data:`FIT_GRACE` while the
   other team is over its min with pods that capacity-scheduling may take back (not gang members
   at minMember) on a node where the waiting pod would then fit.
5. **Gangs never run partially**: a PodGroup with some of its pods placed, but fewer than minMember
   placed or finished, for :data:`PARTIAL_GRACE` seconds (its binds land one by one). Kubernetes
   binds pod by pod: a leader lost between a gang's binds (a kill, a Lease lost) leaves it partly
   placed, and no scheduler can undo a bind. Such a gang, partial from within a fault's window
   (``quiet_since``), must be completed within :data:`FIT_GRACE` (its pending pods go first at the
   next leader); these episodes are counted (``repaired``, ``longest_repair``), not hidden.

A pod is a :class:`Pod`; nodes, quotas and their limits come from :mod:`tests.e2e.day.load`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from gpuq_k8s.common.model.quantity import parse_quantity
from gpuq_k8s.common.model.wire import rfc3339_seconds
from tests.e2e.chaos.invariants import BindLedger, PodView
from tests.e2e.day import load as ld

Obj = Mapping[str, Any]
ZERO: Final = Fraction(0)
FIT_GRACE: Final = 90.0
PARTIAL_GRACE: Final = 10.0
FAULT_QUIET: Final = 20.0  # after a fault, a new leader takes the Lease and lists
ELASTIC: Final = (ld.TEAM_A, ld.TEAM_B)


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    deleting: bool
    requests: Mapping[str, Fraction]
    annotations: Mapping[str, str]
    created: float
    bound_at: float | None
    preempted: bool  # DisruptionTarget=True, PreemptionByScheduler
    priority: int = 0
    nominated: str = ""  # status.nominatedNodeName
    unschedulable: str = ""  # the scheduler's reason: PodScheduled=False's message

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def holds(self) -> bool:
        """Bound and not finished: counts on its node and quotas (terminating or not)."""
        return bool(self.node) and not self.finished

    @property
    def waiting(self) -> bool:
        return not self.node and not self.deleting and not self.finished

    @property
    def gpus(self) -> Fraction:
        return self.requests.get(ld.GPU, ZERO)

    @property
    def queue(self) -> str:
        return self.annotations.get(ld.QUEUE_NAME) or ld.NO_QUEUE

    @property
    def group(self) -> str:
        name = self.annotations.get(ld.GROUP_NAME)
        return f"{self.namespace}/{name}" if name else ""

    @property
    def cards(self) -> tuple[str, ...]:
        names = self.annotations.get(ld.CARD_NAME, "")
        return tuple(n for n in names.split("|") if n)

    def view(self) -> PodView:
        return PodView(self.namespace, self.name, self.uid, self.node, self.requests, self.annotations, {})


def pod_of(obj: Obj) -> Pod:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    requests: defaultdict[str, Fraction] = defaultdict(Fraction)
    for container in spec.get("containers") or ():
        for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            requests[resource] += parse_quantity(amount)
    conditions = status.get("conditions") or ()
    bound_at = None
    preempted = False
    why = ""
    for condition in conditions:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            bound_at = rfc3339_seconds(str(condition.get("lastTransitionTime") or ""))
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            why = str(condition.get("message") or "")
        if condition.get("type") == "DisruptionTarget" and condition.get("reason") == "PreemptionByScheduler":
            preempted = True
    return Pod(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        requests=dict(requests),
        annotations=dict(meta.get("annotations") or {}),
        created=rfc3339_seconds(str(meta.get("creationTimestamp") or "")) or 0.0,
        bound_at=bound_at,
        preempted=preempted,
        priority=int(spec.get("priority") or 0),
        nominated=str(status.get("nominatedNodeName") or ""),
        unschedulable=why,
    )


@dataclass(frozen=True)
class Node:
    name: str
    allocatable: Mapping[str, Fraction]
    card: str


def node_of(obj: Obj) -> Node:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    allocatable = {r: parse_quantity(v) for r, v in (status.get("allocatable") or {}).items()}
    card = str((meta.get("labels") or {}).get(f"{ld.GPU}.product") or "")
    return Node(str(meta.get("name")), allocatable, card)


@dataclass
class Usage:
    """The recount: per node (resources and pod count), per Queue and card type, per ElasticQuota
    namespace (GPUs), the GPUResourceQuota's amounts, crossquota's CPU per node."""

    node: defaultdict[str, defaultdict[str, Fraction]] = field(default_factory=lambda: defaultdict(_amounts))
    pods: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    cards: defaultdict[tuple[str, str], Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    elastic: defaultdict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    notebooks: defaultdict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    cross: defaultdict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))

    def charge(self, pod: Pod, node: Node, sign: int = 1) -> None:
        for resource, amount in pod.requests.items():
            self.node[node.name][resource] += sign * amount
        self.pods[node.name] += sign
        if pod.gpus and pod.queue in ld.QUEUE_OF_NAMESPACE.values():
            self.cards[(pod.queue, node.card)] += sign * pod.gpus
        if pod.namespace in ELASTIC:
            self.elastic[pod.namespace] += sign * pod.gpus
        if pod.namespace == ld.NOTEBOOKS and any(k.startswith(ld.TF) for k in pod.annotations):
            for key, amount in notebook_charge(pod).items():
                self.notebooks[key] += sign * amount
        if not pod.gpus:
            self.cross[node.name] += sign * pod.requests.get("cpu", ZERO)

    def copy(self) -> Usage:
        out = Usage()
        for name, amounts in self.node.items():
            out.node[name].update(amounts)
        out.pods.update(self.pods)
        out.cards.update(self.cards)
        out.elastic.update(self.elastic)
        out.notebooks.update(self.notebooks)
        out.cross.update(self.cross)
        return out


def _amounts() -> defaultdict[str, Fraction]:
    return defaultdict(Fraction)


def notebook_charge(pod: Pod) -> dict[str, Fraction]:
    a = pod.annotations
    return {
        "requests.tflops": parse_quantity(a[f"{ld.TF}tflops-request"]),
        "requests.vram": parse_quantity(a[f"{ld.TF}vram-request"]),
        "limits.tflops": parse_quantity(a[f"{ld.TF}tflops-limit"]),
        "limits.vram": parse_quantity(a[f"{ld.TF}vram-limit"]),
        "workers": Fraction(1),
    }


def recount(pods: Iterable[Pod], nodes: Mapping[str, Node]) -> Usage:
    usage = Usage()
    for pod in pods:
        if pod.holds:
            usage.charge(pod, nodes.get(pod.node) or Node(pod.node, {}, ""))
    return usage


@dataclass(frozen=True)
class Limits:
    cards: Mapping[tuple[str, str], Fraction]
    elastic_min: Mapping[str, Fraction]
    elastic_max: Mapping[str, Fraction]
    notebooks: Mapping[str, Fraction]
    cross: Fraction

    @classmethod
    def of(cls, sizes: ld.Sizes) -> Limits:
        cards = {
            (queue, card): Fraction(amount)
            for queue in (ld.TRAINING, ld.INFERENCE, ld.INTERACTIVE)
            for card, amount in sizes.card_quota(queue).items()
        }
        bounds = {ns: sizes.elastic(ns) for ns in ELASTIC}
        workers = sizes.notebook_workers
        notebooks = {
            "requests.tflops": Fraction(workers * 100),
            "requests.vram": parse_quantity(f"{workers * 24}Gi"),
            "limits.tflops": Fraction(workers * 150),
            "limits.vram": parse_quantity(f"{workers * 32}Gi"),
            "workers": Fraction(workers),
        }
        return cls(
            cards,
            {ns: Fraction(low) for ns, (low, _) in bounds.items()},
            {ns: Fraction(high) for ns, (_, high) in bounds.items()},
            notebooks,
            Fraction(ld.CROSS_CPU),
        )


def over_limits(usage: Usage, limits: Limits, nodes: Mapping[str, Node]) -> list[str]:
    """Invariant 1: one message per limit the recount exceeds."""
    out: list[str] = []
    for name, used in sorted(usage.node.items()):
        node = nodes.get(name)
        for resource, amount in sorted(used.items()):
            if node is not None and amount > node.allocatable.get(resource, ZERO):
                out.append(f"Node/{name}: {resource} {float(amount):g} > allocatable")
    for (queue, card), used_cards in sorted(usage.cards.items()):
        limit = limits.cards.get((queue, card), ZERO)
        if used_cards > limit:
            out.append(f"Queue/{queue}: {card} {float(used_cards):g} > card quota {float(limit):g}")
    for ns, used_gpus in sorted(usage.elastic.items()):
        if used_gpus > limits.elastic_max[ns]:
            top = float(limits.elastic_max[ns])
            out.append(f"ElasticQuota/{ns}/gpus: {ld.GPU} {float(used_gpus):g} > max {top:g}")
    pool, total = sum(limits.elastic_min.values()), sum(usage.elastic.values())
    if total > pool:
        out.append(f"ElasticQuotas: {ld.GPU} {float(total):g} used > {float(pool):g} guaranteed in all")
    for key, amount in sorted(usage.notebooks.items()):
        if amount > limits.notebooks[key]:
            top = float(limits.notebooks[key])
            out.append(f"GPUResourceQuota/{ld.NOTEBOOKS}/notebooks: {key} {float(amount):g} > {top:g}")
    for name, cpu in sorted(usage.cross.items()):
        if cpu > limits.cross:
            out.append(f"crossquota/{name}: cpu {float(cpu):g} > {float(limits.cross):g}")
    return out


def _quota_fits(pod: Pod, usage: Usage, limits: Limits) -> bool:
    """The quotas that do not depend on the node: the team's ElasticQuota (max, and the guaranteed
    pool) and the notebooks' GPUResourceQuota."""
    if pod.namespace in ELASTIC and pod.gpus:
        if usage.elastic[pod.namespace] + pod.gpus > limits.elastic_max[pod.namespace]:
            return False
        if sum(usage.elastic.values()) + pod.gpus > sum(limits.elastic_min.values()):
            return False
    tensor_fusion = pod.namespace == ld.NOTEBOOKS and any(k.startswith(ld.TF) for k in pod.annotations)
    return not (
        tensor_fusion
        and any(usage.notebooks[k] + v > limits.notebooks[k] for k, v in notebook_charge(pod).items())
    )


def _node_fits(pod: Pod, node: Node, usage: Usage, limits: Limits) -> bool:
    """What depends on the node: its card type, its room, the Queue's card quota of its card type,
    crossquota on it."""
    if pod.cards and node.card not in pod.cards:
        return False
    used = usage.node[node.name]
    if any(used[r] + v > node.allocatable.get(r, ZERO) for r, v in pod.requests.items() if v > 0):
        return False
    if usage.pods[node.name] + 1 > node.allocatable.get("pods", ZERO):
        return False
    card = (pod.queue, node.card)
    queued = pod.gpus and pod.queue in ld.QUEUE_OF_NAMESPACE.values()
    if queued and usage.cards[card] + pod.gpus > limits.cards.get(card, ZERO):
        return False
    return not (not pod.gpus and usage.cross[node.name] + pod.requests.get("cpu", ZERO) > limits.cross)


def _fits(pod: Pod, node: Node, usage: Usage, limits: Limits) -> bool:
    return _quota_fits(pod, usage, limits) and _node_fits(pod, node, usage, limits)


def place(pods: Sequence[Pod], usage: Usage, nodes: Sequence[Node], limits: Limits) -> dict[str, str] | None:
    """Invariant 3: a node for each of ``pods`` at once (greedy, first node by name that fits each,
    charging as it goes), or None when they do not all fit now. (``usage`` is changed and restored.)"""
    placed: list[tuple[Pod, Node]] = []
    try:
        for pod in pods:
            if not _quota_fits(pod, usage, limits):
                return None
            node = next((n for n in nodes if _node_fits(pod, n, usage, limits)), None)
            if node is None:
                return None
            usage.charge(pod, node)
            placed.append((pod, node))
        return {pod.key: node.name for pod, node in placed}
    finally:
        for pod, node in placed:
            usage.charge(pod, node, -1)


def reclaimable_room(
    pod: Pod,
    pods: Sequence[Pod],
    usage: Usage,
    nodes: Sequence[Node],
    *,
    limits: Limits,
    min_members: Mapping[str, int],
) -> str | None:
    """Invariant 4: a node where ``pod`` (a single training pod within its team's guarantee) would
    fit once the other team's pods that capacity-scheduling may take back there are gone, while that
    team is over its min; None when there is none. (``usage`` is changed and restored.)"""
    team = pod.namespace
    other = ld.TEAM_B if team == ld.TEAM_A else ld.TEAM_A
    within = usage.elastic[team] + pod.gpus <= limits.elastic_min[team]
    if not within or usage.elastic[other] <= limits.elastic_min[other]:
        return None
    running: defaultdict[str, int] = defaultdict(int)
    for p in pods:
        if p.holds and p.group:
            running[p.group] += 1
    by_node: defaultdict[str, list[Pod]] = defaultdict(list)
    for p in pods:
        if p.holds and not p.deleting and p.namespace == other:
            if p.group and running[p.group] <= min_members.get(p.group, 1):
                continue  # a gang at minMember gives nothing back
            by_node[p.node].append(p)
    names = {n.name: n for n in nodes}
    for node_name, victims in sorted(by_node.items()):
        node = names.get(node_name)
        if node is None:
            continue
        taken: list[Pod] = []
        try:
            for victim in victims:
                if usage.elastic[other] - victim.gpus < limits.elastic_min[other]:
                    break  # only what the other team borrows comes back
                usage.charge(victim, node, -1)
                taken.append(victim)
                if _fits(pod, node, usage, limits):
                    return node_name
        finally:
            for victim in taken:
                usage.charge(victim, node)
    return None


@dataclass
class Checker:
    """The invariants over successive snapshots; ``quiet_since`` is when the last fault ended (the
    liveness clocks of invariants 3 and 4 never start before it)."""

    limits: Limits
    ledger: BindLedger = field(default_factory=BindLedger)
    fitting: dict[str, float] = field(default_factory=dict)  # unit (gang or pod) -> fits since
    borrowed: dict[str, float] = field(default_factory=dict)  # pod -> waits within its guarantee since
    partial: dict[str, tuple[float, bool]] = field(default_factory=dict)  # gang -> (since, in a fault window)
    overspent: set[str] = field(default_factory=set)
    quiet_since: float = 0.0
    repaired: int = 0  # gangs left partial by a fault, completed within FIT_GRACE
    longest_repair: float = 0.0

    def fault(self, now: float, duration: float = 0.0) -> None:
        """A fault (or a leader change) at ``now``: liveness clocks wait for the scheduler to be back."""
        self.quiet_since = max(self.quiet_since, now + duration + FAULT_QUIET)

    def check(
        self, now: float, pods: Sequence[Pod], nodes: Mapping[str, Node], groups: Mapping[str, int]
    ) -> list[str]:
        """Every invariant on one snapshot (``groups``: PodGroup key -> minMember); new violations."""
        usage = recount(pods, nodes)
        found = self._overspent(usage, nodes)
        found += self.ledger.observe([p.view() for p in pods])
        ordered = sorted(nodes.values(), key=lambda n: n.name)
        found += self._liveness(now, pods, usage, ordered, groups)
        found += self._gangs(now, pods, groups)
        return found

    def _overspent(self, usage: Usage, nodes: Mapping[str, Node]) -> list[str]:
        over = over_limits(usage, self.limits, nodes)
        ongoing = {m.split(":")[0]: m for m in over}
        new = [m for key, m in ongoing.items() if key not in self.overspent]  # one per episode
        self.overspent = set(ongoing)
        return new

    def _units(
        self, pods: Sequence[Pod], usage: Usage, nodes: Sequence[Node], groups: Mapping[str, int]
    ) -> list[tuple[str, bool, str | None]]:
        """Per pending unit (a gang's pods, or a pod): whether it fits now, and for a single training
        pod within its team's guarantee, a node the other team's borrowing holds (invariant 4)."""
        units: dict[str, list[Pod]] = defaultdict(list)
        for pod in pods:
            if pod.waiting:
                units[pod.group if pod.group in groups else pod.key].append(pod)
        names = {n.name: n for n in nodes}
        nominated = [p for p in pods if p.waiting and p.nominated in names]
        out: list[tuple[str, bool, str | None]] = []
        for unit, members in sorted(units.items()):
            if unit in groups:
                placed_count = sum(1 for p in pods if p.group == unit and (p.holds or p.finished))
                if placed_count + len(members) < groups[unit]:
                    continue  # its Job has not made all its pods yet
            level = min(p.priority for p in members)
            keys = {p.key for p in members}
            holding = [p for p in nominated if p.priority >= level and p.key not in keys]
            for pod in holding:  # the room their preemptions made is theirs
                usage.charge(pod, names[pod.nominated])
            try:
                fits = place(members, usage, nodes, self.limits) is not None
                reclaim = None
                single = members[0] if len(members) == 1 and unit == members[0].key else None
                if single is not None and single.namespace in ELASTIC and single.gpus:
                    reclaim = reclaimable_room(
                        single, pods, usage, nodes, limits=self.limits, min_members=groups
                    )
                out.append((unit, fits, reclaim))
            finally:
                for pod in holding:
                    usage.charge(pod, names[pod.nominated], -1)
        return out

    def _liveness(
        self, now: float, pods: Sequence[Pod], usage: Usage, nodes: Sequence[Node], groups: Mapping[str, int]
    ) -> list[str]:
        found: list[str] = []
        since = max(self.quiet_since, 0.0)
        fitting: dict[str, float] = {}
        borrowed: dict[str, float] = {}
        for unit, fits, reclaim in self._units(pods, usage, nodes, groups):
            if fits:
                first = fitting[unit] = max(self.fitting.get(unit, now), since)
                if now - first > FIT_GRACE:
                    found.append(f"{unit}: fits now and has for {now - first:.0f}s, still pending")
                    fitting[unit] = now  # reported: the clock starts again
            if reclaim is not None:
                first = borrowed[unit] = max(self.borrowed.get(unit, now), since)
                if now - first > FIT_GRACE:
                    found.append(
                        f"{unit}: within its team's guarantee, waits {now - first:.0f}s while the other "
                        f"team borrows what capacity-scheduling may take back on {reclaim}"
                    )
                    borrowed[unit] = now
        self.fitting, self.borrowed = fitting, borrowed
        return found

    def fitting_units(
        self, pods: Sequence[Pod], nodes: Mapping[str, Node], groups: Mapping[str, int]
    ) -> list[str]:
        """The pending units that fit now (the settle's question), nominations held as above."""
        ordered = sorted(nodes.values(), key=lambda n: n.name)
        return [unit for unit, fits, _ in self._units(pods, recount(pods, nodes), ordered, groups) if fits]

    def _gangs(self, now: float, pods: Sequence[Pod], groups: Mapping[str, int]) -> list[str]:
        placed: defaultdict[str, int] = defaultdict(int)
        done: defaultdict[str, int] = defaultdict(int)
        for pod in pods:
            if pod.group in groups:
                if pod.holds:
                    placed[pod.group] += 1
                elif pod.finished:
                    done[pod.group] += 1
        found: list[str] = []
        partial: dict[str, tuple[float, bool]] = {}
        for group, count in sorted(placed.items()):
            need = groups[group]
            if not (count > 0 and count + done[group] < need):
                continue
            first, faulted = self.partial.get(group, (now, now < self.quiet_since))
            partial[group] = (first, faulted)
            if now - first > (FIT_GRACE if faulted else PARTIAL_GRACE):
                cause = " (left so by a fault)" if faulted else ""
                found.append(
                    f"PodGroup/{group}: {count} of minMember {need} pods run, for {now - first:.0f}s{cause}"
                )
                partial[group] = (now, faulted)
        for group, (first, faulted) in self.partial.items():
            if group not in partial and faulted:  # completed (or gone) in time
                self.repaired += 1
                self.longest_repair = max(self.longest_repair, now - first)
        self.partial = partial
        return found
