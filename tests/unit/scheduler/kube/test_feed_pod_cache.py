"""What the pod informer keeps of a pod (scheduler/kube/pod_cache.py): the trimmed whole pod
(``pod_cache``) and the typed decoding of the read fields only; what they leave out is read by
nothing, so a cached pod decides as the whole pod did, and what most pods share is kept once."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.kube.feed import pod_update_matters
from gpuq_k8s.scheduler.kube.pod_cache import PodDecoder, decode_pod, pod_cache, pod_shared_parts

TOLERATIONS = [
    {"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    for t in ("not-ready", "unreachable")
]


def full_pod(name: str = "p1") -> dict[str, Any]:
    """A pod as kube-apiserver lists it after a kubelet ran it: every part PodInfo reads and many it
    does not."""
    container = {
        "name": "main",
        "image": "registry.example/train:1.2",
        "command": ["python", "train.py"],
        "args": ["--epochs", "3"],
        "env": [{"name": "A", "value": "1"}],
        "ports": [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": "1"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"runAsUser": 1000},
    }
    sidecar = {
        "name": "proxy",
        "image": "registry.example/proxy:2",
        "restartPolicy": "Always",
        "ports": [{"containerPort": 9090, "hostPort": 9090}],
        "resources": {"requests": {"cpu": "100m"}},
        "env": [{"name": "B", "value": "2"}],
    }
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-26T10:00:00Z",
            "labels": {"app": "train"},
            "annotations": {"gpuq.io/queue": "q1"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}],
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
        },
        "spec": {
            "containers": [container],
            "initContainers": [sidecar],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "nodeName": "n1",
            "nodeSelector": {"pool": "gpu"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
            "tolerations": copy.deepcopy(TOLERATIONS),
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
            ],
            "schedulerName": "gpuq-scheduler",
            "priority": 10,
            "priorityClassName": "high",
            "preemptionPolicy": "Never",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "schedulingGates": [{"name": "wait"}],
            "overhead": {"cpu": "50m"},
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "enableServiceLinks": True,
            "imagePullSecrets": [{"name": "registry"}],
        },
        "status": {
            "phase": "Running",
            "startTime": "2026-11-26T10:00:05Z",
            "nominatedNodeName": "n2",
            "deletionTimestamp": None,
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
                {"type": "Ready", "status": "True"},
            ],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p1-gpu-x"}],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "image": "x"}],
            "initContainerStatuses": [{"name": "proxy", "ready": True}],
            "podIP": "10.0.0.5",
            "podIPs": [{"ip": "10.0.0.5"}],
            "hostIP": "192.168.0.1",
            "qosClass": "Burstable",
        },
    }


def test_a_cached_pod_parses_as_the_whole_pod() -> None:
    whole = full_pod()
    cached = pod_cache(copy.deepcopy(whole))
    assert PodInfo.from_dict(cached) == PodInfo.from_dict(whole)
    info = PodInfo.from_dict(cached)  # every part it reads is there (not merely equal by accident)
    assert info.host_ports and info.images and info.claim_sources and info.scheduling_gates
    assert info.requests.amount("cpu") > 2000 and info.tolerations and info.owner_references
    for gone in ("managedFields",):
        assert gone not in cached["metadata"]
    unread = ("env", "command", "volumeMounts", "livenessProbe", "terminationMessagePath", "securityContext")
    for gone in unread:
        assert gone not in cached["spec"]["containers"][0]
    assert "env" not in cached["spec"]["initContainers"][0]
    for gone in ("dnsPolicy", "serviceAccountName", "imagePullSecrets", "terminationGracePeriodSeconds"):
        assert gone not in cached["spec"]
    for gone in ("containerStatuses", "podIP", "hostIP", "qosClass"):
        assert gone not in cached["status"]
    for kept in ("conditions", "resourceClaimStatuses", "nominatedNodeName", "startTime", "phase"):
        assert kept in cached["status"]


@pytest.mark.parametrize(
    ("path", "value", "matters"),
    [
        (("spec", "containers", 0, "image"), "registry.example/train:1.3", True),  # ImageLocality reads it
        (("spec", "schedulingGates"), [], True),
        (("spec", "tolerations"), [], True),
        (("metadata", "labels"), {"app": "other"}, True),
        (("status", "resourceClaimStatuses"), [], True),
        (("status", "podIP"), "10.0.0.6", False),  # the kubelet's: never a reason to look again
    ],
)
def test_a_change_matters_to_the_cached_pods_as_to_the_whole(
    path: tuple[Any, ...], value: Any, matters: bool
) -> None:
    old, new = full_pod(), full_pod()
    target: Any = new
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    assert pod_update_matters(old, new) is matters
    assert pod_update_matters(pod_cache(copy.deepcopy(old)), pod_cache(copy.deepcopy(new))) is matters
    assert pod_update_matters(decoded(old), decoded(new)) is matters


def decoded(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as the pod informer keeps it: decoded from its JSON by the typed declarations, the
    shared parts shared (its transform)."""
    out = decode_pod(orjson.dumps(pod))
    assert type(out) is dict
    return pod_shared_parts(out)


