"""The informer -> scheduler feed (scheduler/kube/feed.py), the attempt result labels and the
metrics registry, against a real :class:`Scheduler` with the in-memory backend: no API, no mocks."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from prometheus_client import generate_latest

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.kube.informer import Informer, InformerSet
from gpuq_k8s.common.kube.metrics import gpuq_version
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.annotations import QUEUE_NAME
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.process.logs import JsonFormatter
from gpuq_k8s.scheduler.backend import Result
from gpuq_k8s.scheduler.cycle import Attempt, Scheduler
from gpuq_k8s.scheduler.flags import SchedulerOptions
from gpuq_k8s.scheduler.framework.status import Status
from gpuq_k8s.scheduler.kube.feed import Feed, object_update_matters, pod_update_matters
from gpuq_k8s.scheduler.kube.loop import attempt_result
from gpuq_k8s.scheduler.kube.quota_status import QuotaStatus
from gpuq_k8s.scheduler.metrics import SchedulerMetrics
from gpuq_k8s.scheduler.service import Service
from tests.testing.builders import MakeElasticQuota, MakePodDisruptionBudget, MakeQueue
from tests.testing.clock import FakeClock
from tests.testing.feed import CONFIG, NODE, POD, InformerCache, add, key, make_feed, update

QUOTA = MakeElasticQuota("q").resource_version("1")


def drain(scheduler: Scheduler) -> list[Attempt]:
    attempts = []
    while (attempt := scheduler.schedule_one()) is not None:
        attempts.append(attempt)
    return attempts


def test_bound_pods_count_before_pending_ones_are_tried() -> None:
    """Restart safety: however the informer delivered them, usage comes first (design.md "Data flow")."""
    scheduler, backend, feed, _ = make_feed()

    items = [
        POD.copy().name("pending").uid("uid-pending").req(cpu="2").obj(),
        POD.copy().name("running").uid("uid-running").req(cpu="3").node("n1").obj(),
    ]
    feed.ready = False
    for change in [add(NODE.copy().name("n1").obj()), *(add(p) for p in items)]:
        feed.handler(change)  # before the replay: ignored
    assert scheduler.cluster.node_count == 0
    informers = InformerSet([])
    informers.informers = {
        "Node": InformerCache({key(n): n for n in [NODE.copy().name("n1").obj()]}),  # type: ignore[dict-item]
        "Pod": InformerCache({key(p): p for p in items}),  # type: ignore[dict-item]
    }
    feed.replay(informers)
    assert feed.ready
    attempts = drain(scheduler)
    assert [a.pod.name for a in attempts] == ["pending"]
    assert attempts[0].node == ""  # 3 of 4 cpu are used by the running pod: 2 do not fit
    assert "running" not in backend.bindings


def test_a_pod_bound_to_a_node_not_yet_seen_counts_at_once_and_on_the_node_when_it_arrives() -> None:
    """Bound is bound (a pod of a node deleted before the scheduler listed counts on its quotas): it
    waits on a ghost row, which nothing is placed on and which the node takes over."""
    scheduler, _, feed, _ = make_feed()
    feed.apply(add(POD.copy().name("early").uid("uid-early").req(cpu="3").node("n1").obj()))
    assert scheduler.cluster.pods["ns/early"].node_name == "n1"
    assert "n1" not in scheduler.cluster.row_of and not scheduler.cluster.alive.any()
    feed.apply(add(NODE.copy().name("n1").obj()))
    row = scheduler.cluster.row_of["n1"]
    assert "ns/early" in scheduler.cluster.pods_on[row] and scheduler.cluster.alive[row]


def test_status_only_updates_do_not_requeue_a_pending_pod() -> None:
    """Our own PodScheduled write comes back as a MODIFIED event; it must not cause a retry."""
    scheduler, _, feed, _ = make_feed()
    feed.apply(add(NODE.copy().name("n1").alloc(cpu="1").obj()))
    old = POD.copy().name("p").uid("uid-p").req(cpu="2").obj()
    feed.apply(add(old))
    assert len(drain(scheduler)) == 1  # unschedulable, parked
    new = POD.copy().name("p").uid("uid-p").req(cpu="2").resource_version("2").obj()
    new["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
    feed.apply(update(old, new))
    assert drain(scheduler) == []
    # A real change (a label) is news: the pod is tried again.
    changed = POD.copy().name("p").uid("uid-p").req(cpu="2").resource_version("3").label("a", "b").obj()
    feed.apply(update(new, changed))
    assert [a.pod.name for a in drain(scheduler)] == ["p"]


def test_an_assumed_pod_is_not_requeued_by_a_stale_unbound_update() -> None:
    scheduler, backend, feed, _ = make_feed()
    feed.apply(add(NODE.copy().name("n1").obj()))
    first = POD.copy().name("p").uid("uid-p").obj()
    feed.apply(add(first))
    (attempt,) = drain(scheduler)
    assert attempt.node == "n1" and backend.bindings == {"ns/p": "n1"}
    feed.assume("ns/p")
    late = POD.copy().name("p").uid("uid-p").resource_version("2").label("changed", "before the bind").obj()
    feed.apply(update(first, late))
    assert drain(scheduler) == []
    assert scheduler.cluster.pods["ns/p"].node_name == "n1"
    # The watch confirms: no longer assumed.
    feed.apply(update(late, POD.copy().name("p").uid("uid-p").node("n1").resource_version("3").obj()))
    assert feed.assumed == set()


def test_an_assumed_pod_is_never_forgotten_by_time_only_by_the_watch() -> None:
    """Semantics 13: a bind the API accepted stays charged however long the watch lags; the quota's
    room is not handed out again. The watch's delete ends it."""
    scheduler, backend, feed, clock = make_feed()
    feed.apply(add(NODE.copy().name("n1").obj()))
    feed.apply(add(QUOTA.copy().min(cpu="1").max(cpu="1").obj()))
    first = POD.copy().name("p").uid("uid-p").obj()
    feed.apply(add(first))
    drain(scheduler)
    feed.assume("ns/p")
    clock.now += 24 * 3600.0  # a day later, the watch still silent
    feed.apply(add(POD.copy().name("q").uid("uid-q").obj()))
    (attempt,) = drain(scheduler)
    assert attempt.node == "" and "ElasticQuota" in attempt.message
    assert feed.assumed == {"ns/p"} and scheduler.cluster.pods["ns/p"].node_name == "n1"
    feed.apply(Change("delete", key(first), first))
    assert feed.assumed == set() and "ns/p" not in scheduler.cluster.pods
    clock.now += 60  # past q's backoff
    assert [a.node for a in drain(scheduler)] == ["n1"]
    assert backend.bindings == {"ns/p": "n1", "ns/q": "n1"}


