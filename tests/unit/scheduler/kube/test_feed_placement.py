"""The feed's part in the placement rules (scheduler/kube/feed.py): the kinds topology spread's system
defaults select by are kept as their selector only, and a bound pod relabelled or a Namespace relabelled
through the informers retries the pods inter-pod affinity rejected, as in a cluster. No API, no mocks."""

from __future__ import annotations

import copy
from typing import Any

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.scheduler.kube.feed import SELECTOR_ONLY, selector_only
from tests.testing.feed import NODE, POD, add, make_feed, update

CONFIG = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
- plugins:
  - name: predicates
"""
REPLICA_SET = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "metadata": {
        "name": "web-1",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "7",
        "labels": {"a": "b"},
    },
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"spec": {"containers": []}},
    },
    "status": {"replicas": 2},
}


def test_owner_kinds_are_kept_as_their_selector() -> None:
    assert {
        kinds.SERVICE,
        kinds.REPLICATION_CONTROLLER,
        kinds.REPLICA_SET,
        kinds.STATEFUL_SET,
    } == SELECTOR_ONLY
    kept = selector_only(copy.deepcopy(REPLICA_SET))
    assert kept == {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-1",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "7",
            "labels": {"a": "b"},
        },
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {},
    }
    assert selector_only(service)["spec"] == {}  # a Service without a selector selects nothing


def test_a_replicasets_status_change_is_no_change_for_the_scheduler() -> None:
    scheduler, _, feed, _ = make_feed(CONFIG)
    feed.apply(add(selector_only(copy.deepcopy(REPLICA_SET))))
    changed: list[str] = []
    scheduler.objects.subscribe(lambda kind, ns, name, obj: changed.append(name))
    newer = copy.deepcopy(REPLICA_SET)
    newer["status"] = {"replicas": 3}
    feed.apply(update(selector_only(copy.deepcopy(REPLICA_SET)), selector_only(newer)))
    assert changed == []
    assert scheduler.objects.get(kinds.REPLICA_SET, "ns", "web-1") is not None


def _anti(app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_a_bound_pod_relabelled_through_the_watch_retries_the_pod_it_blocked() -> None:
    scheduler, _, feed, clock = make_feed(CONFIG)
    feed.apply(add(NODE.copy().name("n1").label("kubernetes.io/hostname", "n1").obj()))
    running = POD.copy().name("web-0").uid("u0").label("app", "web").node("n1").phase("Running").obj()
    feed.apply(add(running))
    feed.apply(add(POD.copy().name("web-1").uid("u1").label("app", "web").spec(affinity=_anti("web")).obj()))
    attempt = scheduler.schedule_one()
    assert attempt is not None and not attempt.node
    queued = scheduler.queue.get(attempt.pod.key)
    assert queued is not None and queued.pool == "unschedulable"
    assert plugin_names.INTER_POD_AFFINITY in queued.rejected_by
    clock.now += 60
    relabelled = copy.deepcopy(running)
    relabelled["metadata"]["labels"]["app"] = "retired"
    relabelled["metadata"]["resourceVersion"] = "2"
    feed.apply(update(running, relabelled))
    assert scheduler.cluster.pods["ns/web-0"].labels == {"app": "retired"}
    retried = scheduler.schedule_one()
    assert retried is not None and retried.pod.key == "ns/web-1" and retried.node == "n1"
