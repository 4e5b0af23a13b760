"""A node where the preemptor already has room and quota is no preemption candidate; a rule that
evicting pods does resolve is resolved by preemption.

Found by review: a CPU pod rejected on a GPU node by crossquota got a "successful" preemption there
with no victims; the cycle then retried it at once, forever (``gpuq simulate`` died in the queue's
backoff arithmetic). Preemption now asks the real filters with the victims gone (design.md
"Preemption"): crossquota's rejection, caused by a CPU pod that may be evicted, is resolved by evicting
it; caused by one that may not, it leaves the pod waiting, with no nomination and no retry loop.
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


def test_a_filter_that_evicting_a_borrower_resolves_is_resolved_by_preempting_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``w`` (namespace b, over its min of 0) holds gpu-1's crossquota CPU: evicting it lets ``p`` pass
    crossquota there, which the filters run with ``w`` gone tell preemption."""
    out = simulate(tmp_path, capsys, _GPU_NODE)
    pods = {p["name"]: p for p in out["pods"]}
    assert (pods["p"]["phase"], pods["p"]["node"]) == ("Bound", "gpu-1")
    assert pods["w"]["phase"] == "Preempted"


def test_a_filter_no_eviction_resolves_leaves_the_pod_waiting_without_nomination(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``w`` within its namespace's min (no borrower, never a victim of a reclaiming preemptor),
    nothing may be evicted: ``p`` waits, ``w`` stays, and no nomination is made (the run ends)."""
    guarded = _GPU_NODE.replace(
        'spec: {min: {cpu: "0"}, max: {cpu: "8"}}', 'spec: {min: {cpu: "2"}, max: {cpu: "8"}}'
    )
    assert guarded != _GPU_NODE
    out = simulate(tmp_path, capsys, guarded)
    pods = {p["name"]: p for p in out["pods"]}
    assert pods["p"]["phase"] == "Pending"
    assert pods["w"]["phase"] == "Bound"  # nobody evicted
    reason = pods["p"]["reason"]
    assert reason.startswith("0/1 nodes are available: 1 cpu quota exceeded: required=2 used=2 quota=2.")
    assert "preemption: Pod/a/p: no eligible victims on any node (Borrowers)." in reason
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