def test_a_pod_recreated_under_the_same_name_is_a_new_pod() -> None:
    scheduler, _, feed, _ = make_feed()
    feed.apply(add(NODE.copy().name("n1").obj()))
    old = POD.copy().name("p").uid("a").node("n1").obj()
    feed.apply(add(old))
    assert scheduler.cluster.pods["ns/p"].uid == "a"
    new = POD.copy().name("p").uid("b").resource_version("9").obj()
    feed.apply(update(old, new))
    assert "ns/p" not in scheduler.cluster.pods
    assert [a.pod.uid for a in drain(scheduler)] == ["b"]


def test_deletes_release_usage_and_quota() -> None:
    scheduler, backend, feed, clock = make_feed()
    feed.apply(add(NODE.copy().name("n1").obj()))
    feed.apply(add(QUOTA.copy().min(cpu="1").max(cpu="1").obj()))
    bound = POD.copy().name("a").uid("uid-a").node("n1").obj()
    feed.apply(add(bound))
    feed.apply(add(POD.copy().name("b").uid("uid-b").obj()))
    (attempt,) = drain(scheduler)
    assert attempt.node == "" and "ElasticQuota" in attempt.message
    feed.apply(Change("delete", key(bound), bound))
    assert "ns/a" not in scheduler.cluster.pods
    clock.now += 60  # past b's backoff
    assert [a.node for a in drain(scheduler)] == ["n1"]
    assert backend.bindings == {"ns/b": "n1"}


