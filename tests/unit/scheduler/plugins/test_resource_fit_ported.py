"""NodeResourcesFit as gpuq runs it: inside ``predicates`` (scheduler/plugins/predicates.py) and alone
for a configuration without it (scheduler/plugins/resource_fit.py), over the request of
common/model/pods.py (sidecars by KEP-753's formula, pod-level resources, overhead). Ported from
kube-scheduler v1.36 ``framework/plugins/noderesources/fit_test.go``: TestEnoughRequests (the cases
of requests, init containers, overhead, extended resources, hugepages, pod-level resources),
TestNotEnoughRequests (the pod count), TestStorageRequests (ephemeral-storage) and
TestRestartableInitContainers (sidecars), each row named after its upstream case.

Each case's node is upstream's: allocatable cpu 10m, memory 20, pods 32, example.com/aaa 5,
ephemeral-storage 20, hugepages-2Mi 5, holding one pod with the usage given. The verdict is the node's
reasons (kube's Status reasons) and whether it is unresolvable (UnschedulableAndUnresolvable).

Not ported: IgnoredResources/IgnoredResourceGroups (NodeResourcesFitArgs, which Volcano's configuration
does not expose), the DRA extended-resource cases (gpuq allocates no claims yet), the feature-gate-off
cases of sidecars (SidecarContainers is locked on in 1.36).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import FilterPlugin, PreFilterPlugin
from gpuq_k8s.scheduler.plugins.resource_fit import NodeResourcesFit
from tests.testing.builders import MakeNode, MakePod
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGE = "hugepages-2Mi"
CPU, MEM, EPH = "Insufficient cpu", "Insufficient memory", "Insufficient ephemeral-storage"

# The two ways gpuq runs the fit: predicates (its last check), and allocate's own without predicates.
CONFIGS = {
    "predicates": config_text("priority, gang", "predicates"),
    "allocate-alone": config_text("priority, gang", "capacity-scheduling"),
}


def usage(
    cpu: int = 0, memory: int = 0, storage: int = 0, scalars: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """kube's ``framework.Resource`` as a container's requests (milli-cpu, bytes, counts); zeros left out."""
    out: dict[str, Any] = {
        **({"cpu": f"{cpu}m"} if cpu else {}),
        **({"memory": str(memory)} if memory else {}),
    }
    if storage:
        out["ephemeral-storage"] = str(storage)
    out.update({k: str(v) for k, v in (scalars or {}).items() if v})
    return out


def resource_pod(*containers: Mapping[str, Any]) -> MakePod:
    """kube's ``newResourcePod``: one container per usage."""
    pod = MakePod("p")
    pod._obj["spec"]["containers"] = [
        {"name": f"c{i}", "resources": {"requests": dict(requests)}} for i, requests in enumerate(containers)
    ]
    return pod


def init_pod(pod: MakePod, *inits: Mapping[str, Any]) -> MakePod:
    """kube's ``newResourceInitPod``: classic init containers with these usages."""
    for requests in inits:
        pod.init_container(dict(requests))
    return pod


def pod_level(pod: MakePod, requests: Mapping[str, str]) -> MakePod:
    """kube's ``newPodLevelResourcesPod``: ``spec.resources.requests``."""
    return pod.spec(resources={"requests": dict(requests)})


def node(
    cpu: int = 10, memory: int = 20, pods: int = 32, *, ext_a: int = 5, storage: int = 20, huge: int = 5
) -> MakeNode:
    """kube's ``makeAllocatableResources``."""
    return MakeNode("n1").alloc(
        {
            "cpu": f"{cpu}m",
            "memory": str(memory),
            "pods": str(pods),
            EXT_A: str(ext_a),
            "ephemeral-storage": str(storage),
            HUGE: str(huge),
        }
    )


def verdict(
    config: str, pod: MakePod, existing: Mapping[str, Any] | None, at: MakeNode
) -> tuple[set[str], bool]:
    """The node's reasons and whether it is unresolvable, from the plugin that runs the fit."""
    sched, _ = make_scheduler(config=CONFIGS[config])
    sched.set_node(at.info())
    if existing is not None:
        sched.add_pod(resource_pod(existing).name("existing").node("n1").info())
    plugin = _fit_plugin(sched)
    info = pod.info()
    state = CycleState()
    if isinstance(plugin, PreFilterPlugin):
        assert plugin.pre_filter(state, info).is_success
    result = plugin.filter(state, info)
    row = sched.cluster.row_of["n1"]
    reasons = {message for mask, message in result.reasons() if mask[row]}
    assert bool(result.passed[row]) is (not reasons)
    return reasons, bool(result.unresolvable is not None and result.unresolvable[row])


