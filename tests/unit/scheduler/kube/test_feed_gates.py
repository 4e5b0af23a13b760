"""A gated pod through the informer feed (scheduler/kube/feed.py): the update that removes its gates is
passed on and the pod is scheduled; until then ``gpuq_scheduler_pending_pods{queue="gated"}`` counts it
(scheduler/kube/quota_status.py, scheduler/metrics.py), with the pods held for a PodGroup."""

from __future__ import annotations

from prometheus_client import generate_latest

from gpuq_k8s.scheduler.kube.quota_status import QuotaStatus
from gpuq_k8s.scheduler.metrics import SchedulerMetrics
from gpuq_k8s.scheduler.queue import GATED
from tests.testing.builders import MakePodGroup
from tests.testing.feed import NODE, POD, add, make_feed, update

CONFIG = """\
actions: "enqueue, allocate"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
"""


def _gated_count(metrics: SchedulerMetrics) -> str:
    text = generate_latest(metrics.registry).decode()
    return next(
        line for line in text.splitlines() if line.startswith('gpuq_scheduler_pending_pods{queue="gated"}')
    )


def test_a_gated_pod_is_counted_and_scheduled_once_the_update_removes_its_gates() -> None:
    scheduler, backend, feed, _ = make_feed(CONFIG)
    metrics = SchedulerMetrics()
    metrics.watch(QuotaStatus.of(scheduler).snapshot)
    feed.apply(add(NODE.copy().name("n1").obj()))
    gated = POD.copy().name("p").uid("uid-p").scheduling_gates("example.com/wait")
    feed.apply(add(gated.obj()))
    # A pod held for its PodGroup's enqueue is gated too (kube-scheduler gates those by PreEnqueue).
    feed.apply(add(MakePodGroup("pg").min_member(2).resource_version("1").phase("Pending").obj()))
    feed.apply(add(POD.copy().name("m").uid("uid-m").group("pg").obj()))
    assert scheduler.schedule_one() is None
    assert _gated_count(metrics) == 'gpuq_scheduler_pending_pods{queue="gated"} 2.0'
    # A status-only update (a condition written) is not news; the gates' removal is.
    status_only = gated.copy().resource_version("2").obj()
    status_only["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    ]
    feed.apply(update(gated.obj(), status_only))
    queued = scheduler.queue.get("ns/p")
    assert queued is not None and queued.pool == GATED
    lifted = gated.copy().scheduling_gates().resource_version("3").obj()
    lifted["status"] = status_only["status"]
    feed.apply(update(status_only, lifted))
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.pod.name == "p" and attempt.node == "n1"
    assert backend.bindings["ns/p"] == "n1"
    assert _gated_count(metrics) == 'gpuq_scheduler_pending_pods{queue="gated"} 1.0'  # the held member
