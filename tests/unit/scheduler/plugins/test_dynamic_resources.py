"""DynamicResources in the cycle (scheduler/plugins/dynamic_resources.py) on the in-memory backend:
claims allocated by the pure allocator, charged in flight at Reserve, written at PreBind (finalizer,
then allocation and reservation) before the pod's binding, taken back when the binding fails, the
ledger rebuilt from claims after a restart, and pods retried on DRA events.

Cases after kube-scheduler's ``dynamicresources_test.go`` (v1.36.4): "claim-not-created"
(``pod "ns/p": ResourceClaim not created yet``), "deleted-claim" (``is being deleted``),
"not-for-pod" (``was not created for Pod``), "missing-class" (``device class ... does not exist``),
"resourceclaim in use" when reserved by 256 others, "allocation-on-other-node" (``resourceclaim not
available on the node``), "delayed-allocation" (the claim written with allocation and reservedFor,
the finalizer added), and the Unreserve after a failed binding.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpuq_k8s.common.model import kinds, plugin_names
from gpuq_k8s.common.model.devices.reservation import FINALIZER
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.status import Code
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins.dynamic_resources import DynamicResources
from tests.testing import dra
from tests.testing.builders import MakeNode, MakePod
from tests.testing.clock import FakeClock
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler, plugin_of

NS = "ns"
CLASS = dra.device_class("gpu")
TWO_GPUS = dra.resource_slice(
    "n1-gpus", "n1", [dra.device("gpu-0", {"model": "h100"}), dra.device("gpu-1", {"model": "a100"})]
)


def node(name: str = "n1") -> MakeNode:
    return MakeNode(name).alloc(cpu="8", memory="16Gi", pods="20")


def pod(name: str, *claims: str, templates: tuple[str, ...] = (), uid: str = "") -> dict[str, Any]:
    body = MakePod(name, NS).req(cpu="100m").uid(uid or f"uid-{name}").obj()
    return dra.use_claims(body, *claims, templates=templates)


def one_gpu(name: str, selector: str = "", **meta: Any) -> dict[str, Any]:
    return dra.claim(name, NS, dra.exactly("gpu", "gpu", selector=selector), uid=f"cuid-{name}", **meta)


def scheduler(*objects: dict[str, Any], nodes: tuple[str, ...] = ("n1",)) -> tuple[Scheduler, MemoryBackend]:
    sched, backend = make_scheduler()
    for name in nodes:
        sched.set_node(node(name).info())
    for obj in objects:
        sched.put_object(obj)
    return sched, backend


def add(sched: Scheduler, body: dict[str, Any]) -> None:
    sched.add_pod(PodInfo.from_dict(body))


def claim_obj(sched: Scheduler, name: str) -> dict[str, Any]:
    found = sched.objects.get(kinds.RESOURCE_CLAIM, NS, name)
    assert found is not None
    return dict(found)


def later(sched: Scheduler) -> None:
    """Past any backoff."""
    clock = sched.clock
    assert isinstance(clock, FakeClock)
    clock.now += 60


def attempt(sched: Scheduler) -> tuple[str, str, Code]:
    done = sched.schedule_one()
    assert done is not None
    return done.node, done.message, done.status.code


def test_delayed_allocation_writes_finalizer_then_allocation_and_reservation_before_the_binding() -> None:
    sched, backend = scheduler(
        CLASS, TWO_GPUS, one_gpu("c", 'device.attributes["gpu.e2e.gpuq.example.com"].model == "a100"')
    )
    add(sched, pod("p", "c"))
    bound, _, _ = attempt(sched)
    assert bound == "n1" and backend.bindings == {"ns/p": "n1"}
    claim = claim_obj(sched, "c")
    assert dra.devices_of(claim) == [(dra.DRIVER, "n1", "gpu-1")]  # the selector's device
    assert claim["metadata"]["finalizers"] == [FINALIZER]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
        "values"
    ] == ["n1"]
    # the finalizer (a conditional merge patch of the claim), then the status: both before the bind
    assert [ref for key, ref, _ in backend.writes] == ["ResourceClaim/ns/c", "ResourceClaim/ns/c"]
    assert "resourceVersion" in backend.writes[0][2]["metadata"]
    assert backend.writes[1][2]["metadata"] == {"uid": "cuid-c"}


def test_concurrent_pods_never_get_the_same_device() -> None:
    """Reserve charges the allocation in flight: the second pod's Filter sees gpu-0 taken before any
    claim is written, and the third finds nothing left."""
    sched, _ = scheduler(CLASS, TWO_GPUS, one_gpu("a"), one_gpu("b"), one_gpu("c"))
    plugin = plugin_of(sched, DynamicResources)
    states = []
    for name, claim in (("pa", "a"), ("pb", "b")):
        info = PodInfo.from_dict(pod(name, claim))
        state = CycleState()
        assert plugin.pre_filter(state, info).is_success
        assert plugin.filter(state, info).passed[0]
        assert plugin.reserve(state, info, 0).is_success
        states.append((state, info))
    first = plugin.view.ledger.allocation("ns/a")
    second = plugin.view.ledger.allocation("ns/b")
    assert first is not None and second is not None
    assert {first.results[0].device, second.results[0].device} == {"gpu-0", "gpu-1"}
    third = PodInfo.from_dict(pod("pc", "c"))
    state = CycleState()
    assert plugin.pre_filter(state, third).is_success
    verdict = plugin.filter(state, third)
    assert not verdict.passed[0]
    assert verdict.detail is not None
    detail = verdict.detail(0)
    assert detail is not None and "(gpu-0, gpu-1: in use)" in detail
    # Unreserve gives a device back (idempotent)
    plugin.unreserve(states[0][0], states[0][1], 0)
    plugin.unreserve(states[0][0], states[0][1], 0)
    state = CycleState()
    assert plugin.pre_filter(state, third).is_success
    assert plugin.filter(state, third).passed[0]


def test_a_burst_places_as_many_pods_as_devices_and_reports_the_rest() -> None:
    sched, backend = scheduler(CLASS, TWO_GPUS, one_gpu("a"), one_gpu("b"), one_gpu("c"))
    for name, claim in (("pa", "a"), ("pb", "b"), ("pc", "c")):
        add(sched, pod(name, claim))
    outcomes = [attempt(sched) for _ in range(3)]
    assert sorted(n for n, _, _ in outcomes) == ["", "n1", "n1"]
    devices = [dra.devices_of(claim_obj(sched, c)) for c in "abc"]
    taken = [d[0][2] for d in devices if d]
    assert sorted(taken) == ["gpu-0", "gpu-1"]
    failed = next(m for n, m, _ in outcomes if not n)
    assert failed == "0/1 nodes are available: 1 cannot allocate all claims."
    assert len(backend.bindings) == 2


def test_a_template_claim_waits_for_the_controller_then_is_allocated() -> None:
    sched, _ = scheduler(CLASS, TWO_GPUS)
    add(sched, pod("p", templates=("gpu",)))
    bound, message, code = attempt(sched)
    assert bound == "" and code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert message == '0/1 nodes are available: pod "ns/p": ResourceClaim not created yet.'
    # kube-controller-manager's resource-claim-controller: the claim, owned by the pod, then the status
    sched.put_object(one_gpu("p-gpu-x7k2", owner=("p", "uid-p")))
    later(sched)
    body = pod("p", templates=("gpu",))
    body["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2"}]}
    add(sched, body)
    bound, _, _ = attempt(sched)
    assert bound == "n1"
    assert claim_obj(sched, "p-gpu-x7k2")["status"]["reservedFor"][0]["uid"] == "uid-p"


def test_a_template_entry_the_controller_found_not_needed_is_skipped() -> None:
    sched, _ = scheduler(CLASS, TWO_GPUS)
    body = pod("p", templates=("gpu",))
    body["status"] = {"resourceClaimStatuses": [{"name": "gpu"}]}
    add(sched, body)
    assert attempt(sched)[0] == "n1"


def test_claims_that_cannot_be_used_keep_the_pod_pending_with_kube_schedulers_reasons() -> None:
    deleting = one_gpu("deleting")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    foreign = one_gpu("foreign", owner=("other", "uid-other"))
    sched, _ = scheduler(
        CLASS, TWO_GPUS, deleting, foreign, dra.claim("nic", NS, dra.exactly("nic", "nic"), uid="u")
    )
    add(sched, pod("missing", "absent"))
    add(sched, pod("del", "deleting"))
    generated = pod("theirs", templates=("gpu",))
    generated["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "foreign"}]}
    add(sched, generated)
    add(sched, pod("classless", "nic"))
    messages = {}
    for _ in range(4):
        done = sched.schedule_one()
        assert done is not None and done.node == ""
        assert done.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        messages[done.pod.name] = done.message
    assert 'resourceclaim.resource.k8s.io "absent" not found' in messages["missing"]
    assert 'resourceclaim "deleting" is being deleted' in messages["del"]
    assert (
        "ResourceClaim ns/foreign was not created for Pod ns/theirs (Pod is not owner)" in messages["theirs"]
    )
    assert "request nic: device class nic does not exist" in messages["classless"]


def test_a_missing_class_is_retried_when_the_class_appears() -> None:
    sched, _ = scheduler(TWO_GPUS, one_gpu("c"))
    add(sched, pod("p", "c"))
    assert attempt(sched)[0] == ""
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool == "unschedulable"
    sched.put_object(CLASS)
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool != "unschedulable"
    later(sched)
    assert attempt(sched)[0] == "n1"


def test_a_claim_made_after_the_pod_retries_it() -> None:
    """A ``resourceClaimName`` the pod names before the claim exists (no pod update follows): the
    claim's creation moves the pod (kube-scheduler's ``isSchedulableAfterClaimChange``), and it binds."""
    sched, _ = scheduler(CLASS, TWO_GPUS)
    add(sched, pod("p", "c"))
    bound, message, _ = attempt(sched)
    assert bound == "" and 'resourceclaim.resource.k8s.io "c" not found' in message
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool == "unschedulable"
    sched.put_object(one_gpu("c"))
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool != "unschedulable"
    later(sched)
    assert attempt(sched)[0] == "n1"


def test_a_new_slice_retries_the_pod_an_unrelated_claim_does_not() -> None:
    sched, _ = scheduler(CLASS, one_gpu("c"), one_gpu("other"), nodes=("n1", "n2"))
    add(sched, pod("p", "c"))
    bound, message, _ = attempt(sched)
    assert bound == "" and "2 cannot allocate all claims" in message
    other = one_gpu("other")
    other["metadata"]["labels"] = {"touched": "yes"}
    sched.put_object(other)  # an unrelated claim that frees nothing
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool == "unschedulable"
    sched.put_object(dra.resource_slice("n2-gpus", "n2", [dra.device("gpu-0")]))
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool != "unschedulable"
    later(sched)
    assert attempt(sched)[0] == "n2"


def test_a_shared_claim_is_allocated_once_and_reserved_for_each_pod() -> None:
    sched, backend = scheduler(CLASS, TWO_GPUS, one_gpu("shared"), nodes=("n1", "n2"))
    add(sched, pod("first", "shared"))
    assert attempt(sched)[0] == "n1"
    add(sched, pod("second", "shared"))
    assert attempt(sched)[0] == "n1"  # where its allocation is
    claim = claim_obj(sched, "shared")
    assert [c["name"] for c in claim["status"]["reservedFor"]] == ["first", "second"]
    assert len(dra.devices_of(claim)) == 1
    # the second pod wrote only its reservation: no allocation, no finalizer again
    second_writes = [patch for key, _, patch in backend.writes if key == "ns/second"]
    assert len(second_writes) == 1 and "allocation" not in second_writes[0]["status"]


def test_an_allocated_claim_is_used_only_where_its_node_selector_allows() -> None:
    sched, _ = scheduler(CLASS, TWO_GPUS, one_gpu("shared"), nodes=("n1", "n2"))
    add(sched, pod("first", "shared"))
    assert attempt(sched)[0] == "n1"
    sched.set_node(node("n1").taint("k", "NoSchedule", "v").info())
    add(sched, pod("second", "shared"))
    _, message, _ = attempt(sched)
    assert "1 resourceclaim not available on the node" in message


def test_a_claim_in_use_by_256_consumers_keeps_the_pod_waiting() -> None:
    sched, _ = scheduler(CLASS, TWO_GPUS, one_gpu("busy"))
    add(sched, pod("owner", "busy"))
    assert attempt(sched)[0] == "n1"
    busy = claim_obj(sched, "busy")
    busy["status"] = dict(busy["status"])
    busy["status"]["reservedFor"] = [
        {"resource": "pods", "name": f"x{i}", "uid": f"x{i}"} for i in range(256)
    ]
    sched.put_object(busy)
    add(sched, pod("late", "busy"))
    _, message, code = attempt(sched)
    assert code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and "is in use by 256 consumers" in message


def test_a_failed_binding_takes_the_reservation_back_and_the_pod_is_retried() -> None:
    clock = FakeClock()
    sched, backend = make_scheduler(clock=clock)
    sched.set_node(node().info())
    for obj in (CLASS, TWO_GPUS, one_gpu("c")):
        sched.put_object(obj)
    backend.fail_binds.add("ns/p")
    add(sched, pod("p", "c"))
    done = sched.schedule_one()
    assert done is not None
    assert backend.rolled_back == [("ns/p", "ResourceClaim/ns/c")]
    claim = claim_obj(sched, "c")
    assert "reservedFor" not in claim["status"]  # taken back; the allocation stays, as upstream
    assert dra.devices_of(claim) == [(dra.DRIVER, "n1", "gpu-0")]
    assert "ns/p" in sched.pending
    backend.fail_binds.clear()
    clock.now += 60  # past its backoff
    bound, _, _ = attempt(sched)
    assert bound == "n1"
    claim = claim_obj(sched, "c")
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert dra.devices_of(claim) == [(dra.DRIVER, "n1", "gpu-0")]  # the same allocation, reused


def test_a_restarted_scheduler_rebuilds_the_ledger_from_the_claims() -> None:
    first, _ = scheduler(CLASS, TWO_GPUS, one_gpu("a"))
    add(first, pod("pa", "a"))
    assert attempt(first)[0] == "n1"
    allocated = claim_obj(first, "a")
    # A new process: the informers replay the objects, the allocated claim among them.
    second, _ = scheduler(CLASS, TWO_GPUS, allocated, one_gpu("b"), one_gpu("c"))
    add(second, pod("pb", "b"))
    add(second, pod("pc", "c"))
    outcomes = [attempt(second) for _ in range(2)]
    assert sorted(n for n, _, _ in outcomes) == ["", "n1"]
    taken = {dra.devices_of(claim_obj(second, c))[0][2] for c in "bc" if dra.devices_of(claim_obj(second, c))}
    assert taken == {"gpu-1"}  # gpu-0 is a's, as its status says


def test_predicate_switch_off_places_claims_as_if_absent() -> None:
    config = config_text(
        "priority, gang",
        "predicates",
        arguments={"predicates": {"predicate.DynamicResourceAllocationEnable": False}},
    )
    sched, _ = make_scheduler(config=config)
    assert sched.framework.plugin(plugin_names.DYNAMIC_RESOURCES) is None
    sched.set_node(node().info())
    add(sched, pod("p", templates=("gpu",)))
    assert attempt(sched)[0] == "n1"


def test_a_configuration_without_predicates_still_allocates() -> None:
    sched, _ = make_scheduler(config=config_text("priority, gang", "capacity-scheduling"))
    sched.set_node(node().info())
    for obj in (CLASS, TWO_GPUS, one_gpu("c")):
        sched.put_object(obj)
    add(sched, pod("p", "c"))
    assert attempt(sched)[0] == "n1"
    assert dra.devices_of(claim_obj(sched, "c"))


def test_a_pod_without_claims_is_skipped() -> None:
    sched, _ = scheduler()
    sched.add_pod(MakePod("q", NS).req(cpu="1").info())
    assert attempt(sched)[0] == "n1"


def _random_cluster(rng: random.Random) -> tuple[list[dict[str, Any]], list[str]]:
    """Nodes with 0-4 devices of two models, some shared (allowMultipleAllocations), and claims asking
    1-3 devices of a model or of any."""
    objects: list[dict[str, Any]] = [CLASS]
    nodes = [f"n{i}" for i in range(6)]
    for name in nodes:
        devices = []
        for d in range(rng.randint(0, 4)):
            extra: dict[str, Any] = {}
            if rng.random() < 0.15:
                extra = {"allowMultipleAllocations": True}
            devices.append(
                dra.device(f"gpu-{d}", {"model": rng.choice(["h100", "a100"])}, {"memory": "80Gi"}, **extra)
            )
        if devices:
            objects.append(dra.resource_slice(f"{name}-gpus", name, devices))
    return objects, nodes


@pytest.mark.parametrize("seed", range(12))
def test_filter_rows_equal_the_search_on_each_node(seed: int) -> None:
    """The per-row free counts (whole devices) and the search (shared devices) decide each row as the
    exact search on that node would, pod after pod while the devices fill up."""
    rng = random.Random(seed)
    objects, nodes = _random_cluster(rng)
    sched, _ = scheduler(*objects, nodes=tuple(nodes))
    plugin = plugin_of(sched, DynamicResources)
    for i in range(10):
        selector = rng.choice(["", 'device.attributes["gpu.e2e.gpuq.example.com"].model == "h100"'])
        count = rng.randint(1, 3)
        sched.put_object(
            dra.claim(f"c{i}", NS, dra.exactly("gpu", "gpu", count=count, selector=selector), uid=f"u{i}")
        )
        info = PodInfo.from_dict(pod(f"p{i}", f"c{i}"))
        state = CycleState()
        assert plugin.pre_filter(state, info).is_success
        verdict = plugin.filter(state, info)
        data_plan = plugin.view.ready_allocator().plan(
            [plugin.view.claim(claim_obj(sched, f"c{i}"))], info.uid
        )
        for row, name in enumerate(nodes):
            node_info = sched.cluster.nodes[row]
            assert node_info is not None and node_info.name == name
            exact = plugin.view.ready_allocator().allocate(data_plan, node_info)
            assert bool(verdict.passed[row]) == isinstance(exact, Allocation), (seed, i, name)
        feasible = [r for r in range(len(nodes)) if verdict.passed[r]]
        if feasible:
            row = rng.choice(feasible)
            assert plugin.reserve(state, info.with_node_name(nodes[row]), row).is_success
