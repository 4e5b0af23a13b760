"""crossquota over DRA (issue 26, docs/design.md "Quota over devices"): a pod whose accelerators come
as DRA devices is a GPU pod, never limited by a GPU node's CPU-pod quota nor counted in it, whether
it has claims or asks an extended resource a DeviceClass's ``extendedResourceName`` serves (its
implicit claim: the same worker for GPUResourceQuota, the same GPU pod here).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.crossquota import CrossQuota
from tests.testing import dra
from tests.testing.builders import MakeNode, MakePod
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler, plugin_of

NS = "ns"
H100 = "example.com/h100"
ARGS = {"gpu-resource-names": "nvidia.com/gpu", "quota-resources": "cpu", "quota.cpu": "3"}


def world() -> tuple[Scheduler, MemoryBackend]:
    """One GPU node (a device plugin's ``nvidia.com/gpu``, so crossquota limits its CPU pods to 3 cpu)
    that also publishes two DRA devices of a class serving ``example.com/h100``."""
    config = config_text("priority, gang", ["predicates", "crossquota"], arguments={"crossquota": ARGS})
    sched, backend = make_scheduler(config=config)
    sched.set_node(MakeNode("n1").alloc(cpu="16", memory="64Gi", pods="110").gpus(8).info())
    sched.put_object(dra.device_class("h100", extended_resource_name=H100))
    sched.put_object(dra.resource_slice("n1-gpus", "n1", [dra.device("gpu-0"), dra.device("gpu-1")]))
    sched.put_object(dra.claim("c", NS, dra.exactly("gpu", "h100")))
    return sched, backend


def big_cpu_pod(name: str, how: str) -> PodInfo:
    """A pod asking 4 cpu (over the node's CPU-pod quota of 3) and, by ``how``, a device."""
    made = MakePod(name, NS).uid(f"uid-{name}")
    if how == "extended resource":
        return PodInfo.from_dict(made.req({"cpu": "4", H100: "1"}).obj())
    body: dict[str, Any] = made.req(cpu="4").obj()
    return PodInfo.from_dict(dra.use_claims(body, "c") if how == "claim" else body)


@pytest.mark.parametrize("how", ["claim", "extended resource"])
def test_a_pod_with_dra_devices_is_a_gpu_pod_unlimited_on_a_gpu_node(how: str) -> None:
    sched, backend = world()
    sched.add_pod(big_cpu_pod("p", how))
    done = sched.schedule_one()
    assert done is not None and done.node == "n1", done
    # Not counted as CPU-pod usage either: a CPU pod of 3 cpu still fits the node's quota.
    plugin = plugin_of(sched, CrossQuota)
    row = sched.cluster.row_of["n1"]
    assert plugin._used_rows[row] == [0]
    sched.add_pod(PodInfo.from_dict(MakePod("cpu", NS).uid("uid-cpu").req(cpu="3").obj()))
    assert (sched.schedule_one() or done).node == "n1"
    assert sorted(backend.bindings) == ["ns/cpu", "ns/p"]


def test_a_cpu_pod_over_the_quota_is_refused_there() -> None:
    """The control: without devices, the same pod is a CPU pod and 4 cpu is over the node's 3."""
    sched, backend = world()
    sched.add_pod(big_cpu_pod("p", "none"))
    done = sched.schedule_one()
    assert done is not None and done.node == "" and not backend.bindings


@pytest.mark.parametrize("how", ["claim", "extended resource"])
def test_a_device_pod_after_a_cpu_pod_of_the_same_requests_is_still_a_gpu_pod(how: str) -> None:
    """The prepared pod is memoised by requests: a CPU pod of 4 cpu tried first must not make the
    next pod of 4 cpu with devices a CPU pod."""
    sched, backend = world()
    sched.add_pod(PodInfo.from_dict(MakePod("a-cpu", NS).uid("uid-a").req(cpu="4").obj()))
    first = sched.schedule_one()
    assert first is not None and first.node == ""
    body: dict[str, Any] = MakePod("b-dev", NS).uid("uid-b").req(cpu="4").obj()
    if how == "claim":
        body = dra.use_claims(body, "c")
    else:
        body["spec"]["containers"][0]["resources"]["requests"][H100] = "1"
    sched.add_pod(PodInfo.from_dict(body))
    tried = sched.schedule_one()
    while tried is not None and tried.pod.name != "b-dev":
        tried = sched.schedule_one()
    assert tried is not None and tried.node == "n1"
    assert backend.bindings == {"ns/b-dev": "n1"}