def _fit_plugin(sched: Scheduler) -> FilterPlugin:
    return next(p for p in sched.framework.filter_plugins if isinstance(p, NodeResourcesFit))


# TestEnoughRequests: (name, pod, the node's existing pod's usage, reasons, unresolvable)
ENOUGH = [
    ("no resources requested always fits", MakePod("p"), usage(10, 20), set(), False),
    ("too many resources fails", resource_pod(usage(1, 1)), usage(10, 20), {CPU, MEM}, False),
    (
        "too many resources fails due to init container cpu",
        init_pod(resource_pod(usage(1, 1)), usage(3, 1)),
        usage(8, 19),
        {CPU},
        False,
    ),
    (
        "too many resources fails due to highest init container cpu",
        init_pod(resource_pod(usage(1, 1)), usage(3, 1), usage(2, 1)),
        usage(8, 19),
        {CPU},
        False,
    ),
    (
        "too many resources fails due to init container memory",
        init_pod(resource_pod(usage(1, 1)), usage(1, 3)),
        usage(9, 19),
        {MEM},
        False,
    ),
    (
        "too many resources fails due to highest init container memory",
        init_pod(resource_pod(usage(1, 1)), usage(1, 3), usage(1, 2)),
        usage(9, 19),
        {MEM},
        False,
    ),
    (
        "init container fits because it's the max, not sum, of containers and init containers",
        init_pod(resource_pod(usage(1, 1)), usage(1, 1)),
        usage(9, 19),
        set(),
        False,
    ),
    (
        "multiple init containers fit because it's the max, not sum, of containers and init containers",
        init_pod(resource_pod(usage(1, 1)), usage(1, 1), usage(1, 1)),
        usage(9, 19),
        set(),
        False,
    ),
    ("both resources fit", resource_pod(usage(1, 1)), usage(5, 5), set(), False),
    ("one resource memory fits", resource_pod(usage(2, 1)), usage(9, 5), {CPU}, False),
    ("one resource cpu fits", resource_pod(usage(1, 2)), usage(5, 19), {MEM}, False),
    ("equal edge case", resource_pod(usage(5, 1)), usage(5, 19), set(), False),
    (
        "equal edge case for init container",
        init_pod(resource_pod(usage(4, 1)), usage(5, 1)),
        usage(5, 19),
        set(),
        False,
    ),
    ("extended resource fits", resource_pod(usage(scalars={EXT_A: 1})), usage(), set(), False),
    (
        "extended resource fits for init container",
        init_pod(resource_pod(usage()), usage(scalars={EXT_A: 1})),
        usage(),
        set(),
        False,
    ),
    (
        "extended resource capacity enforced",
        resource_pod(usage(1, 1, scalars={EXT_A: 10})),
        usage(),
        {f"Insufficient {EXT_A}"},
        True,
    ),
    (
        "extended resource capacity enforced for init container",
        init_pod(resource_pod(usage()), usage(1, 1, scalars={EXT_A: 10})),
        usage(),
        {f"Insufficient {EXT_A}"},
        True,
    ),
    (
        "extended resource allocatable enforced",
        resource_pod(usage(1, 1, scalars={EXT_A: 1})),
        usage(scalars={EXT_A: 5}),
        {f"Insufficient {EXT_A}"},
        False,
    ),
    (
        "extended resource allocatable enforced for init container",
        init_pod(resource_pod(usage()), usage(1, 1, scalars={EXT_A: 1})),
        usage(scalars={EXT_A: 5}),
        {f"Insufficient {EXT_A}"},
        False,
    ),
    (
        "extended resource allocatable enforced for multiple containers",
        resource_pod(usage(1, 1, scalars={EXT_A: 3}), usage(1, 1, scalars={EXT_A: 3})),
        usage(scalars={EXT_A: 2}),
        {f"Insufficient {EXT_A}"},
        True,
    ),
    (
        "extended resource allocatable admits multiple init containers",
        init_pod(resource_pod(usage()), usage(1, 1, scalars={EXT_A: 3}), usage(1, 1, scalars={EXT_A: 3})),
        usage(scalars={EXT_A: 2}),
        set(),
        False,
    ),
    (
        "extended resource allocatable enforced for multiple init containers",
        init_pod(resource_pod(usage()), usage(1, 1, scalars={EXT_A: 6}), usage(1, 1, scalars={EXT_A: 3})),
        usage(scalars={EXT_A: 2}),
        {f"Insufficient {EXT_A}"},
        True,
    ),
    (
        "extended resource allocatable enforced for unknown resource",
        resource_pod(usage(1, 1, scalars={EXT_B: 1})),
        usage(),
        {f"Insufficient {EXT_B}"},
        True,
    ),
    (
        "extended resource allocatable enforced for unknown resource for init container",
        init_pod(resource_pod(usage()), usage(1, 1, scalars={EXT_B: 1})),
        usage(),
        {f"Insufficient {EXT_B}"},
        True,
    ),
    (
        "kubernetes.io resource capacity enforced",
        resource_pod(usage(1, 1, scalars={K8S_IO_A: 10})),
        usage(),
        {f"Insufficient {K8S_IO_A}"},
        True,
    ),
    (
        "kubernetes.io resource capacity enforced for init container",
        init_pod(resource_pod(usage()), {"cpu": "1m", "memory": "1", K8S_IO_B: "10"}),
        usage(),
        {f"Insufficient {K8S_IO_B}"},
        True,
    ),
    (
        "hugepages resource capacity enforced",
        resource_pod(usage(1, 1, scalars={HUGE: 10})),
        usage(),
        {f"Insufficient {HUGE}"},
        True,
    ),
    (
        "hugepages resource capacity enforced for init container",
        init_pod(resource_pod(usage()), usage(1, 1, scalars={HUGE: 10})),
        usage(),
        {f"Insufficient {HUGE}"},
        True,
    ),
    (
        "hugepages resource allocatable enforced for multiple containers",
        resource_pod(usage(1, 1, scalars={HUGE: 3}), usage(1, 1, scalars={HUGE: 3})),
        usage(scalars={HUGE: 2}),
        {f"Insufficient {HUGE}"},
        True,
    ),
    (
        "resources + pod overhead fits",
        resource_pod(usage(1, 1)).spec(overhead={"cpu": "3m", "memory": "13"}),
        usage(5, 5),
        set(),
        False,
    ),
    (
        "requests + overhead does not fit for memory",
        resource_pod(usage(1, 1)).spec(overhead={"cpu": "1m", "memory": "15"}),
        usage(5, 5),
        {MEM},
        False,
    ),
    (
        "skip checking extended resource request with quantity zero via resource groups",
        resource_pod({"cpu": "1m", "memory": "1", EXT_A: "0"}),
        usage(scalars={EXT_A: 6}),
        set(),
        False,
    ),
    (
        "skip checking resource request with quantity zero",
        resource_pod(usage(scalars={EXT_A: 1})),
        usage(20, 30, scalars={EXT_A: 1}),
        set(),
        False,
    ),
    (
        "both pod-level and container-level resources fit",
        pod_level(resource_pod(usage(1, 1)), {"cpu": "1m", "memory": "2"}),
        usage(5, 5),
        set(),
        False,
    ),
    (
        "pod-level cpu resource not fit",
        pod_level(resource_pod(usage(1, 1)), {"cpu": "7m", "memory": "2"}),
        usage(5, 5),
        {CPU},
        False,
    ),
    (
        "pod-level memory resource not fit",
        pod_level(resource_pod(usage(1, 1)), {"cpu": "3m", "memory": "2"}),
        usage(5, 19),
        {MEM},
        False,
    ),
    (
        "pod-level hugepages resource fit",
        pod_level(MakePod("p"), {"cpu": "3m", "memory": "2", HUGE: "5"}),
        None,
        set(),
        False,
    ),
    (
        "both pod-level and container-level hugepages resource fit",
        pod_level(resource_pod(usage(1, 1, scalars={HUGE: 3})), {"cpu": "3m", "memory": "2", HUGE: "5"}),
        None,
        set(),
        False,
    ),
    (
        "pod-level hugepages resource not fit",
        pod_level(MakePod("p"), {"cpu": "3m", "memory": "2", HUGE: "10"}),
        None,
        {f"Insufficient {HUGE}"},
        True,
    ),
    (
        "one pod-level cpu resource fits and all init and non-init containers resources fit",
        init_pod(pod_level(resource_pod(usage(1, 1)), {"cpu": "3m", "memory": "2"}), usage(1, 1)),
        usage(5, 19),
        {MEM},
        False,
    ),
]


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize(
    ("name", "pod", "existing", "reasons", "unresolvable"), ENOUGH, ids=[c[0] for c in ENOUGH]
)
def test_enough_requests(
    config: str,
    *,
    name: str,
    pod: MakePod,
    existing: dict[str, Any] | None,
    reasons: set[str],
    unresolvable: bool,
) -> None:
    assert verdict(config, pod, existing, node()) == (reasons, unresolvable)


