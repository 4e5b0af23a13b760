"""The differential test's rule checker: every bind a scheduler made, checked against every placement
rule of kube-scheduler 1.36's default profile, from what the API shows.

Independent of gpuq on purpose (it must catch gpuq's bugs): it reads the API objects as JSON and
implements each rule here, in its own few lines, from the Kubernetes API's definitions; nothing of
gpuq's model (not even its quantity parser) is imported.

A placement is judged on what the API shows, in two ways:

* *at its moment*, for the rules more pods can only make harder to keep (resources, ports,
  anti-affinity both ways, ReadWriteOncePod, volume counts, gates, and the node's own labels and
  taints): the pods' watch history is replayed in order (creation, bind, deletion) and each bind is
  checked against the pods bound at that moment. A pod deleted later (a preemption victim) counts
  where it then stood; two binds that landed in another order than they were decided still meet
  (the later one sees the earlier), so a conflict is always caught.
* *on the final placement*, for the rules whose verdict depends on the order of the decisions
  (required pod affinity, DoNotSchedule topology spread): a scheduler decides pods one at a time
  but binds them concurrently, so the API's order is not its order. A correct sequence of decisions
  leaves every spread group within its maxSkew (the minimum counted as 0 with fewer domains than
  minDomains) and every pod with required affinity beside a pod its term matches, a self-affine
  group (no other pod matching its term) in one domain. That holds only if no pod those rules count
  was deleted after it was bound; the checker refuses to judge otherwise
  (:class:`Unjudgeable`), and the workload keeps such pods out of preemption's reach.

Volumes are judged on the final objects (a pod binds only after its claims are).

Rules (kube-scheduler's plugin in brackets): resources incl. overhead, sidecars, ephemeral
storage, hugepages and the pod count [NodeResourcesFit]; nodeSelector and required node affinity
[NodeAffinity]; NoSchedule/NoExecute taints [TaintToleration]; cordoned nodes [NodeUnschedulable];
host ports [NodePorts]; required pod affinity (with the first-pod rule), anti-affinity and
existing pods' anti-affinity, namespaces, namespaceSelector, matchLabelKeys, mismatchLabelKeys
[InterPodAffinity]; DoNotSchedule topology spread with minDomains and the node inclusion policies
[PodTopologySpread]; claims that exist and are bound, PV node affinity [VolumeBinding]; zone labels
of PVs [VolumeZone]; ReadWriteOncePod [VolumeRestrictions]; CSINode volume counts
[NodeVolumeLimits]; scheduling gates [SchedulingGates]; resource claims allocated and reserved
[DynamicResources].
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

Obj = Mapping[str, Any]
HOSTNAME = "kubernetes.io/hostname"
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


def quantity(value: Any) -> Fraction:
    """A Kubernetes quantity (``500m``, ``1Gi``, ``1e3``, ``2``) as an exact fraction."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _DECIMAL[suffix]


class Unjudgeable(RuntimeError):
    """The history breaks an assumption of the final-placement rules (see the module doc)."""


@dataclass(frozen=True)
class Violation:
    pod: str  # namespace/name
    node: str
    rule: str  # kube-scheduler's plugin name
    detail: str

    def __str__(self) -> str:
        return f"{self.pod} on {self.node}: {self.rule}: {self.detail}"


