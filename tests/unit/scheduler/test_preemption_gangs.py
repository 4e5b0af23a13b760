"""Preemption leaves every gang at least minMember running (Volcano's gang preemptable rule).

Found by fuzzing ``gpuq simulate``: one member of a running 2-member PodGroup was evicted for a
higher-priority pod, leaving the gang below minMember with its other member still bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq_k8s.common.model.elastic.preemption import spare_gang_members
from tests.testing.builders import MakePod
from tests.testing.simulate_text import pods_by_name, simulate

HEAD = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "%d", memory: 8Gi, pods: "110"}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: g, namespace: a}
spec: {minMember: 2}
---
apiVersion: v1
kind: Pod
metadata: {name: hi, namespace: b}
spec:
  priorityClassName: high
  schedulerName: gpuq-scheduler
  containers: [{name: c, resources: {requests: {cpu: "2"}}}]
"""

MEMBER = """
---
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: a
  annotations: {scheduling.k8s.io/group-name: g}
  creationTimestamp: "2024-01-01T00:00:0%dZ"
spec:
  nodeName: n1
  schedulerName: gpuq-scheduler
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""


def test_a_gang_at_its_minimum_is_not_preempted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = pods_by_name(simulate(tmp_path, capsys, HEAD % 3 + MEMBER % ("m1", 1) + MEMBER % ("m2", 2)))
    assert pods["m1"]["phase"] == pods["m2"]["phase"] == "Bound"
    assert pods["hi"]["phase"] == "Pending" and "preemption" in pods["hi"]["reason"]


def test_a_gang_above_its_minimum_gives_up_only_its_spare_members(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """3 members running (1 cpu each) with minMember 2 on a 4-cpu node: hi needs one more cpu, and the
    gang can spare one member, its least important (the newest)."""
    text = HEAD % 4 + MEMBER % ("m1", 1) + MEMBER % ("m2", 2) + MEMBER % ("m3", 3)
    pods = pods_by_name(simulate(tmp_path, capsys, text))
    assert [pods[m]["phase"] for m in ("m1", "m2", "m3")] == ["Bound", "Bound", "Preempted"]
    assert (pods["hi"]["phase"], pods["hi"]["node"]) == ("Bound", "n1")


def test_spare_gang_members_keeps_the_most_important_and_leaves_other_pods_alone() -> None:
    low_old = MakePod("low-old", "a").node("n").priority(0).created("2024-01-01T00:00:01Z").info()
    low_new = MakePod("low-new", "a").node("n").priority(0).created("2024-01-01T00:00:02Z").info()
    high = MakePod("high", "a").node("n").priority(5).created("2024-01-01T00:00:00Z").info()
    loner = MakePod("loner", "a").node("n").priority(9).created("2024-01-01T00:00:00Z").info()
    gangs = {"a/low-old": ("a/g", 1), "a/low-new": ("a/g", 1), "a/high": ("a/g", 1)}
    allowed = spare_gang_members([high, low_old, loner, low_new], lambda p: gangs.get(p.key))
    assert [p.name for p in allowed] == ["low-new", "loner"]  # one spare: the least important member
    assert spare_gang_members([high, low_old], lambda p: ("a/g", 0)) == []