# TestNotEnoughRequests: a node of one pod that holds one already: "Too many pods", never unresolvable.
NOT_ENOUGH = [
    (
        "even without specified resources, predicate fails when there's no space for additional pod",
        MakePod("p"),
        usage(10, 20),
    ),
    (
        "even if both resources fit, predicate fails when there's no space for additional pod",
        resource_pod(usage(1, 1)),
        usage(5, 5),
    ),
    (
        "even for equal edge case, predicate fails when there's no space for additional pod",
        resource_pod(usage(5, 1)),
        usage(5, 19),
    ),
    (
        "even for equal edge case, predicate fails when there's no space for additional pod due to "
        "init container",
        init_pod(resource_pod(usage(5, 1)), usage(5, 1)),
        usage(5, 19),
    ),
]


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize(("name", "pod", "existing"), NOT_ENOUGH, ids=[c[0] for c in NOT_ENOUGH])
def test_not_enough_requests(config: str, name: str, pod: MakePod, existing: dict[str, Any]) -> None:
    at = node(10, 20, 1, ext_a=0, storage=0, huge=0)
    assert verdict(config, pod, existing, at) == ({"Too many pods"}, False)


# TestStorageRequests
STORAGE = [
    ("empty storage requested, and pod fits", resource_pod(usage(1, 1)), usage(2, 10), set(), False),
    (
        "storage ephemeral local storage request exceeds allocatable",
        resource_pod(usage(storage=25)),
        usage(2, 2),
        {EPH},
        True,
    ),
    (
        "ephemeral local storage is sufficient",
        init_pod(resource_pod(usage(storage=5))),
        usage(2, 2, 10),
        set(),
        False,
    ),
    ("pod fits", resource_pod(usage(storage=10)), usage(2, 2), set(), False),
]


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize(
    ("name", "pod", "existing", "reasons", "unresolvable"), STORAGE, ids=[c[0] for c in STORAGE]
)
def test_storage_requests(
    config: str, *, name: str, pod: MakePod, existing: dict[str, Any], reasons: set[str], unresolvable: bool
) -> None:
    assert verdict(config, pod, existing, node()) == (reasons, unresolvable)


