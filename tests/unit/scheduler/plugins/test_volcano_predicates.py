"""predicates (scheduler/plugins/predicates.py): scenarios ported from Volcano's unit tests, run
through ``gpuq simulate``, and hand-computed cases for the checks Volcano's tests do not exercise
through a session (taints, required node affinity, resource fit).

Ported:
- ``pkg/scheduler/plugins/predicates/predicates_test.go`` TestNodeNum "pod-predicate": the pod count.
- ``pkg/scheduler/actions/allocate/allocate_test.go`` TestAllocate "prepredicate failed: node selector
  does not match": the node selector.

Not ported, because gpuq lacks the feature: predicates_test.go TestEventHandler "pod-deallocate" and
TestPodAntiAffinity "pod-anti-affinity" need inter-pod (anti-)affinity, which gpuq's predicates do not
implement; TestSetUpDynamicResourcesArgs_* and TestInitPlugin configure kube-scheduler's DRA, volume
binding and plugin set, which gpuq does not have; proportional_test.go, sra_test.go and the
hintprovider tests need GPU sharing, proportional CPU/memory per GPU and NUMA hints; guardrail_test.go
and helper_test.go test Go helpers with no scheduling outcome."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.testing.builders import MakeNode, MakePod, MakePodGroup, MakePriorityClass, MakeQueue
from tests.testing.designs import ALLOCATE_CONF
from tests.testing.volcano_scenarios import bound, phases, pod, simulate, volcano_node, volcano_pod

PREDICATES_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: predicates
    enablePredicate: true
"""


def test_predicates_test_go_node_num(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TestNodeNum "pod-predicate": node1 (4 cpu, 4k memory, 2 pods, label selector=worker); pods
    worker-1 (nodeSelector selector=worker) and worker-2 of pg1 (minMember 2, priority p2) and worker-3
    of pg2 (minMember 1, priority p1), none with requests; actions allocate and backfill, predicates
    alone. Expected binds: worker-1 and worker-2 on node1, exactly two (the node's pod count)."""
    objects: list[dict[str, Any]] = [
        MakePriorityClass("p1", 1).obj(),
        MakePriorityClass("p2", 2).obj(),
        MakeQueue("q1").weight(1).obj(),
        MakePodGroup("pg1", "ns1")
        .queue("q1")
        .min_member(2)
        .phase("Inqueue")
        .spec(priorityClassName="p2")
        .obj(),
        MakePodGroup("pg2", "ns1")
        .queue("q1")
        .min_member(1)
        .phase("Inqueue")
        .spec(priorityClassName="p1")
        .obj(),
        MakePod("worker-1", "ns1")
        .group("pg1")
        .label("role", "worker")
        .node_selector({"selector": "worker"})
        .obj(),
        MakePod("worker-2", "ns1").group("pg1").label("role", "worker").obj(),
        MakePod("worker-3", "ns1").group("pg2").label("role", "worker").obj(),
        MakeNode("node1").alloc(cpu="4", memory="4k", pods="2").label("selector", "worker").obj(),
    ]
    out = simulate(tmp_path, capsys, objects, PREDICATES_CONF)
    assert bound(out) == {"ns1/worker-1": "node1", "ns1/worker-2": "node1"}
    assert pod(out, "worker-3")["phase"] == "Pending"
    assert "pods" in str(pod(out, "worker-3")["nodes"]["node1"]["filtered"]).lower()


def test_allocate_test_go_node_selector_does_not_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TestAllocate "prepredicate failed: node selector does not match" (its tier: gang, drf,
    proportion, predicates, nodeorder): pg1 (minMember 1) has p1 (nodeSelector nodeRole=master) and p2
    (nodeRole=worker); the one node n1 is a worker. Expected binds: c1/p2 on n1 only."""
    objects: list[dict[str, Any]] = [
        MakeQueue("c1").weight(1).obj(),
        MakePodGroup("pg1", "c1").queue("c1").min_member(1).phase("Inqueue").obj(),
    ]
    for name, role in (("p1", "master"), ("p2", "worker")):
        made = volcano_pod("c1", name, "1", "1G").group("pg1").labels({"volcano.sh/task-spec": role})
        objects.append(made.node_selector({"nodeRole": role}).obj())
    objects.append(volcano_node("n1", "2", "4Gi").label("nodeRole", "worker").obj())
    out = simulate(tmp_path, capsys, objects, ALLOCATE_CONF)
    assert bound(out) == {"c1/p2": "n1"}
    assert "affinity/selector" in str(pod(out, "p1")["nodes"]["n1"]["filtered"])


def test_taints_and_tolerations_hand_computed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No Volcano test runs taints through a session; by hand: n1 (the roomier node) is tainted
    gpu=true:NoSchedule. p1 tolerates it and goes anywhere; p2 does not and can only go to n2; p3 does
    not and asks more than n2 has left, so it stays pending."""
    toleration = [{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    objects = [
        volcano_node("n1", "8", "8G").taint("gpu", value="true").obj(),
        volcano_node("n2", "2", "2G").obj(),
        volcano_pod("c1", "p1", "4", "4G").spec(tolerations=toleration).obj(),
        volcano_pod("c1", "p2", "1", "1G").obj(),
        volcano_pod("c1", "p3", "2", "2G").obj(),
    ]
    out = simulate(tmp_path, capsys, objects, PREDICATES_CONF)
    assert bound(out) == {"c1/p1": "n1", "c1/p2": "n2"}
    assert phases(out)["c1/p3"] == "Pending"
    assert "taint" in str(pod(out, "p3")["nodes"]["n1"]["filtered"]).lower()


def test_required_node_affinity_and_resource_fit_hand_computed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """By hand: p1 requires zone In [a] (only n1, 2 cpu); p2 (2 cpu) requires zone NotIn [b], so also
    only n1, which p1 already filled: p2 is pending for want of cpu on n1 and for the affinity on
    n2."""
    affinity = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    not_b = [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]

    def required(terms: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }

    objects = [
        volcano_node("n1", "2", "4G").label("zone", "a").obj(),
        volcano_node("n2", "8", "8G").label("zone", "b").obj(),
        volcano_pod("c1", "p1", "2", "1G").spec(affinity=required(affinity)).obj(),
        volcano_pod("c1", "p2", "2", "1G").spec(affinity=required(not_b)).obj(),
    ]
    out = simulate(tmp_path, capsys, objects, PREDICATES_CONF)
    assert bound(out) == {"c1/p1": "n1"}
    nodes = pod(out, "p2")["nodes"]
    assert "cpu" in str(nodes["n1"]["filtered"]).lower()
    assert "affinity" in str(nodes["n2"]["filtered"]).lower()