def test_a_terminating_victim_holds_its_room_until_its_delete_arrives() -> None:
    """Issue 28 (design.md Semantics 18): a victim deleted with a grace period goes on counting on its
    node while it terminates (the DisruptionTarget condition, then its deletionTimestamp, arrive as
    updates); its preemptor is nominated, binds only once the victim's delete arrives, and is not
    preempted for twice meanwhile. The delete also ends the scheduler's record of the victim."""
    scheduler, backend, feed, clock = make_feed()
    backend.evict_result = Result.DONE  # accepted: the victim terminates, as in a cluster
    feed.apply(add(NODE.copy().name("n1").alloc(cpu="2").obj()))
    low = POD.copy().name("low").uid("uid-low").req(cpu="2").node("n1").obj()
    feed.apply(add(low))
    high = POD.copy().name("high").uid("uid-high").req(cpu="2").priority(100).obj()
    feed.apply(add(high))
    attempts = drain(scheduler)  # preempts "low"; the retry is parked: "low" still runs
    assert attempts[0].nominated == "n1" and all(a.node == "" for a in attempts)
    assert backend.evictions.keys() == {"ns/low"}
    assert "ns/low" in scheduler.preempted and "ns/low" in scheduler.cluster.pods
    assert backend.conditions["ns/high"].nominated_node == "n1"
    disrupted = {**low, "metadata": {**low["metadata"], "resourceVersion": "2"}}
    disrupted["status"] = {
        "phase": "Running",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
    }
    feed.apply(update(low, disrupted))
    deleting = {**disrupted, "metadata": {**disrupted["metadata"], "resourceVersion": "3"}}
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    feed.apply(update(disrupted, deleting))
    scheduler.queue.activate("ns/high")
    (retry,) = drain(scheduler)
    assert retry.node == "" and "not eligible to preempt again" in retry.message
    assert "ns/low" in scheduler.cluster.pods and backend.bindings == {}
    assert backend.evictions.keys() == {"ns/low"}  # preempted for once
    feed.apply(Change("delete", key(deleting), deleting))
    assert "ns/low" not in scheduler.preempted  # forgotten once really deleted: no leak
    clock.now += 30  # past its backoff: the delete moved it out of the unschedulable pool
    (bound,) = drain(scheduler)
    assert bound.node == "n1" and backend.bindings == {"ns/high": "n1"}
    assert scheduler.nominator.node_of("ns/high") == ""


P = POD.copy().name("p").uid("uid-p")


@pytest.mark.parametrize(
    ("old", "new", "matters"),
    [
        (P.obj(), P.copy().resource_version("2").obj(), False),
        (
            P.obj(),
            {**P.copy().resource_version("2").obj(), "status": {"phase": "Pending", "conditions": []}},
            False,
        ),
        (P.obj(), P.copy().req(cpu="2").obj(), True),
        (P.obj(), P.copy().annotation("a", "b").obj(), True),
    ],
)
def test_pod_update_matters(old: dict[str, Any], new: dict[str, Any], matters: bool) -> None:
    assert pod_update_matters(old, new) is matters


