"""The per-node counts of free whole devices (common/model/devices/bounds.py) decide a DynamicResources
Filter row only as the full search (``allocate_on_node``) would: randomized against the search, over
clusters of whole, shared, counter-consuming and tainted devices and pods of every claim shape
(``exactly`` with a count or ``All``, ``firstAvailable``, several requests and claims, constraints,
capacity requests, admin access, tolerations), pod after pod while the devices fill up; and whole
bursts through the cycle bind every pod where, and with the devices, the search alone binds them."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.devices.allocator import Allocator
from gpuq_k8s.common.model.devices.bounds import count_bound
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.classes import DeviceClass
from gpuq_k8s.common.model.devices.ledger import DeviceLedger
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.search import Allocation
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.plugins import dynamic_resources
from gpuq_k8s.scheduler.plugins.dynamic_resources import DynamicResources
from tests.testing import dra
from tests.testing.builders import MakeNode, MakePod
from tests.testing.scheduler import make_scheduler, plugin_of

NS = "ns"
MODEL = f'device.attributes["{dra.DRIVER}"].model'
SELECTORS = ("", f'{MODEL} == "h100"', f'{MODEL} == "a100"')
TAINT = {"key": "maintenance", "value": "soon", "effect": "NoSchedule"}


def _device(rng: random.Random, name: str, counter_set: str | None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.15:
        extra["allowMultipleAllocations"] = True
    elif roll < 0.3 and counter_set is not None:
        extra["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {"slots": {"value": str(rng.randint(1, 3))}}}
        ]
    if rng.random() < 0.1:
        extra["taints"] = [TAINT]
    memory = rng.choice(["40Gi", "80Gi"])
    return dra.device(name, {"model": rng.choice(["h100", "a100"])}, {"memory": memory}, **extra)


def _cluster(rng: random.Random) -> tuple[list[dict[str, Any]], list[str]]:
    objects: list[dict[str, Any]] = [dra.device_class("gpu")]
    nodes = [f"n{i}" for i in range(8)]
    for name in nodes:
        with_counters = rng.random() < 0.4
        devices = [
            _device(rng, f"gpu-{d}", "slots" if with_counters else None) for d in range(rng.randint(0, 5))
        ]
        if not devices:
            continue
        if with_counters:
            devices_slice = dra.resource_slice(f"{name}-gpus", name, devices)
            devices_slice["spec"]["pool"]["resourceSliceCount"] = 2
            counters = dra.resource_slice(
                f"{name}-counters",
                name,
                [],
                sharedCounters=[{"name": "slots", "counters": {"slots": {"value": str(rng.randint(2, 5))}}}],
            )
            counters["spec"]["pool"]["resourceSliceCount"] = 2
            del counters["spec"]["devices"]
            objects += [devices_slice, counters]
        else:
            objects.append(dra.resource_slice(f"{name}-gpus", name, devices))
    return objects, nodes


def _exactly(rng: random.Random, name: str, *, sub: bool = False) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if not sub and rng.random() < 0.08:
        extra["allocationMode"] = "All"
        count = None
    else:
        count = rng.choice([1, 1, 1, 2, 3])
    if not sub and rng.random() < 0.08:
        extra["adminAccess"] = True
    if rng.random() < 0.15:
        extra["capacity"] = {"requests": {"memory": rng.choice(["10Gi", "40Gi", "60Gi"])}}
    if rng.random() < 0.15:
        extra["tolerations"] = [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]
    request = dra.exactly(name, "gpu", count or 1, selector=rng.choice(SELECTORS), **extra)
    if count is None:
        del request["exactly"]["count"]
    if sub:
        body = dict(request["exactly"])
        return {"name": name, **body}
    return request


def _request(rng: random.Random, name: str) -> dict[str, Any]:
    if rng.random() < 0.35:
        subs = [_exactly(rng, f"s{k}", sub=True) for k in range(rng.randint(2, 3))]
        return dra.first_available(name, *subs)
    return _exactly(rng, name)


def _claim(rng: random.Random, name: str, uid: str) -> dict[str, Any]:
    requests = [_request(rng, f"r{k}") for k in range(rng.choice([1, 1, 1, 2]))]
    body = dra.claim(name, NS, *requests, uid=uid)
    if len(requests) == 2 and rng.random() < 0.5:
        attribute = f"{dra.DRIVER}/model"
        body["spec"]["devices"]["constraints"] = [{"requests": ["r0", "r1"], "matchAttribute": attribute}]
    return body


@pytest.mark.parametrize("seed", range(40))
def test_the_counts_decide_each_row_as_the_full_search(seed: int) -> None:
    """Every row the Filter passes, the full search fits on that node, and every row it rejects, the
    search rejects; then the pod is reserved on a random feasible row (or its reservation dropped), so
    the next pod meets devices in use, shares and counters consumed."""
    rng = random.Random(seed)
    objects, nodes = _cluster(rng)
    sched, _ = make_scheduler()
    for name in nodes:
        sched.set_node(MakeNode(name).alloc(cpu="8", memory="16Gi", pods="20").info())
    for obj in objects:
        sched.put_object(obj)
    plugin = plugin_of(sched, DynamicResources)
    decided = 0
    for i in range(14):
        names = [f"c{i}-{k}" for k in range(rng.choice([1, 1, 1, 2]))]
        for name in names:
            sched.put_object(_claim(rng, name, f"u-{name}"))
        body = dra.use_claims(MakePod(f"p{i}", NS).req(cpu="100m").uid(f"uid-p{i}").obj(), *names)
        info = PodInfo.from_dict(body)
        state = CycleState()
        assert plugin.pre_filter(state, info).is_success
        verdict = plugin.filter(state, info)
        claims = []
        for name in names:
            stored = sched.objects.get(kinds.RESOURCE_CLAIM, NS, name)
            assert stored is not None
            claims.append(ResourceClaim.from_dict(stored))
        allocator = plugin.view.ready_allocator()
        plan = allocator.plan(claims, info.uid)
        if count_bound(plan) is not None:
            decided += 1
        for row, name in enumerate(nodes):
            node_info = sched.cluster.nodes[row]
            assert node_info is not None and node_info.name == name
            exact = allocator.allocate(plan, node_info)
            assert bool(verdict.passed[row]) == isinstance(exact, Allocation), (seed, i, name, exact)
        feasible = [r for r in range(len(nodes)) if verdict.passed[r]]
        if feasible:
            row = rng.choice(feasible)
            assert plugin.reserve(state, info.with_node_name(nodes[row]), row).is_success
            if rng.random() < 0.2:
                plugin.unreserve(state, info, row)
    assert decided  # the counts took part


def _plan_of(*requests: dict[str, Any], constraints: bool = False) -> Any:
    classes = {"gpu": DeviceClass.from_dict(dra.device_class("gpu"))}
    allocator = Allocator(Inventory.build(()), classes, DeviceLedger())
    body = dra.claim("c", NS, *requests, uid="u")
    if constraints:
        body["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{dra.DRIVER}/model"}]
    return allocator.plan([ResourceClaim.from_dict(body)])


H100 = f'{MODEL} == "h100"'


@pytest.mark.parametrize(
    ("requests", "counts", "exact"),
    [
        ([dra.exactly("gpu", "gpu", selector=H100)], [[1]], True),
        ([dra.exactly("gpu", "gpu", 2)], [[2]], True),
        (
            [
                dra.first_available(
                    "gpu",
                    {"name": "a", "deviceClassName": "gpu", "count": 1},
                    {"name": "b", "deviceClassName": "gpu", "count": 2},
                )
            ],
            [[1, 2]],
            True,
        ),
        ([dra.exactly("a", "gpu"), dra.exactly("b", "gpu", 3)], [[1], [3]], False),
        ([{"name": "gpu", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}], None, False),
        ([dra.exactly("a", "gpu", adminAccess=True), dra.exactly("b", "gpu")], [[1]], False),
        ([dra.exactly("gpu", "gpu", 33)], [[]], True),
        ([dra.exactly("gpu", "gpu", capacity={"requests": {"memory": "1Gi"}})], [[1]], False),
    ],
)
def test_count_bound_of_each_claim_shape(
    requests: list[dict[str, Any]], counts: list[list[int]] | None, exact: bool
) -> None:
    """Which requests the counts bound (with each alternative's count: a subrequest over 32 devices
    never fits and is left out) and when they decide a row exactly."""
    bound = count_bound(_plan_of(*requests))
    if counts is None:
        assert bound is None
        return
    assert bound is not None
    assert [[count for _, count in alternatives] for alternatives in bound.requests] == counts
    assert bound.exact is exact


def test_constraints_make_the_bound_inexact() -> None:
    bound = count_bound(_plan_of(dra.exactly("gpu", "gpu"), constraints=True))
    assert bound is not None and not bound.exact


def _burst(seed: int) -> tuple[dict[str, str], dict[str, list[tuple[str, str, str]]]]:
    """The pods of ``seed``'s random cluster scheduled to the end (PreBind writing each claim, the
    ledger following the written claims): where each pod went and the devices of each claim."""
    rng = random.Random(seed)
    objects, nodes = _cluster(rng)
    sched, backend = make_scheduler()
    for name in nodes:
        sched.set_node(MakeNode(name).alloc(cpu="8", memory="16Gi", pods="20").info())
    for obj in objects:
        sched.put_object(obj)
    claims: list[str] = []
    for i in range(14):
        names = [f"c{i}-{k}" for k in range(rng.choice([1, 1, 1, 2]))]
        for name in names:
            sched.put_object(_claim(rng, name, f"u-{name}"))
        claims += names
        body = dra.use_claims(MakePod(f"p{i}", NS).req(cpu="100m").uid(f"uid-p{i}").obj(), *names)
        sched.add_pod(PodInfo.from_dict(body))
    while sched.schedule_one() is not None:
        pass
    devices = {}
    for name in claims:
        stored = sched.objects.get(kinds.RESOURCE_CLAIM, NS, name)
        assert stored is not None
        devices[name] = dra.devices_of(stored)
    return dict(backend.bindings), devices


@pytest.mark.parametrize("seed", range(10))
def test_a_burst_binds_every_pod_where_the_search_alone_binds_it(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole cycle with the counts, and with the counts switched off (every row searched): the
    same pods bound to the same nodes, the same devices allocated to each claim."""
    with_counts = _burst(seed)
    monkeypatch.setattr(dynamic_resources, "count_bound", lambda plan: None)
    search_alone = _burst(seed)
    assert with_counts == search_alone
    assert with_counts[0]  # some pods were bound
