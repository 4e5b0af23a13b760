"""Requeueing after an InterPodAffinity or PodTopologySpread rejection (kube-scheduler's
EventsToRegister for both plugins, ``interpodaffinity/plugin_test.go`` and
``podtopologyspread/plugin_test.go`` Test_isSchedulableAfterPodChange in spirit): a pod one of them
rejected is parked and retried when a pod it depends on is deleted, relabelled or bound, or a
Namespace's labels change; an event neither plugin waits for leaves it parked (no 5-minute flush is
involved: the clock only passes the backoff)."""

from __future__ import annotations

from typing import Any

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.scheduler.cycle import Scheduler
from tests.testing.builders import MakeNode, MakePod, MakeQueue
from tests.testing.clock import FakeClock
from tests.testing.placement import namespace
from tests.testing.scheduler import make_scheduler

HOST = "kubernetes.io/hostname"


def _scheduler(*nodes: tuple[str, str]) -> tuple[Scheduler, FakeClock]:
    clock = FakeClock()
    scheduler, _ = make_scheduler(clock=clock)
    for name, zone in nodes:
        scheduler.set_node(
            MakeNode(name)
            .alloc(cpu="8", memory="8Gi", pods="20")
            .label(HOST, name)
            .label("zone", zone)
            .info()
        )
    return scheduler, clock


def _bound(name: str, node: str, labels: dict[str, str], ns: str = "ns") -> MakePod:
    pod = MakePod(name, ns).req(cpu="100m").node(node).phase("Running")
    for key, value in labels.items():
        pod.label(key, value)
    return pod


def _term(labels: dict[str, str], key: str, **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **extra}


def _rejected(scheduler: Scheduler, clock: FakeClock, pod: MakePod, plugin: str, reason: str) -> str:
    scheduler.add_pod(pod.info())
    attempt = scheduler.schedule_one()
    assert attempt is not None and not attempt.node
    assert reason in attempt.message
    queued = scheduler.queue.get(attempt.pod.key)
    assert queued is not None and queued.pool == "unschedulable" and plugin in queued.rejected_by
    clock.now += 60  # well past its backoff: only an event can bring it back now
    assert scheduler.schedule_one() is None
    return attempt.pod.key


def _retried_to(scheduler: Scheduler, key: str) -> str:
    queued = scheduler.queue.get(key)
    assert queued is not None and queued.pool in ("active", "backoff"), "the event did not retry the pod"
    attempt = scheduler.schedule_one()
    assert attempt is not None and attempt.pod.key == key
    return attempt.node


ANTI_WEB = {
    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term({"app": "web"}, HOST)]}
}


def test_anti_affinity_rejection_is_retried_when_the_blocking_pod_is_deleted() -> None:
    scheduler, clock = _scheduler(("n1", "z1"))
    scheduler.add_pod(_bound("web-0", "n1", {"app": "web"}).info())
    key = _rejected(
        scheduler,
        clock,
        MakePod("web-1", "ns").req(cpu="100m").label("app", "web").spec(affinity=ANTI_WEB),
        plugin_names.INTER_POD_AFFINITY,
        "1 node(s) didn't match pod anti-affinity rules",
    )
    scheduler.put_object(MakeQueue("unrelated").weight(1).obj())  # a quota change: not its business
    assert scheduler.queue.get(key).pool == "unschedulable"  # type: ignore[union-attr]
    scheduler.delete_pod("ns/web-0")
    assert _retried_to(scheduler, key) == "n1"


def test_anti_affinity_rejection_is_retried_when_the_blocking_pod_is_relabelled() -> None:
    scheduler, clock = _scheduler(("n1", "z1"))
    scheduler.add_pod(_bound("web-0", "n1", {"app": "web"}).info())
    key = _rejected(
        scheduler,
        clock,
        MakePod("web-1", "ns").req(cpu="100m").label("app", "web").spec(affinity=ANTI_WEB),
        plugin_names.INTER_POD_AFFINITY,
        "didn't match pod anti-affinity rules",
    )
    scheduler.add_pod(_bound("web-0", "n1", {"app": "retired"}).info())
    assert _retried_to(scheduler, key) == "n1"


def test_an_existing_pods_anti_affinity_rejection_is_retried_when_that_pod_leaves() -> None:
    scheduler, clock = _scheduler(("n1", "z1"))
    scheduler.add_pod(_bound("db-0", "n1", {"app": "db"}).spec(affinity=ANTI_WEB).info())
    key = _rejected(
        scheduler,
        clock,
        MakePod("web-1", "ns").req(cpu="100m").label("app", "web"),
        plugin_names.INTER_POD_AFFINITY,
        "didn't satisfy existing pods anti-affinity rules",
    )
    scheduler.delete_pod("ns/db-0")
    assert _retried_to(scheduler, key) == "n1"


def test_affinity_rejection_is_retried_when_a_matching_pod_is_bound() -> None:
    scheduler, clock = _scheduler(("n1", "z1"), ("n2", "z2"))
    with_db = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term({"app": "db"}, "zone")]}
    }
    key = _rejected(
        scheduler,
        clock,
        MakePod("api", "ns").req(cpu="100m").label("app", "api").spec(affinity=with_db),
        plugin_names.INTER_POD_AFFINITY,
        "2 node(s) didn't match pod affinity rules",
    )
    scheduler.add_pod(_bound("db-0", "n2", {"app": "db"}).info())  # bound by another hand
    assert _retried_to(scheduler, key) == "n2"


def test_affinity_rejection_is_retried_when_a_namespace_is_relabelled() -> None:
    scheduler, clock = _scheduler(("n1", "z1"))
    scheduler.put_object(namespace("data", {}))
    scheduler.add_pod(_bound("db-0", "n1", {"app": "db"}, ns="data").info())
    term = _term({"app": "db"}, "zone", namespaceSelector={"matchLabels": {"team": "a"}})
    key = _rejected(
        scheduler,
        clock,
        MakePod("api", "ns")
        .req(cpu="100m")
        .spec(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}),
        plugin_names.INTER_POD_AFFINITY,
        "didn't match pod affinity rules",
    )
    scheduler.put_object(namespace("data", {"team": "a"}))
    assert _retried_to(scheduler, key) == "n1"


def test_spread_rejection_is_retried_when_a_matching_pod_leaves() -> None:
    """Two zones, one app=x pod in each, and minDomains 3: the global minimum is 0 and either zone
    would reach a skew of 2. Once the pod in z1 leaves, z1 takes the new one."""
    scheduler, clock = _scheduler(("n1", "z1"), ("n2", "z2"))
    for name, node in (("x-0", "n1"), ("x-1", "n2")):
        scheduler.add_pod(_bound(name, node, {"app": "x"}).info())
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "minDomains": 3,
            "labelSelector": {"matchLabels": {"app": "x"}},
        }
    ]
    key = _rejected(
        scheduler,
        clock,
        MakePod("x-2", "ns").req(cpu="100m").label("app", "x").spec(topologySpreadConstraints=spread),
        plugin_names.POD_TOPOLOGY_SPREAD,
        "2 node(s) didn't match pod topology spread constraints",
    )
    scheduler.add_pod(_bound("other", "n1", {"app": "y"}).info())  # a pod the constraint does not count
    assert scheduler.queue.get(key).pool == "active"  # type: ignore[union-attr]
    assert scheduler.schedule_one() is not None  # retried (a bound pod may help), still rejected
    assert scheduler.queue.get(key).pool == "unschedulable"  # type: ignore[union-attr]
    clock.now += 60
    scheduler.delete_pod("ns/x-0")
    assert _retried_to(scheduler, key) == "n1"