def test_object_update_matters() -> None:
    one_cpu = QUOTA.copy().min(cpu="1").max(cpu="1")
    quota = one_cpu.obj()
    assert not object_update_matters("ElasticQuota", quota, one_cpu.copy().used(cpu="1").obj())
    assert object_update_matters("ElasticQuota", quota, QUOTA.copy().min(cpu="2").max(cpu="2").obj())
    queue = MakeQueue("q").obj()
    assert not object_update_matters("Queue", queue, {**queue, "status": {"state": "Open", "allocated": {}}})
    assert object_update_matters("Queue", queue, {**queue, "status": {"state": "Closed"}})
    priority = {"kind": "PriorityClass", "metadata": {"name": "p"}, "value": 1}
    assert object_update_matters("PriorityClass", priority, {**priority, "value": 2})
    # What a PodDisruptionBudget allows is its status, the disruption controller's (not gpuq's).
    budget = MakePodDisruptionBudget().match_labels({"app": "a"}).allowed(0).obj()
    allowing = MakePodDisruptionBudget().match_labels({"app": "a"}).allowed(1).obj()
    assert object_update_matters("PodDisruptionBudget", budget, allowing)
    disrupted = MakePodDisruptionBudget().match_labels({"app": "a"}).allowed(0, ("x",)).obj()
    assert object_update_matters("PodDisruptionBudget", budget, disrupted)


def test_a_budget_and_its_status_changes_reach_preemption() -> None:
    """The feed stores PodDisruptionBudgets (informer add, status update, delete) and the framework's
    view of what each allows follows."""
    scheduler, _, feed, _ = make_feed()
    made = MakePodDisruptionBudget("web", "ns").match_labels({"app": "a"}).resource_version("1")
    feed.apply(add(made.allowed(0).obj()))
    assert scheduler.framework.disruption_budgets().allowed() == {"PodDisruptionBudget/ns/web": 0}
    old = made.obj()
    feed.apply(update(old, made.copy().resource_version("2").allowed(2).obj()))
    assert scheduler.framework.disruption_budgets().allowed() == {"PodDisruptionBudget/ns/web": 2}
    feed.apply(Change("delete", ("ns", "web"), made.obj()))
    assert not scheduler.framework.disruption_budgets()


@pytest.mark.parametrize(
    ("status", "result"),
    [
        (Status.success(), "scheduled"),
        (Status.wait("gang"), "scheduled"),
        (Status.unschedulable("x"), "unschedulable"),
        (Status.unresolvable("x"), "unschedulable"),
        (Status.error("x"), "error"),
    ],
)
def test_attempt_result_labels(status: Status, result: str) -> None:
    assert attempt_result(Attempt(PodInfo(namespace="n", name="p"), status)) == result


