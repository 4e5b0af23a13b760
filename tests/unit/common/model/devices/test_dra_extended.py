"""Extended resources backed by DRA (common/model/devices/extended.py): the implicit claim's requests
and container mappings, ported from kube-scheduler v1.36.4
``pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources_test.go``
(``Test_createRequestsAndMappings_requests`` and ``_mappings``, case names as test ids), the class a
resource maps to, and a pod asking ``example.com/gpu: 2`` served by DRA end to end."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.extended import (
    ExtendedResourceClasses,
    dra_resources,
    extended_claim,
    extended_claim_object,
    extended_requests,
    is_extended_resource_name,
)
from gpuq_k8s.common.model.devices.search import Allocation, allocate_on_node
from tests.testing.dra_cluster import cluster, node

ER = "example.com/gpu"  # upstream's extendedResourceName
IMPLICIT = "deviceclass.resource.kubernetes.io/classInit"


def container(name: str, requests: dict[str, str], restart: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if restart:
        out["restartPolicy"] = restart
    return out


def dev_class(name: str, resource: str = "", created: str = "") -> DeviceClass:
    return DeviceClass(name, extended_resource_name=resource, creation_timestamp=created)


# The wrappers' pods: Res() adds con<i>, InitReq() init-con<i>, SidecarReq() sidecar-con<i> (restartPolicy
# Always).
POD1 = {"containers": [container("con0", {ER: "1", ER + "1": "2"})]}
POD2 = {"containers": [container("con0", {ER: "1"}), container("con1", {ER + "1": "2"})]}
POD_INIT = {
    "initContainers": [container("init-con0", {ER + "init": "2"})],
    "containers": [container("con0", {ER: "1"})],
}
POD_INIT2 = {
    "initContainers": [
        container("init-con0", {ER + "init": "1"}),
        container("init-con1", {ER + "init": "2"}),
    ],
    "containers": [container("con0", {ER: "1"})],
}
POD_INIT3 = {
    "initContainers": [
        container("init-con0", {ER + "init": "1"}),
        container("sidecar-con1", {ER + "init": "1"}, "Always"),
        container("init-con2", {ER + "init": "2"}),
    ],
    "containers": [container("con0", {ER: "1"})],
}
POD1_INIT_IMPLICIT = {"initContainers": [container("init-con0", {ER + "init": "1", IMPLICIT: "2"})]}
POD_INIT_IMPLICIT = {
    "initContainers": [container("init-con0", {ER + "init": "1"}), container("init-con1", {IMPLICIT: "2"})],
    "containers": [container("con0", {ER: "1"})],
}

MAP1 = ExtendedResourceClasses([dev_class("class", ER)])
MAP2 = ExtendedResourceClasses([dev_class("class", ER), dev_class("class1", ER + "1")])
MAP_INIT = ExtendedResourceClasses([dev_class("class", ER), dev_class("classInit", ER + "init")])


@pytest.mark.parametrize(
    ("spec", "resources", "classes", "expected"),
    [
        pytest.param(POD1, [ER], MAP1, [("container-0-request-0", "class", 1)], id="one resource match"),
        pytest.param(
            POD1,
            [ER, ER + "1"],
            MAP1,
            [("container-0-request-0", "class", 1)],
            id="one resource match, one resource not match",
        ),
        pytest.param(
            POD1,
            [ER, ER + "1"],
            MAP2,
            [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)],
            id="two resources match",
        ),
        pytest.param(
            POD2,
            [ER, ER + "1"],
            MAP2,
            [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)],
            id="two containers match",
        ),
        pytest.param(
            POD_INIT,
            [ER, ER + "init"],
            MAP_INIT,
            [("container-0-request-0", "classInit", 2), ("container-1-request-0", "class", 1)],
            id="one init container, one regular container",
        ),
        pytest.param(
            POD_INIT2,
            [ER, ER + "init"],
            MAP_INIT,
            [("container-1-request-0", "classInit", 2), ("container-2-request-0", "class", 1)],
            id="two init containers, one regular container",
        ),
        pytest.param(
            POD_INIT3,
            [ER, ER + "init"],
            MAP_INIT,
            [
                ("container-1-request-0", "classInit", 1),
                ("container-2-request-0", "classInit", 2),
                ("container-3-request-0", "class", 1),
            ],
            id="three init containers, one sidecar, one regular container",
        ),
    ],
)
def test_create_requests(
    spec: dict[str, Any],
    resources: list[str],
    classes: ExtendedResourceClasses,
    expected: list[tuple[str, str, int]],
) -> None:
    requests, _ = extended_requests(spec, resources, classes)
    assert [(r.name, r.class_name, r.count) for r in requests] == expected


@pytest.mark.parametrize(
    ("spec", "resources", "classes", "expected"),
    [
        pytest.param(
            POD1,
            [ER, ER + "1"],
            MAP2,
            [("con0", ER, "container-0-request-0"), ("con0", ER + "1", "container-0-request-1")],
            id="one container, two requests",
        ),
        pytest.param(
            POD1_INIT_IMPLICIT,
            [ER, ER + "init", IMPLICIT],
            MAP_INIT,
            [
                ("init-con0", IMPLICIT, "container-0-request-0"),
                ("init-con0", ER + "init", "container-0-request-1"),
            ],
            id="one container, one explicit and one implicit request",
        ),
        pytest.param(
            POD2,
            [ER, ER + "1"],
            MAP2,
            [("con0", ER, "container-0-request-0"), ("con1", ER + "1", "container-1-request-0")],
            id="two containers, two requests",
        ),
        pytest.param(
            POD_INIT,
            [ER, ER + "init"],
            MAP_INIT,
            [("init-con0", ER + "init", "container-0-request-0"), ("con0", ER, "container-1-request-0")],
            id="one init container, one regular container, one request",
        ),
        pytest.param(
            POD_INIT2,
            [ER, ER + "init"],
            MAP_INIT,
            [
                ("init-con0", ER + "init", "container-1-request-0"),
                ("init-con1", ER + "init", "container-1-request-0"),
                ("con0", ER, "container-2-request-0"),
            ],
            id="three containers (two are init container), two requests",
        ),
        pytest.param(
            POD_INIT_IMPLICIT,
            [ER, ER + "init", IMPLICIT],
            MAP_INIT,
            [
                ("init-con0", ER + "init", "container-0-request-0"),
                ("init-con1", IMPLICIT, "container-1-request-0"),
                ("con0", ER, "container-2-request-0"),
            ],
            id="three containers (two are init container), both explicit and implicit resources",
        ),
        pytest.param(
            POD_INIT3,
            [ER, ER + "init"],
            MAP_INIT,
            [
                ("init-con0", ER + "init", "container-1-request-0"),
                ("sidecar-con1", ER + "init", "container-1-request-0"),
                ("init-con2", ER + "init", "container-2-request-0"),
                ("con0", ER, "container-3-request-0"),
            ],
            id="four containers (two are init container, one sidecar), three requests",
        ),
    ],
)
def test_create_mappings(
    spec: dict[str, Any],
    resources: list[str],
    classes: ExtendedResourceClasses,
    expected: list[tuple[str, str, str]],
) -> None:
    _, mappings = extended_requests(spec, resources, classes)
    got = sorted((m.request, m.container, m.resource) for m in mappings)
    assert got == sorted((r, c, res) for c, res, r in expected)


def test_the_oldest_class_keeps_an_explicit_name_and_every_class_its_implicit_one() -> None:
    classes = ExtendedResourceClasses(
        [
            dev_class("b", ER, "2026-01-02T00:00:00Z"),
            dev_class("a", ER, "2026-01-02T00:00:00Z"),
            dev_class("c", ER, "2026-01-03T00:00:00Z"),
        ]
    )
    explicit, implicit = classes.get(ER), classes.get("deviceclass.resource.kubernetes.io/c")
    assert explicit is not None and explicit.name == "a"  # same age: the first by name
    assert implicit is not None and implicit.name == "c"
    assert classes.get("example.com/other") is None


@pytest.mark.parametrize(
    ("name", "extended"),
    [
        (ER, True),
        (IMPLICIT, True),
        ("cpu", False),
        ("kubernetes.io/x", False),
        ("foo.kubernetes.io/x", False),
        ("requests.example.com/gpu", False),
    ],
)
def test_which_names_are_extended_resources(name: str, extended: bool) -> None:
    assert is_extended_resource_name(name) is extended


def test_only_resources_no_device_plugin_serves_on_the_node_go_through_dra() -> None:
    classes = ExtendedResourceClasses([dev_class("gpu", ER)])
    assert dra_resources({ER: 2, "cpu": 1, "other.com/x": 1}, {}, classes) == {ER: 2}
    assert dra_resources({ER: 2}, {ER: 8}, classes) == {}  # a device plugin serves it on this node


def test_a_pod_asking_example_com_gpu_2_is_served_by_dra() -> None:
    c = cluster()
    classes = ExtendedResourceClasses(c.classes.values())
    spec = {"containers": [container("main", {ER: "2", "cpu": "1"})]}
    resources = dra_resources({ER: 2}, {}, classes)
    requests, mappings = extended_requests(spec, resources, classes)
    claim = extended_claim("ml", "trainer", requests)
    answer = allocate_on_node(c.allocator.plan([claim]), node("gpu-node-1"))
    assert isinstance(answer, Allocation)
    assert [(r.request, r.device) for r in answer.claims[claim.key].results] == [
        ("container-0-request-1", "gpu-0"),
        ("container-0-request-1", "gpu-1"),
    ]  # 1: after "cpu" in sorted order
    assert [(m.container, m.request) for m in mappings] == [("main", "container-0-request-1")]
    obj = extended_claim_object("ml", "trainer", "uid-1", requests)
    assert obj["metadata"]["generateName"] == "trainer-extended-resources-"
    assert obj["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert obj["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-1",
            "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2},
        }
    ]
