"""Volcano's capacity-plugin enqueue cases, ported to gpuq's elastic enqueue rule
(common/model/elastic/enqueue.py; design.md Semantics 4, "Enqueue").

Upstream: volcano-sh/volcano ``pkg/scheduler/plugins/capacity/capacity_test.go`` (master ed72c7c), the
cases that exercise ``jobEnqueueable`` (``minReq + allocated + inqueue - elastic <= realCapability``,
on the dimensions the job asks). The mapping:

- a Volcano Queue is one namespace's ElasticQuota (gpuq's quota is per namespace, Volcano's per queue:
  the upstream pods all live in ``ns1`` and differ by queue, so each queue here is a namespace named
  after it);
- the queue's ``capability`` is the ElasticQuota's ``max``; its ``deserved`` is ``min`` (what the
  namespace is guaranteed and others may borrow while it is idle);
- ``allocated`` is what the namespace's pods charge (``ElasticQuotaInfos.reserve`` per pod);
- ``inqueue`` is what its Inqueue jobs reserve and their pods do not charge yet (the ``reserved``
  argument, :func:`~common.model.elastic.enqueue.unbound_part`);
- a device request of DRA (``gpu.com`` devices) is the resource deviceClassMappings maps its class to
  (``nvidia.com/gpu``: design.md "Quota over devices"), as the plugin hands the rule mapped requests.

Where gpuq's documented semantics differ from Volcano's, the case says so and asserts gpuq's:

- Volcano never compares enqueue with ``deserved``; gpuq, for a resource some ElasticQuota guarantees,
  also requires the job to fit its own ``min`` or the guaranteed pool (sum of every ``min``);
- Volcano subtracts ``elastic`` (what running jobs hold beyond their minAvailable) from ``allocated``;
  gpuq counts every charged pod (its pods beyond minMember are preemptible, but hold the quota until
  preempted);
- Volcano's refusal is one reason string; gpuq's names the quota, resource and amounts, and tells a
  job that can never fit (more than ``max`` itself: "never", UnschedulableAndUnresolvable) from one
  that waits for room.

Not ported: the hierarchical-queue cases (gpuq's ElasticQuotas are flat, one per namespace), case4 of
``TestEnqueueAndAllocatable`` (a closed Queue refuses every job: a Queue's state, not an ElasticQuota
rule; the queue plugins check it). ``TestJobEnqueuedOnOtherPluginsReject`` is a framework rule
(``enqueued`` only after every plugin admitted), ported as a cycle test in
tests/unit/scheduler/plugins/test_elastic_enqueue_cycle.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from gpuq_k8s.common.model.elastic.enqueue import enqueue_refusal, job_demand, unbound_part
from gpuq_k8s.common.model.elastic.ledger import RULE_MAX, RULE_TOTAL_MIN, ElasticQuotaInfos
from gpuq_k8s.common.model.elastic.quota import ElasticQuota
from gpuq_k8s.common.model.quantity import to_units
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.resources import Resources
from tests.testing.builders import MakeElasticQuota

UPSTREAM = "volcano pkg/scheduler/plugins/capacity/capacity_test.go"
GPU = "nvidia.com/gpu"

Text = Mapping[str, str]


def _units(amounts: Text) -> dict[str, int]:
    return {key: to_units(key, value) for key, value in amounts.items()}


@dataclass(frozen=True)
class Queue:
    """A Volcano Queue as an ElasticQuota: ``deserved`` -> min, ``capability`` -> max; ``allocated``
    are the requests of its running pods, one entry a pod."""

    deserved: Text | None = None
    capability: Text | None = None
    allocated: tuple[Text, ...] = ()


@dataclass(frozen=True)
class Case:
    upstream: str  # the upstream test function and case name
    queues: Mapping[str, Queue]
    queue: str  # the job's queue (its namespace here)
    min_resources: Text | None  # the PodGroup's spec.minResources
    members: tuple[Text, ...] = ()  # the job's pods' requests (its demand without minResources)
    min_member: int = 1
    # per queue, its Inqueue jobs: (demand, the charges of its pods already placed)
    inqueue: Mapping[str, tuple[tuple[Text, tuple[Text, ...]], ...]] = field(default_factory=dict)
    volcano_enqueues: bool = True  # upstream's expectation
    # gpuq's: None admits; else (rule, resource, unresolvable)
    gpuq: tuple[str, str, bool] | None = None
    differs: str = ""  # why gpuq's answer differs from Volcano's, when it does


def _infos(queues: Mapping[str, Queue]) -> ElasticQuotaInfos:
    infos = ElasticQuotaInfos()
    for ns, queue in queues.items():
        quota = MakeElasticQuota(ns, ns)
        if queue.deserved is not None:
            quota.min(dict(queue.deserved))
        if queue.capability is not None:
            quota.max(dict(queue.capability))
        infos.upsert(ElasticQuota.from_dict(quota.obj()))
        for i, request in enumerate(queue.allocated):
            assert infos.reserve(ns, f"{ns}/p{i}", Resources(_units(request)))
    return infos


def _decide(case: Case) -> tuple[str, str, bool] | None:
    infos = _infos(case.queues)
    minimum = _units(case.min_resources) if case.min_resources is not None else None
    demand = job_demand(minimum, [_units(m) for m in case.members], case.min_member)
    reserved: dict[str, dict[str, int]] = {}
    for ns, jobs in case.inqueue.items():
        into = reserved.setdefault(ns, {})
        for job_demand_text, charges in jobs:
            left = unbound_part(_units(job_demand_text), [_units(c) for c in charges])
            for key, amount in left.items():
                into[key] = into.get(key, 0) + amount
    refusal = enqueue_refusal(infos, case.queue, demand, reserved, f"PodGroup {case.queue}/job")
    if refusal is None:
        return None
    assert isinstance(refusal.error, QuotaExceeded)
    assert f"PodGroup {case.queue}/job" in refusal.message
    return refusal.rule, refusal.error.resource, refusal.unresolvable


# TestEnqueueAndAllocatable: two nodes of 3 cpu / 3G. q1 deserved = capability = 2 cpu / 2G, running
# 1 cpu / 3G (its memory already over capability); q2 deserved 2 cpu / 2G, capability 3 cpu / 3G,
# running 3 cpu / 1G.
ENQUEUE_AND_ALLOCATABLE = {
    "q1": Queue({"cpu": "2", "memory": "2G"}, {"cpu": "2", "memory": "2G"}, ({"cpu": "1", "memory": "3G"},)),
    "q2": Queue({"cpu": "2", "memory": "2G"}, {"cpu": "3", "memory": "3G"}, ({"cpu": "3", "memory": "1G"},)),
}

CASES = [
    Case(
        "TestEnqueueAndAllocatable case0: memory exceed derserved, job only request cpu can be enqueued",
        ENQUEUE_AND_ALLOCATABLE,
        "q1",
        {"cpu": "1", "memory": "0G"},
        # gpuq: 1 + 1 cpu is within q1's max and its own min (2); memory is not asked (0 is dropped).
    ),
    Case(
        "TestEnqueueAndAllocatable case1: cpu exceed derserved, job only request memory can be enqueued",
        ENQUEUE_AND_ALLOCATABLE,
        "q2",
        {"cpu": "0", "memory": "1G"},
    ),
    Case(
        "TestEnqueueAndAllocatable case2: exceed capacity, can not enqueue",
        ENQUEUE_AND_ALLOCATABLE,
        "q1",
        {"cpu": "1", "memory": "1G"},
        volcano_enqueues=False,
        # 3G + 1G > max 2G; 1G alone fits max, so it waits for q1's usage to drop (not "never").
        gpuq=(RULE_MAX, "memory", False),
    ),
    Case(
        # The variant gpuq adds: the same q2, a job asking 1 cpu beyond its deserved. Volcano admits
        # (3 + 1 <= capability 4 here; it never looks at deserved); gpuq refuses: cpu is guaranteed
        # (both quotas list it in min), q2 would hold 4 > its min 2, and the guaranteed pool (sum of
        # min: 4 cpu) already holds 1 + 3 = 4.
        "TestEnqueueAndAllocatable case1 variant (gpuq): cpu over deserved, capability 4",
        {
            "q1": ENQUEUE_AND_ALLOCATABLE["q1"],
            "q2": Queue(
                {"cpu": "2", "memory": "2G"}, {"cpu": "4", "memory": "3G"}, ({"cpu": "3", "memory": "1G"},)
            ),
        },
        "q2",
        {"cpu": "1"},
        gpuq=(RULE_TOTAL_MIN, "cpu", False),
        differs="Volcano's enqueue ignores deserved; gpuq keeps the guaranteed pool for the quotas' min",
    ),
    Case(
        # q1 has capability 4 cpu / 8Gi and no deserved; jobA (minResources 3 cpu / 3Gi) is Inqueue
        # and its three pods are bound (charged): it reserves nothing more (min - allocated = 0), so
        # jobB's 1 cpu fits 3 + 0 + 1 <= 4. The bug upstream fixed counted jobA twice (3 + 3 + 1 > 4).
        "TestNoDoubleCountingForInqueueJobWithBindingTasks: pgB enqueued beside Inqueue pgA's bound tasks",
        {"q1": Queue(None, {"cpu": "4", "memory": "8Gi"}, ({"cpu": "1", "memory": "1Gi"},) * 3)},
        "q1",
        {"cpu": "1", "memory": "1Gi"},
        inqueue={"q1": (({"cpu": "3", "memory": "3Gi"}, ({"cpu": "1", "memory": "1Gi"},) * 3),)},
    ),
    Case(
        # No minResources: the demand is what the job's pods ask (two gpu.com devices), against a
        # capability of one device: refused. gpuq: more than max itself, so "never".
        "TestJobEnqueueableChecksDRAWithoutMinResources",
        {"q1": Queue(None, {GPU: "1"})},
        "q1",
        None,
        members=({GPU: "2"},),
        volcano_enqueues=False,
        gpuq=(RULE_MAX, GPU, True),
        differs="Volcano's reason is dra-resource-exceeded; gpuq's says it can never fit",
    ),
    Case(
        # Capability two devices (16Gi of device memory: the consumable-capacity dimension, which
        # deviceClassMappings does not map, left out); one device is reserved by an Inqueue job; a job
        # asking two is refused, and waits (two alone fit the capability).
        "TestJobEnqueueableAccountsDRAInqueue",
        {"q1": Queue(None, {GPU: "2"})},
        "q1",
        None,
        members=({GPU: "2"},),
        inqueue={"q1": (({GPU: "1"}, ()),)},  # one device reserved, no pod placed yet
        volcano_enqueues=False,
        gpuq=(RULE_MAX, GPU, False),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.upstream for c in CASES])
def test_volcano_capacity_enqueue_case(case: Case) -> None:
    got = _decide(case)
    assert got == case.gpuq, f"{UPSTREAM}: {case.upstream}"
    # Where the answers differ, the case says why.
    assert (got is None) == case.volcano_enqueues or case.differs, case.upstream


def test_no_double_counting_the_bug_shape_refuses() -> None:
    """TestNoDoubleCountingForInqueueJobWithBindingTasks' failure mode, from gpuq's side: were Inqueue
    pgA's full demand counted on top of its bound pods' charges (the pre-fix arithmetic upstream),
    pgB would be refused, so the case above can tell the two apart."""
    case = CASES[4]
    demand_a = {"cpu": 3000, "memory": to_units("memory", "3Gi")}
    charges = [_units({"cpu": "1", "memory": "1Gi"})] * 3
    assert unbound_part(demand_a, charges) == {}
    infos = _infos(case.queues)
    assert enqueue_refusal(infos, "q1", {"cpu": 1000}, {"q1": demand_a}, "PodGroup q1/job") is not None


def test_dra_allocatable_ignores_inqueue() -> None:
    """TestDRAAllocatableIgnoresInqueue: what Inqueue jobs reserve counts at enqueue, not when a pod
    of a job already admitted is placed (PreFilter's per-pod check, ElasticQuotaInfos.prefilter)."""
    infos = _infos({"q1": Queue(None, {GPU: "2"})})
    request = {GPU: 2000}
    assert infos.prefilter("q1", request, "pod q1/p") is None
    refusal = enqueue_refusal(infos, "q1", request, {"q1": {GPU: 1000}}, "PodGroup q1/job")
    assert refusal is not None and refusal.rule == RULE_MAX
