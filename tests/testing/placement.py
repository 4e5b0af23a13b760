"""Harness for the placement rules' ported table tests: kube-scheduler's test wrappers
(``pkg/scheduler/testing/wrappers.go``: ``st.MakePod()``, ``st.MakeNode()``, ``MakeLabelSelector``) as
builders of API objects, and one plugin's verdict per node or score per node on a cluster of those
objects, the way kube's tests call ``PreFilter``/``Filter`` and ``PreScore``/``Score``/``NormalizeScore``
on a snapshot.
"""

from __future__ import annotations

import copy
import enum
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import FilterPlugin, PreFilterPlugin, PreScorePlugin, ScorePlugin
from gpuq_k8s.scheduler.framework.status import Code
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

_names = itertools.count()


class Kind(enum.Enum):
    """kube's ``st.PodAffinityKind``."""

    REQUIRED = "required"
    PREFERRED = "preferred"
    REQUIRED_PREFERRED = "both"


REQUIRED, PREFERRED, BOTH = Kind.REQUIRED, Kind.PREFERRED, Kind.REQUIRED_PREFERRED


def selector(
    *expressions: tuple[str, str, Sequence[str]], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``MakeLabelSelector()``: ``selector(("foo", "In", ["a"]), labels={"x": "y"})``."""
    out: dict[str, Any] = {}
    if labels is not None:
        out["matchLabels"] = dict(labels)
    if expressions:
        out["matchExpressions"] = [
            {"key": k, "operator": op, **({"values": list(v)} if v else {})} for k, op, v in expressions
        ]
    return out


def exists(key: str) -> dict[str, Any]:
    return selector((key, "Exists", ()))


def not_exists(key: str) -> dict[str, Any]:
    return selector((key, "DoesNotExist", ()))


def in_(key: str, values: Sequence[str]) -> dict[str, Any]:
    return selector((key, "In", values))


def not_in(key: str, values: Sequence[str]) -> dict[str, Any]:
    return selector((key, "NotIn", values))


class KPod:
    """``st.MakePod()``: a pod object; a pod without a name gets a unique one (kube's tests leave most
    unnamed, gpuq keys pods by namespace/name). The namespace "" is kube's tests' default one."""

    def __init__(self, name: str = "", namespace: str = "") -> None:
        self.obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name or f"pod-{next(_names)}", "namespace": namespace or "default"},
            "spec": {"schedulerName": "gpuq-scheduler", "containers": [{"name": "c"}]},
        }

    @property
    def _meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = self.obj["metadata"]
        return meta

    @property
    def _spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.obj["spec"]
        return spec

    def name(self, name: str) -> Self:
        self._meta["name"] = name
        return self

    def namespace(self, namespace: str) -> Self:
        self._meta["namespace"] = namespace or "default"
        return self

    def label(self, key: str, value: str) -> Self:
        self._meta.setdefault("labels", {})[key] = value
        return self

    def labels(self, labels: Mapping[str, str]) -> Self:
        for key, value in labels.items():
            self.label(key, value)
        return self

    def node(self, name: str) -> Self:
        self._spec["nodeName"] = name
        return self

    def uid(self, uid: str) -> Self:
        self._meta["uid"] = uid
        return self

    def terminating(self) -> Self:
        self._meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return self

    def node_selector(self, labels: Mapping[str, str]) -> Self:
        self._spec["nodeSelector"] = dict(labels)
        return self

    def node_affinity_in(self, key: str, values: Sequence[str]) -> Self:
        affinity = self._spec.setdefault("affinity", {})
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
                ]
            }
        }
        return self

    def node_affinity_not_in(self, key: str, values: Sequence[str]) -> Self:
        affinity = self._spec.setdefault("affinity", {})
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "NotIn", "values": list(values)}]}
                ]
            }
        }
        return self

    def toleration(self, key: str) -> Self:
        """``st.Toleration(key)``: tolerates ``key`` with any value and effect."""
        self._spec.setdefault("tolerations", []).append({"key": key, "operator": "Exists"})
        return self

    def owner(self, name: str, kind: str, api_version: str = "apps/v1") -> Self:
        self._meta["ownerReferences"] = [
            {"apiVersion": api_version, "kind": kind, "name": name, "controller": True}
        ]
        return self

    def _term(self, section: str, topology_key: str, labels: Any, kind: Kind, **extra: Any) -> Self:
        term: dict[str, Any] = {"topologyKey": topology_key, **extra}
        if labels is not None:
            term["labelSelector"] = labels
        target = self._spec.setdefault("affinity", {}).setdefault(section, {})
        if kind in (REQUIRED, BOTH):
            target.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(
                copy.deepcopy(term)
            )
        if kind in (PREFERRED, BOTH):
            target.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
                {"weight": 1, "podAffinityTerm": copy.deepcopy(term)}
            )
        return self

    def pod_affinity(self, topology_key: str, labels: Any, kind: Kind, **extra: Any) -> Self:
        return self._term("podAffinity", topology_key, labels, kind, **extra)

    def pod_anti_affinity(self, topology_key: str, labels: Any, kind: Kind, **extra: Any) -> Self:
        return self._term("podAntiAffinity", topology_key, labels, kind, **extra)

    def weighted(self, section: str, weight: int, term: Mapping[str, Any]) -> Self:
        """A preferred term of any weight (``podAffinity`` or ``podAntiAffinity``)."""
        target = self._spec.setdefault("affinity", {}).setdefault(section, {})
        target.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
            {"weight": weight, "podAffinityTerm": dict(term)}
        )
        return self

    def required(self, section: str, term: Mapping[str, Any]) -> Self:
        target = self._spec.setdefault("affinity", {}).setdefault(section, {})
        target.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(dict(term))
        return self

    def spread(
        self,
        max_skew: int,
        key: str,
        mode: str,
        labels: Any,
        *,
        min_domains: int | None = None,
        node_affinity_policy: str | None = None,
        node_taints_policy: str | None = None,
        match_label_keys: Sequence[str] | None = None,
    ) -> Self:
        """``st.SpreadConstraint``."""
        constraint: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": mode}
        if labels is not None:
            constraint["labelSelector"] = labels
        for name, value in (
            ("minDomains", min_domains),
            ("nodeAffinityPolicy", node_affinity_policy),
            ("nodeTaintsPolicy", node_taints_policy),
            ("matchLabelKeys", list(match_label_keys) if match_label_keys is not None else None),
        ):
            if value is not None:
                constraint[name] = value
        self._spec.setdefault("topologySpreadConstraints", []).append(constraint)
        return self

    def info(self) -> PodInfo:
        return PodInfo.from_dict(self.obj)


class KNode:
    """``st.MakeNode()``."""

    def __init__(self, name: str) -> None:
        self.obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {}},
            "spec": {},
            "status": {"allocatable": {"cpu": "100", "memory": "100Gi", "pods": "1000"}},
        }

    def label(self, key: str, value: str) -> Self:
        self.obj["metadata"]["labels"][key] = value
        return self

    def labels(self, labels: Mapping[str, str]) -> Self:
        self.obj["metadata"]["labels"].update(labels)
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> Self:
        self.obj["spec"].setdefault("taints", []).append({"key": key, "value": value, "effect": effect})
        return self

    def info(self) -> NodeInfo:
        return NodeInfo.from_dict(self.obj)


def namespace(name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}}


# kube's interpodaffinity tests' namespaces (scoring_test.go ``namespaces``).
TEAM_NAMESPACES = (
    namespace("subteam1.team1", {"team": "team1"}),
    namespace("subteam2.team1", {"team": "team1"}),
    namespace("subteam1.team2", {"team": "team2"}),
    namespace("subteam2.team2", {"team": "team2"}),
)


def cluster(
    nodes: Iterable[KNode],
    pods: Iterable[KPod] = (),
    objects: Iterable[Mapping[str, Any]] = (),
    *,
    nodeorder: Mapping[str, Any] | None = None,
) -> Scheduler:
    """A scheduler (``predicates`` and ``nodeorder`` with only the placement scorers weighted, 1 each
    unless ``nodeorder`` says otherwise) holding ``objects``, ``nodes`` and the bound ``pods``."""
    weights = {
        "leastrequested.weight": 0,
        "balancedresource.weight": 0,
        "nodeaffinity.weight": 0,
        "tainttoleration.weight": 0,
        "podaffinity.weight": 1,
        "podtopologyspread.weight": 1,
        **(nodeorder or {}),
    }
    config = config_text("priority, gang", ["predicates", "nodeorder"], arguments={"nodeorder": weights})
    scheduler, _ = make_scheduler(config=config)
    for obj in objects:
        scheduler.put_object(obj)
    for node in nodes:
        scheduler.set_node(node.info())
    for pod in pods:
        scheduler.add_pod(pod.info())
    return scheduler


@dataclass(frozen=True, slots=True)
class Verdict:
    """One node's Filter status: ``code`` None passes; else the code and the reason."""

    code: Code | None
    reason: str = ""


PASS = Verdict(None)


def unschedulable(reason: str) -> Verdict:
    return Verdict(Code.UNSCHEDULABLE, reason)


def unresolvable(reason: str) -> Verdict:
    return Verdict(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason)


SKIP = "skip"


def _plugin(scheduler: Scheduler, kind: type[Any]) -> Any:
    return next(p for p in scheduler.framework.plugins if type(p) is kind)


def filter_verdicts(
    scheduler: Scheduler, kind: type[PreFilterPlugin], pod: KPod
) -> tuple[str, dict[str, Verdict]]:
    """The plugin's PreFilter outcome (``"success"``, :data:`SKIP`, or an input error's message) and
    its Filter verdict on every node (every node passes after a Skip, as kube's runtime skips it)."""
    plugin = _plugin(scheduler, kind)
    assert isinstance(plugin, FilterPlugin) and isinstance(plugin, PreFilterPlugin)
    info = pod.info()
    state = CycleState()
    cluster_state = scheduler.cluster
    names = {row: cluster_state.names[row] for row in cluster_state.live_rows()}
    try:
        status = plugin.pre_filter(state, info)
    except InvalidValue as err:
        return str(err), {}
    if status.is_skip:
        return SKIP, dict.fromkeys(names.values(), PASS)
    result = plugin.filter(state, info)
    verdicts: dict[str, Verdict] = {}
    reasons = result.reasons()
    unresolvable_rows = result.unresolvable
    for row, name in names.items():
        if result.passed[row]:
            verdicts[name] = PASS
            continue
        reason = next(message for mask, message in reasons if mask[row])
        hard = unresolvable_rows is not None and bool(unresolvable_rows[row])
        verdicts[name] = Verdict(Code.UNSCHEDULABLE_AND_UNRESOLVABLE if hard else Code.UNSCHEDULABLE, reason)
    return "success", verdicts


def scores(
    scheduler: Scheduler, kind: type[PreScorePlugin], pod: KPod, candidates: Iterable[str] | None = None
) -> dict[str, int]:
    """The plugin's normalised score (weight 1) of each candidate node (default: every node), as kube's
    tests read ``NormalizeScore``'s output; a PreScore Skip scores 0 everywhere."""
    plugin = _plugin(scheduler, kind)
    assert isinstance(plugin, ScorePlugin) and isinstance(plugin, PreScorePlugin)
    info = pod.info()
    cluster_state = scheduler.cluster
    names = (
        [cluster_state.names[row] for row in cluster_state.live_rows()]
        if candidates is None
        else list(candidates)
    )
    feasible = np.zeros(cluster_state.n, dtype=np.bool_)
    for name in names:
        feasible[cluster_state.row_of[name]] = True
    state = CycleState()
    if plugin.pre_score(state, info, feasible).is_skip:
        return dict.fromkeys(names, 0)
    values = plugin.score(state, info, feasible)
    weight = float(getattr(plugin, "weight", 1))
    return {name: int(values[cluster_state.row_of[name]] / weight) for name in names}