def restartable(request: str | None, sidecar: str | None) -> MakePod:
    """kube's ``newPodWithRestartableInitContainers``: a regular container and a sidecar, with cpu."""
    pod = resource_pod({} if request is None else {"cpu": request})
    return pod.sidecar({} if sidecar is None else {"cpu": sidecar})


# TestRestartableInitContainers (the SidecarContainers gate is locked on): a node of cpu 2m, one pod.
RESTARTABLE = [
    (
        "allow pod without restartable init containers if sidecar containers is enabled",
        resource_pod({}),
        set(),
        False,
    ),
    (
        "allow pod with restartable init containers if sidecar containers is enabled",
        restartable(None, None),
        set(),
        False,
    ),
    (
        "allow pod if the total requested resources do not exceed the node's allocatable resources",
        restartable("1m", "1m"),
        set(),
        False,
    ),
    (
        "not allow pod if the total requested resources do exceed the node's allocatable resources",
        restartable("1m", "2m"),
        {CPU},
        True,
    ),
]


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize(
    ("name", "pod", "reasons", "unresolvable"), RESTARTABLE, ids=[c[0] for c in RESTARTABLE]
)
def test_restartable_init_containers(
    config: str, name: str, pod: MakePod, reasons: set[str], unresolvable: bool
) -> None:
    at = node(2, 0, 1, ext_a=0, storage=0, huge=0)
    assert verdict(config, pod, None, at) == (reasons, unresolvable)
