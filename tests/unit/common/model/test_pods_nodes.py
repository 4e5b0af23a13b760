"""A pod's effective request, computed as kube-scheduler does, and node parsing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model.errors import InvalidQuantity, InvalidValue
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo, _general_limits, _general_requests, pod_limits, pod_requests
from tests.testing.builders import MakeNode, MakePod
from tests.testing.hostile import JSON_VALUES, OBJECTS, only_gpuq_errors


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(
            MakePod().req(cpu="1").container({"cpu": "500m", "memory": "1Gi"}),
            {"cpu": 1500, "memory": 2**30},
            id="containers add up",
        ),
        pytest.param(
            MakePod().req(cpu="1").init_container({"cpu": "3", "memory": "1Ki"}),
            {"cpu": 3000, "memory": 1024},
            id="init container raises the max per resource",
        ),
        pytest.param(
            MakePod().req(cpu="1").sidecar({"cpu": "500m"}).init_container({"cpu": "1"}),
            # sidecar runs beside the app: 1 + 0.5; the later init runs beside the sidecar: 1 + 0.5
            {"cpu": 1500},
            id="sidecar adds to the sum and to later init containers",
        ),
        pytest.param(
            MakePod().req(cpu="1").sidecar({"cpu": "500m"}).init_container({"cpu": "2"}),
            {"cpu": 2500},
            id="init beside sidecar exceeds the sum",
        ),
        pytest.param(
            MakePod().req(cpu="1").spec(overhead={"cpu": "250m", "memory": "120Mi"}),
            {"cpu": 1250, "memory": 120 * 2**20},
            id="overhead is added",
        ),
        pytest.param(
            MakePod().lim({"nvidia.com/gpu": 1, "cpu": "2"}),
            {"nvidia.com/gpu": 1000, "cpu": 2000},
            id="limits default requests like the apiserver",
        ),
        pytest.param(
            MakePod()
            .req({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1})
            .spec(resources={"requests": {"cpu": "4"}}),
            {"cpu": 4000, "memory": 2**30, "nvidia.com/gpu": 1000},
            id="pod-level requests replace cpu",
        ),
        pytest.param(MakePod(), {}, id="no requests"),
    ],
)
def test_pod_requests(pod: MakePod, expected: dict[str, int]) -> None:
    assert pod_requests(pod.obj()["spec"]) == expected


def test_pod_from_dict() -> None:
    pod = (
        MakePod("p", "team-a")
        .uid("u1")
        .annotation("k", "v")
        .priority(100)
        .req(cpu="1")
        .spec(tolerations=[{"key": "gpu", "operator": "Exists"}])
        .info()
    )
    assert (pod.key, pod.ref, pod.uid, pod.priority) == ("team-a/p", "Pod/team-a/p", "u1", 100)
    assert pod.scheduler_name == "gpuq-scheduler"
    assert not pod.bound and not pod.holds_resources
    assert pod.requests_with_pod_count == {"cpu": 1000, "pods": 1}


def test_pod_bad_quantity_names_the_pod_container_and_value() -> None:
    with pytest.raises(InvalidValue) as info:
        MakePod().req(cpu="x").info()
    message = str(info.value)
    assert "Pod/ns/p" in message and "container c" in message and "'x'" in message


def test_terminal_pod_holds_nothing() -> None:
    pod = MakePod().node("n1").phase("Succeeded").info()
    assert pod.bound and pod.terminal and not pod.holds_resources


def test_node_from_dict() -> None:
    node = (
        MakeNode("gpu-1")
        .product("NVIDIA-A100")
        .taint("gpu", value="true")
        .capacity({"cpu": "64", "ephemeral-storage": "100Gi"})
        .alloc({"cpu": "62", "nvidia.com/gpu": "8"})
        .not_ready()
        .info()
    )
    assert node.allocatable == {"cpu": 62000, "nvidia.com/gpu": 8000, "ephemeral-storage": 100 * 2**30}
    assert node.taints[0].key == "gpu" and not node.ready


def test_node_bad_allocatable() -> None:
    with pytest.raises(InvalidValue, match=r"Node/n1: status.allocatable\[cpu\]"):
        MakeNode().alloc(cpu="many").info()


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"metadata": ["p"]}, "metadata"),
        ({"metadata": {"name": "p"}, "spec": "x"}, "spec"),
        ({"metadata": {"name": "p"}, "spec": {"containers": {"name": "c"}}}, "spec.containers"),
        ({"metadata": {"name": "p"}, "spec": {"containers": ["c"]}}, "spec.containers[0]"),
        ({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": [1]}]}}, "resources"),
        ({"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"requests": [1]}}]}}, "requests"),
        ({"metadata": {"name": "p", "annotations": {"a": 1}}}, "metadata.annotations[a]"),
        ({"metadata": {"name": "p", "labels": ["a"]}}, "metadata.labels"),
        ({"metadata": {"name": "p"}, "spec": {"tolerations": {"key": "k"}}}, "spec.tolerations"),
        ({"metadata": {"name": "p"}, "spec": {"resources": 1}}, "spec.resources"),
    ],
)
def test_pod_of_the_wrong_shape_is_an_invalid_value(obj: dict[str, Any], field: str) -> None:
    """A hand-written manifest with a list where a map belongs names the pod and the field."""
    with pytest.raises(InvalidValue) as info:
        PodInfo.from_dict(obj)
    message = str(info.value)
    assert field in message and "\n" not in message
    assert message.startswith("Pod/") or field == "metadata"


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"metadata": "n"}, "metadata"),
        ({"metadata": {"name": "n"}, "status": {"allocatable": ["cpu"]}}, "status.allocatable"),
        ({"metadata": {"name": "n"}, "status": {"conditions": [1]}}, "status.conditions[0]"),
        ({"metadata": {"name": "n"}, "spec": {"taints": "gpu"}}, "spec.taints"),
        ({"metadata": {"name": "n", "annotations": {"a": ["x"]}}}, "metadata.annotations[a]"),
        ({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "1e40"}}}, "status.capacity[cpu]"),
    ],
)
def test_node_of_the_wrong_shape_is_an_invalid_value(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidValue) as info:
        NodeInfo.from_dict(obj)
    assert field in str(info.value)


@settings(max_examples=200, deadline=None)
@given(OBJECTS)
def test_fuzz_pod_and_node_parsers_raise_only_gpuq_errors(obj: dict[str, Any]) -> None:
    only_gpuq_errors(PodInfo.from_dict, obj)
    only_gpuq_errors(NodeInfo.from_dict, obj)


# --- the one-pass path for plain pods agrees with the general one ----------------------------------

_QUANTITIES = st.sampled_from(
    ["1", "500m", "64Gi", "0", "-1", "1e3", "2.5", "bad", "1e40", ""]
) | st.integers(-5, 5)
_RESOURCE_LISTS = st.none() | st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods", "hugepages-2Mi"]), _QUANTITIES, max_size=3
)
_CONTAINERS = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b"])},
    optional={
        "resources": st.none()
        | st.fixed_dictionaries({}, optional={"requests": _RESOURCE_LISTS, "limits": _RESOURCE_LISTS})
        | JSON_VALUES
    },
)
_SPECS = st.fixed_dictionaries(
    {"containers": st.none() | st.lists(_CONTAINERS, max_size=3) | JSON_VALUES},
    optional={
        "initContainers": st.none() | st.just([]) | st.lists(_CONTAINERS, max_size=2) | JSON_VALUES,
        "resources": st.none() | st.just({}) | st.just({"requests": {"cpu": "2"}}) | JSON_VALUES,
        "overhead": st.none() | st.just({}) | st.just({"memory": "1Mi"}) | JSON_VALUES,
    },
)


def _outcome(compute: Any, spec: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "value", dict(compute(spec, "spec"))
    except InvalidValue as err:
        return type(err).__name__, str(err)


@settings(max_examples=600, deadline=None)
@given(spec=_SPECS)
def test_one_pass_requests_and_limits_match_the_general_rules(spec: dict[str, Any]) -> None:
    """pod_requests / pod_limits (which take the one-pass path for plain pods) give the same amounts,
    or the same error naming the same field, as the general container-by-container computation."""
    assert _outcome(pod_requests, spec) == _outcome(_general_requests, spec)
    assert _outcome(pod_limits, spec) == _outcome(_general_limits, spec)
    pod = {"metadata": {"name": "p"}, "spec": spec}
    try:
        info = PodInfo.from_dict(pod)
    except InvalidValue:
        # from_dict computes requests first, then limits: it fails when either does.
        assert (_outcome(_general_requests, spec)[0], _outcome(_general_limits, spec)[0]) != (
            "value",
            "value",
        )
    else:
        assert (dict(info.requests), dict(info.limits)) == (
            _outcome(_general_requests, spec)[1],
            _outcome(_general_limits, spec)[1],
        )


def test_a_negative_quantity_is_refused_on_both_paths() -> None:
    """The apiserver refuses negative requests and limits; so does gpuq, naming the field (it used to
    read -1 cpu as a request that clamps the pod's total)."""
    spec = MakePod().req(cpu="-1", memory="1Ki").lim(cpu="-2").obj()["spec"]
    for compute in (pod_requests, _general_requests):
        with pytest.raises(InvalidQuantity, match=r"cpu\]: invalid value '-1': expected a non-negative"):
            compute(spec, "spec")


def test_pods_of_one_workload_share_their_maps() -> None:
    """Labels, annotations and node selectors equal across pods are one map (issue 29: 150,000
    PodInfos at a cold start); each pod still reads its own values."""

    def pod(name: str, labels: dict[str, str]) -> PodInfo:
        return PodInfo.from_dict(
            {
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "ns", "labels": labels},
                "spec": {"nodeSelector": {"pool": "gpu"}, "containers": [{"name": "c"}]},
            }
        )

    first, second, other = pod("a", {"app": "x"}), pod("b", {"app": "x"}), pod("c", {"app": "y"})
    assert first.labels is second.labels and first.node_selector is second.node_selector
    assert other.labels == {"app": "y"} and first.labels == {"app": "x"}
    assert first.annotations is other.annotations and first.annotations == {}
    assert first.affinity == {} and first != second