def test_metrics_have_design_names_and_scrape_time_gauges() -> None:
    scheduler, _, feed, _ = make_feed()
    metrics = SchedulerMetrics()
    quota = QuotaStatus.of(scheduler)
    quota.wall_clock = lambda: 1767225600.0 + 42.0  # 42 s after the pending pod's creation
    metrics.watch(quota.snapshot)
    feed.apply(add(NODE.copy().name("n1").obj()))
    feed.apply(add(QUOTA.copy().min(cpu="2").max(cpu="2").obj()))
    feed.apply(add(MakeQueue("team-a").resource_version("1").obj()))
    feed.apply(add(MakeQueue("idle").resource_version("1").obj()))
    feed.apply(add(POD.copy().name("a").uid("uid-a").node("n1").obj()))
    in_team_a = POD.copy().name("b").uid("uid-b").req(cpu="3").annotation(QUEUE_NAME, "team-a")
    in_team_a.created("2026-01-01T00:00:00Z")
    feed.apply(add(in_team_a.obj()))
    for attempt in drain(scheduler):
        metrics.attempt(attempt_result(attempt), 0.001)
    metrics.observe("Filter", 0.0001)
    quota.observe_status(
        kinds.GPU_RESOURCE_QUOTA,
        "ns",
        "q",
        {"availablePercent": {"workers": "25.00", "requests.tflops": "x"}},
    )
    text = generate_latest(metrics.registry).decode()
    assert 'gpuq_scheduler_schedule_attempts_total{result="unschedulable"} 1.0' in text
    assert 'gpuq_scheduler_schedule_attempts_total{result="scheduled"} 0.0' in text
    assert "gpuq_scheduler_scheduling_attempt_duration_seconds_count 1.0" in text
    assert 'gpuq_scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter"}' in text
    assert 'gpuq_scheduler_pending_pods{queue="unschedulable"} 1.0' in text
    # Per Volcano queue: the pending pod's queue, and every known Queue at 0.
    assert 'gpuq_queue_pending_pods{queue_name="team-a"} 1.0' in text
    assert 'gpuq_queue_pending_pods{queue_name="idle"} 0.0' in text
    assert 'gpuq_elastic_quota_used{namespace="ns",resource="cpu"} 1.0' in text
    assert 'gpuq_elastic_quota_min{namespace="ns",resource="cpu"} 2.0' in text
    assert 'gpuq_elastic_quota_max{namespace="ns",resource="cpu"} 2.0' in text
    assert 'gpuq_gpu_quota_usage_ratio{namespace="ns",resource_type="workers"} 0.75' in text
    assert f'gpuq_build_info{{version="{gpuq_version()}"}} 1.0' in text
    assert "gpuq_preemptions_total 0.0" in text
    assert "# TYPE gpuq_pod_scheduling_wait_seconds histogram" in text  # per queue_name, as binds come
    assert 'gpuq_queue_pending_wait_seconds{queue_name="idle"} 0.0' in text
    # The pending pod of team-a has waited since its creation, whenever the scheduler first saw it.
    assert 'gpuq_queue_pending_wait_seconds{queue_name="team-a"} 42.0' in text
    for family in ("deserved", "allocated", "request", "capacity"):
        assert f"# TYPE volcano_queue_card_{family} gauge" in text
    # Never a kube-scheduler name: every family is gpuq's own or the capacity-card design's.
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert families and all(f.startswith(("gpuq_", "volcano_queue_card_")) for f in families), families
    assert "_created" not in text


def test_wait_histogram_runs_from_the_pods_creation_to_the_bind() -> None:
    """gpuq_pod_scheduling_wait_seconds{queue_name} (issue 28): from the pod's creationTimestamp
    (read against the wall clock when the feed first saw it: a pod created before a restart counts
    its whole wait) to its bind succeeding, later updates restarting nothing, whether the watch or
    the bind's answer comes first; a pod another scheduler bound is no wait of ours."""
    scheduler, _, _, _ = make_feed()
    metrics = SchedulerMetrics()
    clock = FakeClock()
    created = "2026-01-01T00:00:00Z"
    wall = FakeClock()
    wall.now = 1767225600.0 + 3.0  # 3 s after the creation: the feed sees it late (a restart)
    feed = Feed(scheduler, on_waited=metrics.waited, clock=clock, wall_clock=wall)
    feed.ready = True
    feed.apply(add(NODE.copy().name("n1").obj()))
    clock.now = 10.0
    pod = POD.copy().name("w").uid("uid-w").created(created).queue("team-a")
    feed.apply(add(pod.obj()))
    clock.now = 11.0
    wall.now += 1.0
    feed.apply(update(pod.obj(), pod.copy().label("x", "y").resource_version("2").obj()))
    clock.now = 12.5
    (attempt,) = drain(scheduler)
    assert attempt.node == "n1"
    # The watch may show our bind before the bind's answer arrives: still our wait.
    feed.apply(update(pod.obj(), pod.copy().node("n1").resource_version("3").obj()))
    feed.assume("ns/w")
    other = POD.copy().name("o").uid("uid-o").created(created)
    feed.apply(add(other.obj()))
    feed.apply(update(other.obj(), other.copy().node("n1").resource_version("2").obj()))
    feed.assume("ns/o")  # nothing of ours to report: the watch showed it bound by someone else
    (family,) = metrics.wait.collect()
    samples = {(s.name, s.labels.get("queue_name")): s.value for s in family.samples}
    assert samples[("gpuq_pod_scheduling_wait_seconds_count", "team-a")] == 1.0
    assert samples[("gpuq_pod_scheduling_wait_seconds_sum", "team-a")] == 3.0 + 2.5
    assert ("gpuq_pod_scheduling_wait_seconds_count", "default") not in samples