def subset(small: Any, large: Any, at: str = "") -> None:
    """Every key of ``small`` (nested maps) is in ``large`` with an equal value."""
    if type(small) is dict:
        assert type(large) is dict, at
        for key, value in small.items():
            assert key in large, f"{at}.{key}"
            subset(value, large[key], f"{at}.{key}")
    elif type(small) is list:
        assert type(large) is list and len(small) == len(large), at
        for i, (a, b) in enumerate(zip(small, large, strict=True)):
            subset(a, b, f"{at}[{i}]")
    else:
        assert small == large and type(small) is type(large), at


def test_a_decoded_pod_parses_as_the_whole_pod_and_keeps_less_than_the_cache_did() -> None:
    whole = full_pod()
    typed = decoded(copy.deepcopy(whole))
    assert PodInfo.from_dict(typed) == PodInfo.from_dict(whole)
    info = PodInfo.from_dict(typed)  # every part it reads is there (not merely equal by accident)
    assert info.host_ports and info.images and info.claim_sources and info.scheduling_gates
    assert info.preempted_by_scheduler is False and info.nominated_node_name == "n2"
    assert info.start_time and info.volumes and info.topology_spread_constraints and info.affinity
    subset(typed, pod_cache(copy.deepcopy(whole)))  # nothing the cache did not keep
    # What the cache kept that nothing reads either (named, so that reading one fails here).
    for unread in ("restartPolicy",):
        assert unread in whole["spec"] and unread not in typed["spec"]
    # The same object, as a list page's item and as a watch event's.
    page = PodDecoder().page(orjson.dumps({"metadata": {"continue": "c"}, "items": [whole]}))
    assert page["metadata"] == {"continue": "c"} and page["items"] == [decode_pod(orjson.dumps(whole))]
    event = PodDecoder().event(orjson.dumps({"type": "MODIFIED", "object": whole}))
    assert event == {"type": "MODIFIED", "object": decode_pod(orjson.dumps(whole))}


def test_a_deleting_pod_preempted_by_a_scheduler_is_read_so_when_decoded() -> None:
    whole = full_pod()
    whole["metadata"]["deletionTimestamp"] = "2026-11-26T10:01:00Z"
    info = PodInfo.from_dict(decoded(whole))
    assert info.deleting and info.preempted_by_scheduler
    assert info == PodInfo.from_dict(whole)


def typed(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as the pod informer's decoder gives it (no transform after it)."""
    out = decode_pod(orjson.dumps(pod))
    assert type(out) is dict
    return out


@pytest.mark.parametrize("keep", [pod_cache, typed], ids=["decoded whole", "typed"])
def test_the_parts_most_pods_share_are_kept_once(keep: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    first, second = keep(full_pod("a")), keep(full_pod("b"))
    assert first["spec"]["tolerations"] is second["spec"]["tolerations"]
    assert first["spec"]["nodeSelector"] is second["spec"]["nodeSelector"]
    first_main, second_main = first["spec"]["containers"][0], second["spec"]["containers"][0]
    assert first_main["resources"] is second_main["resources"]


@pytest.mark.parametrize("keep", [pod_cache, typed], ids=["decoded whole", "typed"])
def test_only_equal_parts_are_shared_to_the_type(keep: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """1, 1.0 and true are equal in Python; a pod keeps the value its JSON had."""
    whole, floated = full_pod("a"), full_pod("b")
    floated["spec"]["tolerations"][0]["tolerationSeconds"] = 300.0
    kept, other = keep(whole), keep(floated)
    assert kept["spec"]["tolerations"] is not other["spec"]["tolerations"]
    assert type(other["spec"]["tolerations"][0]["tolerationSeconds"]) is float