@dataclass
class Cluster:
    """The final objects the volume and device rules read, and the nodes and namespaces."""

    nodes: Sequence[Obj]
    namespaces: Sequence[Obj] = ()
    pvcs: Sequence[Obj] = ()
    pvs: Sequence[Obj] = ()
    csinodes: Sequence[Obj] = ()
    claims: Sequence[Obj] = ()
    node_by_name: dict[str, Obj] = field(init=False)
    namespace_labels: dict[str, Mapping[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.node_by_name = {n["metadata"]["name"]: n for n in self.nodes}
        self.namespace_labels = {n["metadata"]["name"]: labels(n) for n in self.namespaces}


def labels(obj: Obj) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def key(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


def spec(obj: Obj) -> Mapping[str, Any]:
    return obj.get("spec") or {}


# -- label selectors and node selectors --------------------------------------------------------------


def selector_matches(selector: Mapping[str, Any] | None, values: Mapping[str, str]) -> bool:
    """``metav1.LabelSelector`` semantics; None matches nothing, ``{}`` everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if values.get(k) != v:
            return False
    return all(_requirement(expression, values) for expression in selector.get("matchExpressions") or ())


def _requirement(expression: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    operator, k = expression["operator"], expression["key"]
    wanted = list(expression.get("values") or ())
    present = k in values
    if operator == "In":
        return present and values[k] in wanted
    if operator == "NotIn":
        return not present or values[k] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or not values[k].lstrip("-").isdigit():
            return False
        return int(values[k]) > int(wanted[0]) if operator == "Gt" else int(values[k]) < int(wanted[0])
    raise ValueError(f"unknown operator {operator}")


def node_affinity_matches(pod: Obj, node: Obj) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution (terms ORed, expressions ANDed)."""
    node_labels = labels(node)
    for k, v in (spec(pod).get("nodeSelector") or {}).items():
        if node_labels.get(k) != v:
            return False
    required = ((spec(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in required.get("nodeSelectorTerms") or ():
        expressions = term.get("matchExpressions") or ()
        matched_fields = term.get("matchFields") or ()
        if not expressions and not matched_fields:
            continue  # an empty term matches nothing
        if all(_requirement(e, node_labels) for e in expressions) and all(
            _requirement(f, fields) for f in matched_fields
        ):
            return True
    return False


def untolerated(pod: Obj, node: Obj, effects: tuple[str, ...] = ("NoSchedule", "NoExecute")) -> list[str]:
    """The node's taints of ``effects`` no toleration of the pod tolerates."""
    out = []
    for taint in spec(node).get("taints") or ():
        if taint.get("effect") not in effects:
            continue
        if not any(_tolerates(t, taint) for t in spec(pod).get("tolerations") or ()):
            out.append(f"{taint['key']}={taint.get('value', '')}:{taint['effect']}")
    return out


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if not toleration.get("key") and toleration.get("operator") != "Exists":
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return str(toleration.get("value") or "") == str(taint.get("value") or "")


# -- resources -------------------------------------------------------------------------------------


def requests(pod: Obj) -> dict[str, Fraction]:
    """The pod's effective request: KEP-753 (sidecars run beside the app, classic init containers
    alone beside the sidecars started before them), plus overhead."""

    def of(container: Obj) -> dict[str, Fraction]:
        resources = container.get("resources") or {}
        asked = {k: quantity(v) for k, v in (resources.get("requests") or {}).items()}
        for k, v in (resources.get("limits") or {}).items():
            asked.setdefault(k, quantity(v))  # a limit without a request requests the limit
        return asked

    total: dict[str, Fraction] = {}
    for container in spec(pod).get("containers") or ():
        for k, v in of(container).items():
            total[k] = total.get(k, Fraction(0)) + v
    sidecars: dict[str, Fraction] = {}
    peak: dict[str, Fraction] = {}
    for container in spec(pod).get("initContainers") or ():
        asked = of(container)
        if container.get("restartPolicy") == "Always":
            for k, v in asked.items():
                sidecars[k] = sidecars.get(k, Fraction(0)) + v
                total[k] = total.get(k, Fraction(0)) + v
            during = dict(sidecars)
        else:
            during = {
                k: asked.get(k, Fraction(0)) + sidecars.get(k, Fraction(0))
                for k in set(asked) | set(sidecars)
            }
        for k, v in during.items():
            peak[k] = max(peak.get(k, Fraction(0)), v)
    for k, v in peak.items():
        total[k] = max(total.get(k, Fraction(0)), v)
    for k, v in (spec(pod).get("overhead") or {}).items():
        total[k] = total.get(k, Fraction(0)) + quantity(v)
    return total


# -- the replay ------------------------------------------------------------------------------------


@dataclass
class _Bound:
    pod: Obj
    node: str


class Checker:
    """Replays a pod watch history over ``cluster`` and collects :class:`Violation` values."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.bound: dict[str, _Bound] = {}
        self.deleted: list[Obj] = []  # pods deleted after they were bound
        self.violations: list[Violation] = []
        self.binds = 0
        self._pvcs = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in cluster.pvcs}
        self._pvs = {v["metadata"]["name"]: v for v in cluster.pvs}
        self._csinodes = {c["metadata"]["name"]: c for c in cluster.csinodes}
        self._claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in cluster.claims}

    def replay(self, history: Iterable[tuple[str, Obj]]) -> list[Violation]:
        for kind, pod in history:
            self.event(kind, pod)
        return self.violations

    def event(self, kind: str, pod: Obj) -> None:
        k = key(pod)
        uid = pod["metadata"].get("uid")
        current = self.bound.get(k)
        if kind == "DELETED":
            if current is not None and current.pod["metadata"].get("uid") == uid:
                self.deleted.append(current.pod)
                del self.bound[k]
            return
        node = spec(pod).get("nodeName")
        if current is not None and current.pod["metadata"].get("uid") != uid:
            self.deleted.append(current.pod)
            del self.bound[k]  # deleted and re-created meanwhile
            current = None
        if current is not None:
            current.pod = pod  # a later version of a bound pod (its status, a deletion starting)
            return
        if node:
            self.binds += 1
            self.check(pod, node)
            self.bound[k] = _Bound(pod, node)

    def _fail(self, pod: Obj, node: str, rule: str, detail: str) -> None:
        self.violations.append(Violation(key(pod), node, rule, detail))

    def on_node(self, node: str) -> list[Obj]:
        return [b.pod for b in self.bound.values() if b.node == node]

    def check(self, pod: Obj, node_name: str) -> None:
        node = self.cluster.node_by_name.get(node_name)
        if node is None:
            self._fail(pod, node_name, "NodeName", "bound to a node that does not exist")
            return
        self._gates(pod, node_name)
        self._unschedulable(pod, node)
        self._resources(pod, node)
        if not node_affinity_matches(pod, node):
            self._fail(pod, node_name, "NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
        taints = untolerated(pod, node)
        if taints:
            self._fail(pod, node_name, "TaintToleration", f"untolerated taint(s) {', '.join(taints)}")
        self._ports(pod, node_name)
        self._anti_affinity(pod, node)
        self._volumes(pod, node)
        self._claims_rule(pod, node_name)

    # -- per rule ----------------------------------------------------------------------------------
    def _gates(self, pod: Obj, node: str) -> None:
        if spec(pod).get("schedulingGates"):
            self._fail(pod, node, "SchedulingGates", "bound while it still had scheduling gates")

    def _unschedulable(self, pod: Obj, node: Obj) -> None:
        if spec(node).get("unschedulable") and not any(
            _tolerates(t, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            for t in spec(pod).get("tolerations") or ()
        ):
            self._fail(pod, node["metadata"]["name"], "NodeUnschedulable", "node(s) were unschedulable")

    def _resources(self, pod: Obj, node: Obj) -> None:
        name = node["metadata"]["name"]
        allocatable = {
            k: quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
        }
        others = self.on_node(name)
        asked = requests(pod)
        for resource, amount in asked.items():
            if amount <= 0:
                continue
            used = sum((requests(p).get(resource, Fraction(0)) for p in others), Fraction(0))
            limit = allocatable.get(resource, Fraction(0))
            if used + amount > limit:
                detail = f"Insufficient {resource}: {float(used)} used + {float(amount)} > {float(limit)}"
                self._fail(pod, name, "NodeResourcesFit", detail)
        if len(others) + 1 > allocatable.get("pods", Fraction(0)):
            self._fail(pod, name, "NodeResourcesFit", f"Too many pods: {len(others)} + 1")

    def _ports(self, pod: Obj, node: str) -> None:
        def ports(p: Obj) -> list[tuple[str, str, int]]:
            out = []
            for container in [*(spec(p).get("containers") or ()), *(spec(p).get("initContainers") or ())]:
                for port in container.get("ports") or ():
                    if port.get("hostPort"):
                        ip = port.get("hostIP") or "0.0.0.0"
                        out.append((port.get("protocol") or "TCP", ip, int(port["hostPort"])))
            return out

        mine = ports(pod)
        if not mine:
            return
        for other in self.on_node(node):
            for protocol, ip, number in ports(other):
                for my_protocol, my_ip, my_number in mine:
                    if (protocol, number) == (my_protocol, my_number) and (
                        ip == my_ip or "0.0.0.0" in (ip, my_ip)
                    ):
                        self._fail(
                            pod, node, "NodePorts", f"{my_protocol}/{my_ip}:{my_number} used by {key(other)}"
                        )

    # -- inter-pod affinity --------------------------------------------------------------------------
    def _term_namespaces(self, owner: Obj, term: Mapping[str, Any]) -> set[str] | None:
        """The namespaces a term selects (None: every namespace)."""
        names = set(term.get("namespaces") or ())
        ns_selector = term.get("namespaceSelector")
        if ns_selector is not None:
            if not ns_selector.get("matchLabels") and not ns_selector.get("matchExpressions"):
                return None  # {}: all namespaces
            names |= {
                n for n, lbl in self.cluster.namespace_labels.items() if selector_matches(ns_selector, lbl)
            }
        elif not names:
            names = {owner["metadata"].get("namespace", "default")}
        return names

    def _term_selector(self, owner: Obj, term: Mapping[str, Any]) -> dict[str, Any] | None:
        selector = term.get("labelSelector")
        if selector is None:
            return None
        expressions: list[Mapping[str, Any]] = list(selector.get("matchExpressions") or ())
        own = labels(owner)
        for label in term.get("matchLabelKeys") or ():
            if label in own:
                expressions.append({"key": label, "operator": "In", "values": [own[label]]})
        for label in term.get("mismatchLabelKeys") or ():
            if label in own:
                expressions.append({"key": label, "operator": "NotIn", "values": [own[label]]})
        return {"matchLabels": dict(selector.get("matchLabels") or {}), "matchExpressions": expressions}

    def _term_matches(self, owner: Obj, term: Mapping[str, Any], other: Obj) -> bool:
        namespaces = self._term_namespaces(owner, term)
        if namespaces is not None and other["metadata"].get("namespace", "default") not in namespaces:
            return False
        return selector_matches(self._term_selector(owner, term), labels(other))

    def _anti_affinity(self, pod: Obj, node: Obj) -> None:
        """The pod's required anti-affinity, and that of the pods already there, at its moment."""
        name = node["metadata"]["name"]
        node_labels = labels(node)
        for other, other_node in self._placed():
            if other_node is None:
                continue
            for term in _required(pod, "podAntiAffinity"):
                topology = term["topologyKey"]
                same = topology in node_labels and labels(other_node).get(topology) == node_labels[topology]
                if same and self._term_matches(pod, term, other):
                    detail = f"anti-affinity: {key(other)} in its {topology}"
                    self._fail(pod, name, "InterPodAffinity", detail)
            for term in _required(other, "podAntiAffinity"):
                topology = term["topologyKey"]
                same = topology in node_labels and labels(other_node).get(topology) == node_labels[topology]
                if same and self._term_matches(other, term, pod):
                    detail = f"existing pod {key(other)}'s anti-affinity"
                    self._fail(pod, name, "InterPodAffinity", detail)

    def _placed(self) -> list[tuple[Obj, Obj | None]]:
        return [(b.pod, self.cluster.node_by_name.get(b.node)) for b in self.bound.values()]

    # -- the final placement: required pod affinity and topology spread -------------------------------
    def final(self) -> list[Violation]:
        """The order-dependent rules on the pods bound at the end (see the module doc)."""
        placed = [(p, n) for p, n in self._placed() if n is not None]
        self._refuse_deleted_counted(placed)
        for pod, node in placed:
            self._affinity(pod, node, placed)
            self._spread(pod, node, placed)
        return self.violations

    def _refuse_deleted_counted(self, placed: list[tuple[Obj, Obj]]) -> None:
        for gone in self.deleted:
            for pod, _ in placed:
                for term in _required(pod, "podAffinity"):
                    if self._term_matches(pod, term, gone):
                        raise Unjudgeable(f"{key(gone)} was deleted, and {key(pod)}'s pod affinity counts it")
                for c in _hard_spread(pod):
                    if self._counts_for_spread(pod, c, gone):
                        raise Unjudgeable(
                            f"{key(gone)} was deleted, and {key(pod)}'s topology spread counts it"
                        )

    def _affinity(self, pod: Obj, node: Obj, placed: list[tuple[Obj, Obj]]) -> None:
        name = node["metadata"]["name"]
        node_labels = labels(node)
        for term in _required(pod, "podAffinity"):
            topology = term["topologyKey"]
            if topology not in node_labels:
                self._fail(pod, name, "InterPodAffinity", f"node lacks topology label {topology}")
                continue
            others = [
                (o, labels(n)[topology])
                for o, n in placed
                if key(o) != key(pod) and topology in labels(n) and self._term_matches(pod, term, o)
            ]
            if any(domain == node_labels[topology] for _, domain in others):
                continue
            if others or not self._term_matches(pod, term, pod):
                self._fail(
                    pod, name, "InterPodAffinity", f"no pod its affinity term matches in its {topology}"
                )
                continue
            # Alone: the first pod of a self-affine group, as long as no other pod matches its term.
        # A self-affine group whose term no outsider matches is in one domain (its first pod's).
        for term in _required(pod, "podAffinity"):
            topology = term["topologyKey"]
            if topology not in node_labels or not self._term_matches(pod, term, pod):
                continue
            matching = [
                (o, n) for o, n in placed if topology in labels(n) and self._term_matches(pod, term, o)
            ]
            carriers = all(
                any(self._same_term(t, term) for t in _required(o, "podAffinity")) for o, _ in matching
            )
            domains = {labels(n)[topology] for _, n in matching}
            if carriers and len(domains) > 1:
                detail = f"its self-affine group is split over {topology} {sorted(domains)}"
                self._fail(pod, name, "InterPodAffinity", detail)

    @staticmethod
    def _same_term(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        return dict(a) == dict(b)

    def _counts_for_spread(self, pod: Obj, c: Mapping[str, Any], other: Obj) -> bool:
        selector = self._term_selector(
            pod, {"labelSelector": c.get("labelSelector"), "matchLabelKeys": c.get("matchLabelKeys")}
        )
        return other["metadata"].get("namespace", "default") == pod["metadata"].get(
            "namespace", "default"
        ) and selector_matches(selector, labels(other))

    def _spread(self, pod: Obj, node: Obj, placed: list[tuple[Obj, Obj]]) -> None:
        name = node["metadata"]["name"]
        constraints = _hard_spread(pod)
        keys = [c["topologyKey"] for c in constraints]
        for c in constraints:
            topology = c["topologyKey"]
            if topology not in labels(node):
                self._fail(pod, name, "PodTopologySpread", f"node lacks topology label {topology}")
                continue
            eligible: dict[str, str] = {}  # node name -> its domain
            for candidate in self.cluster.nodes:
                candidate_labels = labels(candidate)
                if not all(k in candidate_labels for k in keys):
                    continue
                if c.get("nodeAffinityPolicy", "Honor") == "Honor" and not node_affinity_matches(
                    pod, candidate
                ):
                    continue
                if c.get("nodeTaintsPolicy", "Ignore") == "Honor" and untolerated(pod, candidate):
                    continue
                eligible[candidate["metadata"]["name"]] = candidate_labels[topology]
            counts = dict.fromkeys(eligible.values(), 0)
            for other, other_node in placed:
                domain = eligible.get(other_node["metadata"]["name"])
                terminating = bool(other["metadata"].get("deletionTimestamp"))
                if domain is not None and not terminating and self._counts_for_spread(pod, c, other):
                    counts[domain] += 1
            if not counts:
                continue
            if any(
                self._counts_for_spread(pod, c, other)
                and not any(self._same_term(x, c) for x in _hard_spread(other))
                for other, _ in placed
            ):
                raise Unjudgeable(f"{key(pod)}'s topology spread counts pods without the same constraint")
            minimum = 0 if len(counts) < int(c.get("minDomains") or 1) else min(counts.values())
            here = counts.get(labels(node)[topology], 0)
            if here - minimum > int(c["maxSkew"]):
                held = {d: n for d, n in sorted(counts.items()) if n}
                detail = (
                    f"{topology} skew {here - minimum} > maxSkew {c['maxSkew']} (minimum {minimum}, {held})"
                )
                self._fail(pod, name, "PodTopologySpread", detail)

    # -- volumes -------------------------------------------------------------------------------------
    def _volumes(self, pod: Obj, node: Obj) -> None:
        name = node["metadata"]["name"]
        namespace = pod["metadata"].get("namespace", "default")
        csi: dict[str, set[str]] = {}
        for claim_name in _claim_names(pod):
            pvc = self._pvcs.get((namespace, claim_name))
            if pvc is None:
                self._fail(pod, name, "VolumeBinding", f'persistentvolumeclaim "{claim_name}" not found')
                continue
            pv = self._pvs.get(spec(pvc).get("volumeName") or "")
            if pv is None or (pvc.get("status") or {}).get("phase") != "Bound":
                self._fail(pod, name, "VolumeBinding", f"persistentvolumeclaim {claim_name} is not bound")
                continue
            required = ((spec(pv).get("nodeAffinity") or {}).get("required")) or None
            if required is not None:
                fake = {
                    "spec": {
                        "affinity": {
                            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
                        }
                    }
                }
                if not node_affinity_matches(fake, node):
                    self._fail(pod, name, "VolumeBinding", f"PV {pv['metadata']['name']}'s node affinity")
            for zone_label in (*ZONE_LABELS, *REGION_LABELS):
                wanted = labels(pv).get(zone_label)
                if wanted is not None and labels(node).get(zone_label) not in set(wanted.split("__")):
                    self._fail(
                        pod, name, "VolumeZone", f"PV {pv['metadata']['name']} is in {zone_label}={wanted}"
                    )
            if "ReadWriteOncePod" in (spec(pvc).get("accessModes") or ()):
                for other in self.bound.values():
                    if other.pod["metadata"].get("namespace") == namespace and claim_name in _claim_names(
                        other.pod
                    ):
                        self._fail(
                            pod,
                            name,
                            "VolumeRestrictions",
                            f"ReadWriteOncePod {claim_name} used by {key(other.pod)}",
                        )
            source = spec(pv).get("csi")
            if source:
                csi.setdefault(source["driver"], set()).add(source["volumeHandle"])
        if csi:
            self._volume_limits(pod, name, csi)

    def _volume_limits(self, pod: Obj, node: str, mine: dict[str, set[str]]) -> None:
        drivers = {d["name"]: d for d in spec(self._csinodes.get(node) or {}).get("drivers") or ()}
        for driver, handles in mine.items():
            limit = ((drivers.get(driver) or {}).get("allocatable") or {}).get("count")
            if limit is None:
                continue
            used = set(handles)
            for other in self.on_node(node):
                namespace = other["metadata"].get("namespace", "default")
                for claim_name in _claim_names(other):
                    pvc = self._pvcs.get((namespace, claim_name))
                    pv = self._pvs.get(spec(pvc or {}).get("volumeName") or "")
                    source = spec(pv or {}).get("csi")
                    if source and source["driver"] == driver:
                        used.add(source["volumeHandle"])
            if len(used) > int(limit):
                self._fail(pod, node, "NodeVolumeLimits", f"{len(used)} {driver} volumes > {limit}")

    def _claims_rule(self, pod: Obj, node: str) -> None:
        namespace = pod["metadata"].get("namespace", "default")
        uid = pod["metadata"].get("uid")
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        for entry in spec(pod).get("resourceClaims") or ():
            claim_name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
            claim = self._claims.get((namespace, claim_name or ""))
            status = (claim or {}).get("status") or {}
            reserved = {r.get("uid") for r in status.get("reservedFor") or ()}
            if claim is None or not status.get("allocation") or uid not in reserved:
                self._fail(
                    pod, node, "DynamicResources", f"resource claim {entry.get('name')} not allocated for it"
                )


def _required(pod: Obj, kind: str) -> list[Mapping[str, Any]]:
    """The pod's required ``podAffinity`` or ``podAntiAffinity`` terms."""
    affinity = spec(pod).get("affinity") or {}
    return list(((affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or ())


def _hard_spread(pod: Obj) -> list[Mapping[str, Any]]:
    return [
        c
        for c in spec(pod).get("topologySpreadConstraints") or ()
        if c.get("whenUnsatisfiable") == "DoNotSchedule"
    ]


def _claim_names(pod: Obj) -> list[str]:
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in spec(pod).get("volumes") or ()
        if v.get("persistentVolumeClaim")
    ]


def check(cluster: Cluster, history: Iterable[tuple[str, Obj]]) -> tuple[list[Violation], int]:
    """Every violation of the binds in ``history`` (watch events ``(type, pod)`` in order), and how
    many binds were checked."""
    checker = Checker(cluster)
    checker.replay(history)
    return checker.final(), checker.binds