def test_json_log_lines() -> None:
    record = logging.LogRecord("gpuq", logging.WARNING, __file__, 1, "bound %s", ("ns/p",), None)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "warning" and entry["msg"] == "bound ns/p" and entry["logger"] == "gpuq"


def test_readiness_needs_the_replayed_caches_and_every_watch_live() -> None:
    """/readyz (issue 11): not before the caches are fed, nor while any watch is not live (silent
    past the bound and not yet re-established, or failed); it names the watches that are down."""
    _, _, feed, _ = make_feed()
    service = Service(SchedulerOptions(identity="x"), SchedulerConfig.from_yaml(CONFIG))
    assert not service.ready() and service.not_ready_reason() == "informer caches not synced"
    pods, nodes = Informer(None, kinds.POD), Informer(None, kinds.NODE)
    service.feed, service.informers = feed, InformerSet([pods, nodes])
    pods.watching = nodes.watching = True
    assert service.ready()
    pods.watching = False
    assert not service.ready() and service.not_ready_reason() == "watch not live: Pod"
    nodes.watching = False
    assert service.not_ready_reason() == "watch not live: Node, Pod"
    pods.watching = nodes.watching = True
    feed.ready = False
    assert not service.ready()


def namespace(name: str, *, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "1"}
    status = {"phase": "Active"}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        status = {"phase": "Terminating"}
    return {"kind": "Namespace", "apiVersion": "v1", "metadata": meta, "spec": {}, "status": status}


def test_an_elastic_quota_of_a_terminating_namespace_is_not_in_the_sum_of_min() -> None:
    """Regression (ElasticQuota e2e run after another test on the same apiserver): the quotas left in
    the earlier test's Terminating namespaces (no namespace controller deletes them) were counted in
    "the sum of all ElasticQuota min", so A's pod over its min passed PreFilter and failed on cpu."""
    scheduler, backend, feed, clock = make_feed()
    feed.apply(add(namespace("old", terminating=True)))
    feed.apply(
        add(QUOTA.copy().namespace("old").min(cpu="4").max(cpu="8").obj())
    )  # a leftover: guarantees nothing any more
    feed.apply(add(namespace("going")))
    feed.apply(add(QUOTA.copy().namespace("going").min(cpu="4").max(cpu="8").obj()))
    for ns in ("a", "b"):
        feed.apply(add(namespace(ns)))
        feed.apply(add(QUOTA.copy().namespace(ns).min(cpu="4").max(cpu="8").obj()))
    feed.apply(add(NODE.copy().name("n1").alloc(cpu="8").obj()))
    for i in range(4):
        feed.apply(
            add(POD.copy().name(f"b-{i}").namespace("b").uid(f"uid-b-b-{i}").req(cpu="2").node("n1").obj())
        )  # B borrows 4
    feed.apply(update(namespace("going"), namespace("going", terminating=True)))  # deletion starts
    for i in range(3):
        feed.apply(add(POD.copy().name(f"a-{i}").namespace("a").uid(f"uid-a-a-{i}").req(cpu="2").obj()))
    attempts = drain(scheduler)
    for _ in range(3):  # past the backoffs
        clock.now += 60
        attempts += drain(scheduler)
    assert backend.bindings == {"a/a-0": "n1", "a/a-1": "n1"}  # A reclaimed its min from B
    assert sorted(k for k in scheduler.cluster.pods if k.startswith("b/")) == ["b/b-2", "b/b-3"]
    messages = [a.message for a in attempts if a.pod.key == "a/a-2"]
    assert messages and "ElasticQuota min" in messages[-1], messages
