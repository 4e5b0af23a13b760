"""A node where the preemptor already has room and quota is no preemption candidate.

Found by review: a CPU pod rejected on a GPU node by crossquota (a filter that evicting pods for room
or ElasticQuota does not change) got a "successful" preemption there with no victims; the cycle then
retried it at once, forever (``gpuq simulate`` died in the queue's backoff arithmetic).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq_k8s.scheduler.queue import SchedulingQueue
from tests.testing.simulate_text import simulate

_GPU_NODE = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1, annotations: {volcano.sh/crossquota-cpu: "2"}}
status: {allocatable: {cpu: "32", memory: 128Gi, nvidia.com/gpu: "4", pods: "110"}}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: qa, namespace: a}
spec: {min: {cpu: "8"}, max: {cpu: "8"}}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: qb, namespace: b}
spec: {min: {cpu: "0"}, max: {cpu: "8"}}
---
apiVersion: v1
kind: Pod
metadata: {name: w, namespace: b, creationTimestamp: "2024-01-01T00:00:01Z"}
spec:
  schedulerName: gpuq-scheduler
  nodeName: gpu-1
  containers: [{name: c, resources: {requests: {cpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: a, creationTimestamp: "2024-01-01T00:00:03Z"}
spec:
  schedulerName: gpuq-scheduler
  containers: [{name: c, resources: {requests: {cpu: "2"}}}]
"""

_CPU_NODE_WITH_BORROWER = """
---
apiVersion: v1
kind: Node
metadata: {name: cpu-1}
status: {allocatable: {cpu: "2", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: v, namespace: b, creationTimestamp: "2024-01-01T00:00:02Z"}
spec:
  schedulerName: gpuq-scheduler
  nodeName: cpu-1
  containers: [{name: c, resources: {requests: {cpu: "2"}}}]
"""


def test_no_victims_needed_is_no_preemption_and_the_pod_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = simulate(tmp_path, capsys, _GPU_NODE)
    pods = {p["name"]: p for p in out["pods"]}
    assert pods["p"]["phase"] == "Pending"
    assert pods["w"]["phase"] == "Bound"  # nobody evicted
    reason = pods["p"]["reason"]
    assert reason.startswith("0/1 nodes are available: 1 cpu quota exceeded: required=2 used=2 quota=2.")
    assert "node gpu-1 has room and quota for Pod/a/p already" in reason
    failures = [e for e in out["events"] if e["object"] == "Pod/a/p" and e["reason"] == "FailedScheduling"]
    assert failures and "nominated" not in failures[-1]["message"]


def test_a_node_where_victims_make_room_is_still_chosen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = simulate(tmp_path, capsys, _GPU_NODE + _CPU_NODE_WITH_BORROWER)
    pods = {p["name"]: p for p in out["pods"]}
    assert (pods["p"]["phase"], pods["p"]["node"]) == ("Bound", "cpu-1")
    assert pods["v"]["phase"] == "Preempted"
    assert pods["w"]["phase"] == "Bound"


def test_backoff_of_a_pod_retried_very_often_stays_at_the_maximum() -> None:
    queue = SchedulingQueue(lambda pod: (pod.key,), lambda: 0.0)
    assert queue.backoff_duration(5000) == 10.0
