"""Volcano's configuration names reach the placement rules (scheduler/plugins/members.py): ``predicates``'
``predicate.PodAffinityEnable`` and ``predicate.PodTopologySpreadEnable`` switch the filters,
``nodeorder``'s ``podaffinity.weight`` and ``podtopologyspread.weight`` the scorers (0: none built), and
the members are placed after their entry's plugin in kube-scheduler's default-profile order."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.plugins.image_locality import ImageLocality
from gpuq_k8s.scheduler.plugins.inter_pod_affinity import InterPodAffinity, InterPodAffinityScore
from gpuq_k8s.scheduler.plugins.pod_topology_spread import PodTopologySpread, PodTopologySpreadScore
from tests.testing.builders import MakeNode, MakePod
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

HOST = "kubernetes.io/hostname"
ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}
        ]
    }
}
# minDomains 3 over two nodes: the global minimum is 0, so a node takes at most one app=web pod.
SPREAD = [
    {
        "minDomains": 3,
        "maxSkew": 1,
        "topologyKey": HOST,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
]


def _scheduler(
    predicates: dict[str, Any] | None = None, nodeorder: dict[str, Any] | None = None
) -> Scheduler:
    arguments = {
        "predicates": predicates or {},
        **({"nodeorder": nodeorder} if nodeorder is not None else {}),
    }
    tier = ["predicates", "nodeorder"] if nodeorder is not None else ["predicates"]
    scheduler, _ = make_scheduler(config=config_text("priority, gang", tier, arguments=arguments))
    for name in ("n1", "n2"):
        scheduler.set_node(MakeNode(name).alloc(cpu="8", memory="8Gi", pods="10").label(HOST, name).info())
    return scheduler


def _nodes_of(scheduler: Scheduler, **spec: Any) -> list[str]:
    for i in range(2):
        scheduler.add_pod(MakePod(f"web-{i}", "ns").req(cpu="1").label("app", "web").spec(**spec).info())
    scheduler.add_pod(
        MakePod("first", "ns").req(cpu="1").label("app", "web").node("n1").phase("Running").info()
    )
    nodes = []
    while (attempt := scheduler.schedule_one()) is not None:
        nodes.append(attempt.node)
    return nodes


@pytest.mark.parametrize(
    ("switch", "spec", "kind"),
    [
        ("predicate.PodAffinityEnable", {"affinity": ANTI}, InterPodAffinity),
        ("predicate.PodTopologySpreadEnable", {"topologySpreadConstraints": SPREAD}, PodTopologySpread),
    ],
)
def test_the_predicates_switches_turn_the_filters_off(switch: str, spec: dict[str, Any], kind: type) -> None:
    on = _scheduler()
    assert any(isinstance(p, kind) for p in on.framework.filter_plugins)
    # With the filter: n1 holds an app=web pod, so the first goes to n2 and the second waits.
    assert _nodes_of(on, **spec) == ["n2", ""]
    off = _scheduler({switch: False})
    assert not any(isinstance(p, kind) for p in off.framework.plugins)
    assert "" not in _nodes_of(off, **spec)


def test_members_run_in_kube_schedulers_order_after_predicates() -> None:
    names = [p.name for p in _scheduler().framework.filter_plugins]
    start = names.index(plugin_names.PREDICATES)
    assert names.index(plugin_names.POD_TOPOLOGY_SPREAD) > start
    assert names.index(plugin_names.INTER_POD_AFFINITY) > names.index(plugin_names.POD_TOPOLOGY_SPREAD)


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        # Volcano's defaults
        ({}, {InterPodAffinityScore: 2, PodTopologySpreadScore: 2, ImageLocality: 1}),
        (
            {"podaffinity.weight": 5, "podtopologyspread.weight": 0, "imagelocality.weight": 0},
            {InterPodAffinityScore: 5},
        ),
        (
            {"podaffinity.weight": 0, "podtopologyspread.weight": 7},
            {PodTopologySpreadScore: 7, ImageLocality: 1},
        ),
    ],
)
def test_nodeorder_weights_build_the_scorers(weights: dict[str, Any], expected: dict[type, int]) -> None:
    scheduler = _scheduler(nodeorder=weights)
    built = {
        type(p): getattr(p, "weight", None) for p in scheduler.framework.score_plugins if hasattr(p, "weight")
    }
    assert built == expected
    for plugin in scheduler.framework.score_plugins:
        if isinstance(plugin, (InterPodAffinityScore, PodTopologySpreadScore)):
            assert plugin.config_name == plugin_names.NODEORDER
