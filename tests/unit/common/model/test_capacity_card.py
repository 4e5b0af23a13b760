"""The capacity-card engine (capacity-card.md; design.md Semantics 1, 3, 7)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.capacity_card.demand import (
    CardDemand,
    NoNodeOffers,
    pod_card_demand,
    resolve_charge,
)
from gpuq_k8s.common.model.capacity_card.engine import CapacityCard
from gpuq_k8s.common.model.capacity_card.enqueue import check_enqueue
from gpuq_k8s.common.model.capacity_card.ledger import QueueLedger, split_min
from gpuq_k8s.common.model.capacity_card.metrics import deserved_cards
from gpuq_k8s.common.model.capacity_card.ordering import node_order_scores
from gpuq_k8s.common.model.capacity_card.quota import queue_quota
from gpuq_k8s.common.model.capacity_card.refusals import QUEUE_CLOSED
from gpuq_k8s.common.model.capacity_card.task import check_task, task_quota_refusal
from gpuq_k8s.common.model.cards.catalog import CardCatalog
from gpuq_k8s.common.model.cards.discovery import discover_cards
from gpuq_k8s.common.model.crd import PodGroup, Queue
from gpuq_k8s.common.model.errors import ConfigError, InvalidAnnotation
from gpuq_k8s.common.model.events import (
    EMPTY_QUEUE_CAPABILITY,
    GET_TASK_REQUEST_RESOURCE_FAILED,
    INSUFFICIENT_CPU_QUOTA,
    INSUFFICIENT_MEMORY_QUOTA,
    INSUFFICIENT_SCALAR_QUOTA,
    INVALID_ANNOTATION,
)
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quota_exceeded import QuotaExceeded
from gpuq_k8s.common.model.resources import EMPTY, Resources
from tests.testing.builders import MakeNode, MakePodGroup, MakeQueue
from tests.testing.capacity_card import A1, CATALOG, H1, NODES, POD, card_pod, ledger_with
from tests.testing.reference_scoring import node_order_score

GiB = 2**30
DEFAULT = CapacityCardArgs()

# Template (copy before use): a PodGroup of team-a with minMember 1.
GROUP = MakePodGroup("pg", "ml").queue("team-a").min_member(1).phase("Pending")

HAS = CATALOG.node_matrix(NODES)


def as_dicts(*values: Mapping[str, int] | None) -> tuple[dict[str, int] | None, ...]:
    return tuple(None if v is None else dict(v) for v in values)


# -- arguments


def test_args_defaults_and_values() -> None:
    assert CapacityCardArgs.parse(None) == CapacityCardArgs(
        card_unlimited_cpu_memory=False, node_order_weight=1
    )
    args = CapacityCardArgs.parse({"cardUnlimitedCpuMemory": True, "nodeOrderWeight": 2})
    assert (args.card_unlimited_cpu_memory, args.node_order_weight) == (True, 2.0)


@pytest.mark.parametrize(
    ("arguments", "key"),
    [
        ({"cardUnlimitedCpuMemory": "yes"}, "cardUnlimitedCpuMemory"),
        ({"cardUnlimitedCpuMemory": 1}, "cardUnlimitedCpuMemory"),
        ({"nodeOrderWeight": 0}, "nodeOrderWeight"),
        ({"nodeOrderWeight": -1.0}, "nodeOrderWeight"),
        ({"nodeOrderWeight": "2"}, "nodeOrderWeight"),
        ({"nodeOrderWeight": True}, "nodeOrderWeight"),
        ({"nodeOrderWeight": float("inf")}, "nodeOrderWeight"),
        ({"nodeOrderWieght": 2.0}, "nodeOrderWieght"),
    ],
)
def test_args_rejected(arguments: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        CapacityCardArgs.parse(arguments)
    assert caught.value.field == key
    assert caught.value.value == arguments[key]


# -- queue quota


def test_queue_quota_from_capability_and_annotation() -> None:
    """spec "Queue Annotations for Card Quotas": cpu/memory from capability, cards from the annotation."""
    quota = queue_quota(
        MakeQueue()
        .card_quota('{"NVIDIA-A100": 5}')
        .capability(cpu="100", memory="500Gi", **{"nvidia.com/gpu": "8"})
        .model()
    )
    assert quota.capability == {"cpu": 100_000, "memory": 500 * GiB, "NVIDIA-A100": 5000}
    assert (quota.configured, quota.open, quota.events) == (True, True, ())


def test_bad_quota_annotation_is_zero_and_a_warning() -> None:
    """Semantics 3: a Queue predating the webhook: Warning event, card quota 0, cpu quota kept."""
    quota = queue_quota(MakeQueue().card_quota('{"NVIDIA-A100": 1.5}').capability(cpu="10").model())
    assert quota.capability == {"cpu": 10_000}
    assert [(e.obj, e.reason) for e in quota.events] == [("Queue/team-a", INVALID_ANNOTATION)]
    assert "volcano.sh/card.quota" in quota.events[0].message


# -- job mode


def enqueue(minimum: dict[str, int], allocated: dict[str, int], quota: str, **cap: str) -> Any:
    q = queue_quota(MakeQueue().card_quota(quota).capability(**cap).model())
    request = Resources({k: v * 1000 for k, v in minimum.items()})
    return check_enqueue(q, ledger_with(allocated), request, DEFAULT)


def test_example_1_basic_card_quota_enqueues() -> None:
    """spec "Example 1": A100 quota 5, job requests 4 -> enqueues (4 <= 5)."""
    assert enqueue({"NVIDIA-A100": 4}, {}, '{"NVIDIA-A100": 5}', cpu="100", memory="500Gi") is None
    refused = enqueue({"NVIDIA-A100": 6}, {}, '{"NVIDIA-A100": 5}', cpu="100", memory="500Gi")
    assert refused is not None and refused.reason == INSUFFICIENT_SCALAR_QUOTA


def test_job_mode_sums_alternatives() -> None:
    """spec "Job Mode" example: A100=5, H100=3, allocated 2+1, A100|H100: 4 -> 7 <= 8 passes."""
    quota = '{"NVIDIA-A100": 5, "NVIDIA-H100": 3}'
    allocated = {"NVIDIA-A100": 2, "NVIDIA-H100": 1}
    assert enqueue({"NVIDIA-A100|NVIDIA-H100": 4}, allocated, quota) is None
    refused = enqueue({"NVIDIA-A100|NVIDIA-H100": 6}, allocated, quota)
    assert refused is not None and refused.reason == INSUFFICIENT_SCALAR_QUOTA
    assert isinstance(refused.error, QuotaExceeded)
    assert (
        refused.error.resource,
        refused.error.requested,
        refused.error.available,
        refused.error.limit,
    ) == (
        "NVIDIA-A100|NVIDIA-H100",
        "6",
        "5",
        "8",
    )
    assert "Queue/team-a" in refused.message


def test_considerations_six_fits_four_plus_four() -> None:
    """spec "Considerations" 4: "A100|H100": 6 with A100: 4, H100: 4 passes (6 <= 4+4)."""
    assert enqueue({"NVIDIA-A100|NVIDIA-H100": 6}, {}, '{"NVIDIA-A100": 4, "NVIDIA-H100": 4}') is None


def test_job_mode_counts_other_jobs_alternative_reservations() -> None:
    """Another Inqueue job's A|B reservation counts (upstream ignores it and would admit 9 into 8)."""
    q = queue_quota(MakeQueue().card_quota('{"A": 5, "B": 3}').model())
    ledger = QueueLedger("team-a")
    ledger.set_job(
        "ml/other",
        min_cpu_memory=EMPTY,
        card_request=Resources({"A|B": 4000}),
        has_min_resources=False,
        phase="Inqueue",
        min_member=1,
    )
    assert ledger.inqueue == {"A|B": 4000}
    assert check_enqueue(q, ledger, Resources({"A|B": 5000}), DEFAULT) is not None
    assert check_enqueue(q, ledger, Resources({"A|B": 4000}), DEFAULT) is None
    # 3 more A100 still fit: the other job can take B:3 + A:1, leaving A at 4 <= 5.
    assert check_enqueue(q, ledger, Resources({"A": 3000}), DEFAULT) is None
    assert check_enqueue(q, ledger, Resources({"A": 5000}), DEFAULT) is not None


@pytest.mark.parametrize(
    ("minimum", "allocated", "reason"),
    [
        ({"cpu": 60_000}, {"cpu": 50_000}, INSUFFICIENT_CPU_QUOTA),
        ({"memory": 2 * GiB}, {"memory": 9 * GiB}, INSUFFICIENT_MEMORY_QUOTA),
    ],
)
def test_job_mode_cpu_memory(minimum: dict[str, int], allocated: dict[str, int], reason: str) -> None:
    q = queue_quota(MakeQueue().capability(cpu="100", memory="10Gi").model())
    ledger = QueueLedger("team-a")
    ledger.reserve("ml/x", Resources(allocated))
    refusal = check_enqueue(q, ledger, Resources(minimum), DEFAULT)
    assert refusal is not None and refusal.reason == reason
    event = refusal.event("PodGroup/ml/pg")
    assert event is not None and (event.type, event.reason) == ("Warning", reason)


def test_card_unlimited_cpu_memory_skips_cpu_for_card_jobs_only() -> None:
    """Story 3 / cardUnlimitedCpuMemory: a card job is not held by the cpu quota; a cpu-only job is."""
    q = queue_quota(MakeQueue().card_quota('{"NVIDIA-A100": 5}').capability(cpu="1").model())
    unlimited = CapacityCardArgs(card_unlimited_cpu_memory=True)
    card_job = Resources({"cpu": 8000, "NVIDIA-A100": 1000})
    assert check_enqueue(q, QueueLedger("q"), card_job, unlimited) is None
    assert check_enqueue(q, QueueLedger("q"), card_job, DEFAULT) is not None
    assert check_enqueue(q, QueueLedger("q"), Resources({"cpu": 8000}), unlimited) is not None


def test_empty_queue_capability_and_closed_queue() -> None:
    empty = check_enqueue(queue_quota(MakeQueue().model()), QueueLedger("q"), Resources({"cpu": 1}), DEFAULT)
    assert empty is not None and empty.reason == EMPTY_QUEUE_CAPABILITY
    assert check_enqueue(queue_quota(MakeQueue().model()), QueueLedger("q"), EMPTY, DEFAULT) is None
    closed = queue_quota(MakeQueue().capability(cpu="10").state("Closing").model())
    refusal = check_enqueue(closed, QueueLedger("q"), Resources({"cpu": 1}), DEFAULT)
    assert refusal is not None and refusal.reason == QUEUE_CLOSED


def test_elastic_is_subtracted_as_upstream() -> None:
    """to_be_used = allocated + inqueue + min - elastic: a running job above its minimum lends the excess."""
    q = queue_quota(MakeQueue().capability(cpu="4").model())
    ledger = QueueLedger("q")
    ledger.set_job(
        "ml/big",
        min_cpu_memory=Resources({"cpu": 1000}),
        card_request=EMPTY,
        has_min_resources=True,
        phase="Running",
        min_member=1,
    )
    ledger.reserve("ml/p1", Resources({"cpu": 3000}), "ml/big")
    assert as_dicts(ledger.elastic, ledger.inqueue) == ({"cpu": 2000}, {})
    assert check_enqueue(q, ledger, Resources({"cpu": 3000}), DEFAULT) is None  # 3 + 3 - 2 <= 4
    assert check_enqueue(q, ledger, Resources({"cpu": 3001}), DEFAULT) is not None


def test_card_pods_are_their_jobs_card_minimum() -> None:
    """Once a job has pods their card requests are its minimum (spec: card.request yields to pods)."""
    ledger = QueueLedger("q")
    ledger.set_job(
        "ml/pg",
        min_cpu_memory=EMPTY,
        card_request=Resources({"A": 8000}),
        has_min_resources=False,
        phase="Inqueue",
        min_member=1,
    )
    assert ledger.inqueue == {"A": 8000}
    ledger.track("ml/p0", "ml/pg", Resources({"A": 1000}), uses_cards=True)
    ledger.reserve("ml/p1", Resources({"A": 3000}), "ml/pg")
    assert as_dicts(ledger.inqueue, ledger.elastic, ledger.job_minimum("ml/pg")) == (
        {"A": 1000},
        {},
        {"A": 4000},
    )


# -- task mode and Semantics 1


def test_semantics_1_alternative_refused_on_exhausted_type_fits_other() -> None:
    """An A|H pod is refused on an A node whose A quota is gone but fits an H node."""
    q = queue_quota(
        MakeQueue()
        .card_quota('{"NVIDIA-A100": 1, "NVIDIA-H100": 2}')
        .capability(cpu="10", memory="10Gi")
        .model()
    )
    ledger = ledger_with({"NVIDIA-A100": 1})
    pod = POD.copy().card("NVIDIA-A100|NVIDIA-H100").gpus(1).info()
    check = check_task(q, ledger, pod_card_demand(pod, CATALOG), CATALOG, DEFAULT)
    assert check.allowed_names == {"NVIDIA-A100": False, "NVIDIA-H100": True}
    assert check.ok
    verdict = check.filter_nodes(HAS)
    assert verdict.mask.tolist() == [False, False, True, False, False]
    a_reason = verdict.reason(0)
    assert a_reason is not None and "NVIDIA-A100" in a_reason and "quota exceeded" in a_reason
    t_reason = verdict.reason(3)
    assert t_reason is not None and "none of the card types NVIDIA-A100|NVIDIA-H100" in t_reason
    assert verdict.reason(2) is None
    charge = resolve_charge(check.demand, H1, DEFAULT, check.allowed_names)
    assert charge == {"cpu": 1000, "memory": GiB, "NVIDIA-H100": 1000}


def test_pod_without_card_name_is_charged_to_node_type() -> None:
    """Semantics 1: nvidia.com/gpu without card.name -> the node's card type, quota checked per type."""
    q = queue_quota(MakeQueue().card_quota('{"NVIDIA-H100": 2}').capability(cpu="10", memory="10Gi").model())
    pod = POD.copy().gpus(1).info()
    demand = pod_card_demand(pod, CATALOG)
    assert demand.groups == (("NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4"),)
    check = check_task(q, QueueLedger("team-a"), demand, CATALOG, DEFAULT)
    assert check.filter_nodes(HAS).mask.tolist() == [False, False, True, False, False]
    assert resolve_charge(demand, A1, DEFAULT) == {"cpu": 1000, "memory": GiB, "NVIDIA-A100": 1000}


def test_pod_without_cards_only_faces_cpu_memory() -> None:
    q = queue_quota(MakeQueue().capability(cpu="2", memory="10Gi").model())
    demand = pod_card_demand(POD.copy().req(cpu="1").info(), CATALOG)
    assert not demand.uses_cards
    check = check_task(q, QueueLedger("team-a"), demand, CATALOG, DEFAULT)
    assert check.filter_nodes(HAS).mask.all()
    over = check_task(
        q, QueueLedger("team-a"), pod_card_demand(POD.copy().req(cpu="3").info(), CATALOG), CATALOG, DEFAULT
    )
    assert over.failure is not None and over.failure.reason == INSUFFICIENT_CPU_QUOTA
    rejected = over.filter_nodes(HAS)
    assert not rejected.mask.any() and rejected.reason(4) == over.failure.message


def test_task_mode_counts_allocated_only() -> None:
    """spec "Task Allocatable Check": allocated + task.request <= capability (inqueue not counted)."""
    q = queue_quota(MakeQueue().card_quota('{"NVIDIA-A100": 2}').capability(cpu="10", memory="10Gi").model())
    demand = pod_card_demand(POD.copy().card("NVIDIA-A100").gpus(1).info(), CATALOG)
    assert check_task(q, ledger_with({"NVIDIA-A100": 1}), demand, CATALOG, DEFAULT).ok
    refused = check_task(q, ledger_with({"NVIDIA-A100": 2}), demand, CATALOG, DEFAULT)
    assert not refused.ok
    refusal = refused.refusals["NVIDIA-A100"]
    assert refusal is not None and refusal.reason == INSUFFICIENT_SCALAR_QUOTA


@pytest.mark.parametrize(
    ("card_name", "gpu", "expected"),
    [
        ("NVIDIA-A100||NVIDIA-H100", 1, "empty"),
        ("NVIDIA-V100", 1, "discovered on any node"),
        ("NVIDIA-A100", 0, "requests nvidia.com/gpu"),
    ],
)
def test_unreadable_task_request(card_name: str, gpu: int, expected: str) -> None:
    """spec "Event Recording": GetTaskRequestResourceFailed (a card type no node offers only in a
    cluster whose card types are not autoscaled: ``autoscaledCardTypes: false``)."""
    pod = card_pod(POD.copy(), card_name, gpu)
    with pytest.raises(InvalidAnnotation, match=expected):
        pod_card_demand(pod, CATALOG)
    strict = CapacityCardArgs(autoscaled_card_types=False)
    engine = CapacityCard.rebuild(
        strict, NODES, [MakeQueue().card_quota('{"NVIDIA-A100": 1}').capability(cpu="9").model()], [], []
    )
    check = engine.task_check(pod)
    assert check.failure is not None and check.failure.reason == GET_TASK_REQUEST_RESOURCE_FAILED
    assert "Pod/ml/p" in check.failure.message


def test_a_card_type_no_node_offers_can_never_fit_a_cluster_without_autoscaling() -> None:
    """``autoscaledCardTypes: false``: the refusal says the cluster as it stands can never run it."""
    pod = card_pod(POD.copy(), "NVIDIA-V100", 1)
    with pytest.raises(NoNodeOffers) as raised:
        pod_card_demand(pod, CATALOG)
    assert str(raised.value).endswith("(can never fit under the current cluster: no node offers NVIDIA-V100)")


@pytest.mark.parametrize(
    ("card_name", "requests", "expected"),
    [
        # A whole card no node offers: the one whole-card GPU resource the pod requests.
        ("NVIDIA-V100", {"nvidia.com/gpu": 1}, (("NVIDIA-V100",), {"NVIDIA-V100": 1000})),
        # Preferred A100 (offered) or V100 (not yet): both candidates of one charge.
        ("NVIDIA-A100|NVIDIA-V100", {"nvidia.com/gpu": 2}, (("NVIDIA-A100", "NVIDIA-V100"), None)),
        # MIG and MPS names say their resource.
        (
            "NVIDIA-H100/mig-1g.10gb-mixed",
            {"nvidia.com/mig-1g.10gb": 1},
            (("NVIDIA-H100/mig-1g.10gb-mixed",), None),
        ),
        ("NVIDIA-H100/mps-80g*1/4", {"nvidia.com/gpu.shared": 1}, (("NVIDIA-H100/mps-80g*1/4",), None)),
    ],
)
def test_autoscaled_card_types_stay_candidates(
    card_name: str, requests: dict[str, int], expected: tuple[tuple[str, ...], dict[str, int] | None]
) -> None:
    """``autoscaledCardTypes`` (the default): a card type no node offers may come with a node, so it
    stays a candidate of the pod's demand, its resource read from its name (design.md Semantics 16)."""
    made = POD.copy().card(card_name)
    for resource, count in requests.items():
        made.gpus(count, resource)
    demand = pod_card_demand(made.info(), CATALOG, autoscaled=True)
    group, amounts = expected
    assert demand.groups == (group,)
    if amounts is not None:
        assert dict(demand.amounts) == amounts
    # Unless the pod asks for the resource, the name stays unreadable as before.
    with pytest.raises(InvalidAnnotation, match="whose resource the pod requests"):
        pod_card_demand(POD.copy().card("NVIDIA-V100").info(), CATALOG, autoscaled=True)


def test_mps_example_3() -> None:
    """spec "Example 3": MPS quota 32, job requests 16, pods use nvidia.com/gpu.shared."""
    labels = {"nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.replicas": "8"}
    mps = discover_cards(
        MakeNode("m1")
        .product("NVIDIA-A100")
        .labels(labels)
        .alloc(cpu="64")
        .gpus(32, "nvidia.com/gpu.shared")
        .info()
    )
    assert mps.names == ("NVIDIA-A100/mps-80g*1/8",)
    catalog = CardCatalog.build([mps])
    q = queue_quota(
        MakeQueue()
        .card_quota('{"NVIDIA-A100/mps-80g*1/8": 32}')
        .capability(cpu="100", memory="100Gi")
        .model()
    )
    assert (
        check_enqueue(q, QueueLedger("team-a"), Resources({"NVIDIA-A100/mps-80g*1/8": 16_000}), DEFAULT)
        is None
    )
    pod = POD.copy().card("NVIDIA-A100/mps-80g*1/8").gpus(1, "nvidia.com/gpu.shared").info()
    demand = pod_card_demand(pod, catalog)
    assert resolve_charge(demand, mps, DEFAULT) == {
        "cpu": 1000,
        "memory": GiB,
        "NVIDIA-A100/mps-80g*1/8": 1000,
    }


# -- node ordering


def test_example_4_node_order_scores() -> None:
    """spec "Example 4": weight 2.0 -> A100 200, H100 100, T4 50; nodes without any -> 0."""
    alternatives = ("NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4")
    scores = node_order_scores(alternatives, CATALOG, HAS, 2.0)
    assert scores.tolist() == [200.0, 200.0, 100.0, 50.0, 0.0]
    assert [node_order_score(alternatives, n, 2.0) for n in NODES] == scores.tolist()


def test_node_order_spec_decay_and_single_card() -> None:
    """spec "Node Ordering": 100, 50, 25, 12.5; a single card type scores 0 everywhere."""
    four = ("X", "NVIDIA-T4", "NVIDIA-H100", "NVIDIA-A100")  # X is on no node but keeps its index
    assert node_order_scores(four, CATALOG, HAS, 1.0).tolist() == [12.5, 12.5, 25.0, 50.0, 0.0]
    assert not node_order_scores(("NVIDIA-A100",), CATALOG, HAS, 1.0).any()
    assert node_order_score(("NVIDIA-A100",), A1, 1.0) == 0.0


def test_example_2_prefers_a100_then_h100() -> None:
    """spec "Example 2": A100 first; once A100 quota is exhausted, H100."""
    engine = CapacityCard.rebuild(
        DEFAULT,
        NODES,
        [
            MakeQueue()
            .card_quota('{"NVIDIA-A100": 1, "NVIDIA-H100": 4}')
            .capability(cpu="10", memory="10Gi")
            .model()
        ],
        [],
        [],
    )
    placed: list[str] = []
    for i in range(3):
        pod = POD.copy().name(f"w{i}").card("NVIDIA-A100|NVIDIA-H100").gpus(1).info()
        engine.set_pod(pod)
        check = engine.task_check(pod)
        mask = check.filter_nodes(HAS).mask
        scores = np.where(mask, engine.node_order_scores(pod, HAS), -1.0)
        best = NODES[int(scores.argmax())].node
        engine.reserve(pod, best, check)
        placed.append(engine.charged_card_type(pod) or "")
    assert placed == ["NVIDIA-A100", "NVIDIA-H100", "NVIDIA-H100"]


# -- ledger


def test_split_min_as_volcano() -> None:
    """GetInqueueResource / ExceededPart per resource; A|B is covered by A and B before any is elastic."""
    assert as_dicts(*split_min({"cpu": 4000}, {"cpu": 1000})) == ({"cpu": 3000}, {})
    assert as_dicts(*split_min({"cpu": 4000}, {"cpu": 6000})) == ({}, {"cpu": 2000})
    assert as_dicts(*split_min({"A|B": 4000}, {"A": 3000, "B": 1000})) == ({}, {})
    assert as_dicts(*split_min({"A|B": 4000}, {"A": 1000})) == ({"A|B": 3000}, {})
    assert as_dicts(*split_min({"A": 1000, "A|B": 2000}, {"A": 2000, "B": 2000})) == ({}, {"B": 1000})


def test_ledger_reserve_is_idempotent_per_pod() -> None:
    ledger = QueueLedger("q")
    charge = Resources({"cpu": 1000, "A": 1000})
    assert ledger.reserve("ml/p", charge)
    assert not ledger.reserve("ml/p", charge)
    assert ledger.allocated == charge
    assert ledger.unreserve("ml/p") == charge
    assert ledger.unreserve("ml/p") is None
    assert ledger.allocated == {}


def test_inqueue_job_reservation_shrinks_as_pods_allocate() -> None:
    """An Inqueue job reserves max(0, min - allocated): never the same card twice."""
    ledger = QueueLedger("q")
    ledger.set_job(
        "ml/pg",
        min_cpu_memory=Resources({"cpu": 4000}),
        card_request=Resources({"A": 4000}),
        has_min_resources=True,
        phase="Inqueue",
        min_member=4,
    )
    assert ledger.inqueue == {"cpu": 4000, "A": 4000}
    for i in range(4):
        ledger.track(f"ml/p{i}", "ml/pg", Resources({"A": 1000}), uses_cards=True)
    assert ledger.inqueue == {"cpu": 4000, "A": 4000}
    for i in range(2):
        ledger.reserve(f"ml/p{i}", Resources({"cpu": 1000, "A": 1000}))
    assert ledger.inqueue == {"cpu": 2000, "A": 2000}
    assert ledger.allocated == {"cpu": 2000, "A": 2000}
    ledger.set_phase("ml/pg", "Running")  # 2 allocated < minMember 4: upstream reserves nothing
    assert ledger.inqueue == {}
    for i in range(4):
        ledger.untrack(f"ml/p{i}")
    ledger.remove_job("ml/pg")
    assert as_dicts(ledger.allocated, ledger.inqueue, ledger.elastic, ledger.pending) == ({}, {}, {}, {})


def snapshot(ledger: QueueLedger) -> tuple[Resources, Resources, Resources, Resources]:
    return ledger.allocated, ledger.inqueue, ledger.elastic, ledger.pending


charges = st.dictionaries(st.sampled_from(["cpu", "memory", "A", "B"]), st.integers(1, 10**6), min_size=1)


@settings(max_examples=200)
@given(
    existing=st.lists(charges, max_size=5),
    phase=st.sampled_from(["Pending", "Inqueue", "Running"]),
    request=st.dictionaries(st.sampled_from(["A", "B", "A|B"]), st.integers(0, 10**4), max_size=3),
    new=charges,
    in_job=st.booleans(),
)
def test_reserve_then_unreserve_restores_the_ledger(
    existing: list[dict[str, int]], phase: str, request: dict[str, int], new: dict[str, int], in_job: bool
) -> None:
    ledger = QueueLedger("q")
    ledger.set_job(
        "ml/pg",
        min_cpu_memory=Resources({"cpu": 500}),
        card_request=Resources(request),
        has_min_resources=True,
        phase=phase,
        min_member=1,
    )
    for i, charge in enumerate(existing):
        ledger.reserve(f"ml/e{i}", Resources(charge), "ml/pg" if i % 2 else None)
    job = "ml/pg" if in_job else None
    ledger.track("ml/new", job, Resources({"A|B": 1000}), uses_cards=True)
    before = snapshot(ledger)
    assert ledger.reserve("ml/new", Resources(new), job)
    ledger.reserve("ml/new", Resources(new), job)
    assert ledger.unreserve("ml/new") == Resources(new)
    assert ledger.unreserve("ml/new") is None
    assert snapshot(ledger) == before


# -- the engine over cluster state


def cluster() -> tuple[list[Queue], list[PodGroup], list[PodInfo]]:
    queues = [
        MakeQueue()
        .card_quota('{"NVIDIA-A100": 4, "NVIDIA-H100": 4}')
        .capability(cpu="20", memory="40Gi")
        .model()
    ]
    groups = [
        GROUP.copy()
        .card_request('{"NVIDIA-A100|NVIDIA-H100": 4}')
        .phase("Running")
        .min_resources(cpu="4")
        .model()
    ]
    pods = [
        POD.copy()
        .name("w0")
        .card("NVIDIA-A100|NVIDIA-H100")
        .gpus(1)
        .node("a1")
        .group("pg")
        .phase("Running")
        .info(),
        POD.copy()
        .name("w1")
        .card("NVIDIA-A100|NVIDIA-H100")
        .gpus(1)
        .node("h1")
        .group("pg")
        .phase("Running")
        .info(),
        POD.copy().name("w2").card("NVIDIA-A100|NVIDIA-H100").gpus(1).group("pg").info(),
        POD.copy().name("done").card("NVIDIA-A100").gpus(1).node("a1").phase("Succeeded").info(),
        POD.copy().name("elsewhere").gpus(1).node("a2").queue("missing").info(),
    ]
    return queues, groups, pods


def test_rebuild_charges_concrete_types_and_never_double_counts() -> None:
    queues, groups, pods = cluster()
    engine = CapacityCard.rebuild(DEFAULT, NODES, queues, groups, pods)
    ledger = engine.ledgers["team-a"]
    assert ledger.allocated == {"cpu": 2000, "memory": 2 * GiB, "NVIDIA-A100": 1000, "NVIDIA-H100": 1000}
    assert ledger.pending == {"NVIDIA-A100|NVIDIA-H100": 1000}
    # Replaying every pod again (a re-list) changes nothing.
    for pod in pods:
        engine.set_pod(pod)
    assert engine.ledgers["team-a"].allocated == ledger.allocated
    # Incremental updates reach the same state as a rebuild from scratch.
    engine.reserve(pods[2], "a2")
    again = CapacityCard.rebuild(
        DEFAULT,
        NODES,
        queues,
        groups,
        [
            *pods[:2],
            POD.copy()
            .name("w2")
            .card("NVIDIA-A100|NVIDIA-H100")
            .gpus(1)
            .node("a2")
            .group("pg")
            .phase("Running")
            .info(),
            *pods[3:],
        ],
    )
    assert snapshot(engine.ledgers["team-a"]) == snapshot(again.ledgers["team-a"])
    assert engine.charged_card_type(pods[2]) == "NVIDIA-A100"
    engine.unreserve(pods[2])
    engine.unreserve(pods[2])
    assert engine.ledgers["team-a"].allocated.amount("NVIDIA-A100") == 1000


def test_enqueue_and_admit_reserve() -> None:
    queues, _, _ = cluster()
    engine = CapacityCard.rebuild(DEFAULT, NODES, queues, [], [])
    group = (
        GROUP.copy().name("job").card_request('{"NVIDIA-A100|NVIDIA-H100": 6}').min_resources(cpu="4").model()
    )
    engine.set_podgroup(group)
    assert engine.enqueue(group) is None
    engine.admit(group)
    assert engine.ledgers["team-a"].inqueue == {"cpu": 4000, "NVIDIA-A100|NVIDIA-H100": 6000}
    second = GROUP.copy().name("job2").card_request('{"NVIDIA-H100": 3}').model()
    engine.set_podgroup(second)
    refused = engine.enqueue(second)
    assert refused is not None and refused.reason == INSUFFICIENT_SCALAR_QUOTA


def test_engine_queue_missing_is_unrestricted_and_bad_annotations_warn() -> None:
    """Semantics 7: no Queue of that name -> no queue quota. Semantics 3: bad annotations warn."""
    bad_queue = MakeQueue("bad").card_quota("{oops").model()
    bad_group = GROUP.copy().name("pg2").queue("bad").card_request("[1]").model()
    engine = CapacityCard.rebuild(DEFAULT, NODES, [bad_queue], [bad_group], [])
    events = engine.take_events()
    assert sorted(e.obj for e in events) == ["PodGroup/ml/pg2", "Queue/bad"]
    assert all(e.reason == INVALID_ANNOTATION for e in events)
    assert engine.take_events() == []
    free = POD.copy().gpus(1).queue("nowhere").info()
    assert engine.task_check(free).filter_nodes(HAS).mask.all()
    assert (
        engine.enqueue(GROUP.copy().name("x").queue("nowhere").card_request('{"NVIDIA-A100": 100}').model())
        is None
    )


def test_metrics_and_deserved() -> None:
    """Metrics per queue and card: capacity, allocated, request (allocated + pending), deserved."""
    queues, groups, pods = cluster()
    other = MakeQueue("team-b").card_quota('{"NVIDIA-A100": 6}').model()
    engine = CapacityCard.rebuild(DEFAULT, NODES, [*queues, other], groups, pods)
    samples = {(m.queue, m.card): m for m in engine.metrics()}
    a = samples[("team-a", "NVIDIA-A100")]
    assert (a.capacity, a.allocated, a.request) == (4.0, 1.0, 1.0)
    # As upstream, a card type's deserved is the queue's quota even when quotas oversubscribe the cluster.
    assert (a.deserved, samples[("team-b", "NVIDIA-A100")].deserved) == (4.0, 6.0)
    assert samples[("team-a", "NVIDIA-A100|NVIDIA-H100")].request == 1.0
    assert samples[("team-a", "NVIDIA-H100")].deserved == 4.0
    assert engine.shares() == {"team-a": pytest.approx(0.25), "team-b": 0.0}
    assert deserved_cards([]) == {}


def test_card_demand_pending_key() -> None:
    demand = pod_card_demand(POD.copy().card("NVIDIA-H100|NVIDIA-A100").gpus(2).info(), CATALOG)
    assert demand.pending == {"NVIDIA-H100|NVIDIA-A100": 2000}
    assert CardDemand().pending == {}


def test_podgroup_arriving_after_its_pods_and_assumed_pods() -> None:
    """Pods seen before their PodGroup join it (and its queue); an in-flight bind keeps its charge."""
    queues = [
        MakeQueue().card_quota('{"NVIDIA-A100": 4}').capability(cpu="20", memory="40Gi").model(),
        MakeQueue("other").capability(cpu="1").model(),
    ]
    engine = CapacityCard.rebuild(DEFAULT, NODES, queues, [], [])
    pod = POD.copy().name("w0").card("NVIDIA-A100").gpus(1).group("pg").queue("other").info()
    engine.set_pod(pod)
    assert engine.ledgers["other"].pending == {"NVIDIA-A100": 1000}
    engine.set_podgroup(GROUP.copy().card_request('{"NVIDIA-A100": 2}').phase("Inqueue").model())
    pending = as_dicts(engine.ledgers["other"].pending, engine.ledgers["team-a"].pending)
    assert pending == ({}, {"NVIDIA-A100": 1000})
    assert engine.ledgers["team-a"].inqueue == {"NVIDIA-A100": 1000}
    engine.reserve(pod, "a1")
    engine.set_pod(pod)  # the informer has not seen the binding yet
    assert engine.ledgers["team-a"].allocated.amount("NVIDIA-A100") == 1000
    engine.remove_pod(pod)
    assert engine.ledgers["team-a"].allocated == {}


# -- task mode, scalar form for admission


def expected_refusal(check: Any) -> str | None:
    """What check_task says, as the admission message it used to be composed from."""
    if check.ok:
        return None
    if check.failure is not None:
        return str(check.failure.message)
    refusals = [r.message for r in check.refusals.values() if r is not None]
    candidates = "|".join(check.demand.alternatives or tuple(check.refusals))
    return f"no card type among {candidates} has quota for the pod: " + "; ".join(refusals)


@pytest.mark.parametrize(
    ("quota", "capability", "state", "allocated", "pod", "args", "reason"),
    [
        (
            '{"NVIDIA-A100": 1, "NVIDIA-H100": 2}',
            {"cpu": "10", "memory": "10Gi"},
            "Open",
            {"NVIDIA-A100": 1},
            POD.copy().card("NVIDIA-A100|NVIDIA-H100").gpus(1).info(),
            DEFAULT,
            None,
        ),
        (
            '{"NVIDIA-A100": 1, "NVIDIA-H100": 2}',
            {"cpu": "10", "memory": "10Gi"},
            "Open",
            {"NVIDIA-A100": 1, "NVIDIA-H100": 2},
            POD.copy().card("NVIDIA-A100|NVIDIA-H100").gpus(1).info(),
            DEFAULT,
            INSUFFICIENT_SCALAR_QUOTA,
        ),
        (
            '{"NVIDIA-H100": 2}',
            {"cpu": "10", "memory": "10Gi"},
            "Open",
            {},
            POD.copy().gpus(2).info(),
            DEFAULT,
            None,
        ),
        (
            '{"NVIDIA-H100": 2}',
            {"cpu": "10", "memory": "10Gi"},
            "Open",
            {},
            POD.copy().gpus(3).info(),
            DEFAULT,
            INSUFFICIENT_SCALAR_QUOTA,
        ),
        (
            '{"NVIDIA-A100": 2}',
            {"cpu": "10", "memory": "10Gi"},
            "Closed",
            {},
            POD.copy().gpus(1).info(),
            DEFAULT,
            QUEUE_CLOSED,
        ),
        (None, {}, "Open", {}, POD.copy().req(cpu="1").info(), DEFAULT, EMPTY_QUEUE_CAPABILITY),
        (
            None,
            {"cpu": "2"},
            "Open",
            {"cpu": 1},
            POD.copy().req(cpu="2").info(),
            DEFAULT,
            INSUFFICIENT_CPU_QUOTA,
        ),
        (
            None,
            {"cpu": "2", "memory": "1Gi"},
            "Open",
            {},
            POD.copy().req(cpu="1", memory="2Gi").info(),
            DEFAULT,
            INSUFFICIENT_MEMORY_QUOTA,
        ),
        (
            '{"NVIDIA-A100": 2}',
            {"cpu": "1", "memory": "10Gi"},
            "Open",
            {},
            POD.copy().card("NVIDIA-A100").req(cpu="4").gpus(1).info(),
            CapacityCardArgs(card_unlimited_cpu_memory=True),
            None,
        ),
        (
            '{"NVIDIA-A100": 2}',
            {"cpu": "1", "memory": "10Gi"},
            "Open",
            {},
            POD.copy().card("NVIDIA-A100").req(cpu="4").gpus(1).info(),
            DEFAULT,
            INSUFFICIENT_CPU_QUOTA,
        ),
    ],
)
def test_task_quota_refusal_agrees_with_check_task(
    *,
    quota: str | None,
    capability: dict[str, str],
    state: str,
    allocated: dict[str, int],
    pod: PodInfo,
    args: CapacityCardArgs,
    reason: str | None,
) -> None:
    """spec "Task Allocatable Check": the webhook's scalar form refuses exactly when check_task does."""
    queue = MakeQueue().capability(**capability).state(state)
    q = queue_quota((queue if quota is None else queue.card_quota(quota)).model())
    ledger = ledger_with(allocated)
    demand = pod_card_demand(pod, CATALOG)
    check = check_task(q, ledger, demand, CATALOG, args)
    refusal = task_quota_refusal(q, demand, CATALOG, args, ledger.allocated)
    assert (refusal is None) == check.ok == (reason is None)
    assert (None if refusal is None else refusal.message) == expected_refusal(check)
    if refusal is not None:
        assert refusal.reason == reason


def test_task_quota_refusal_names_every_refused_candidate() -> None:
    """Semantics 1: an A|H pod with both types exhausted is refused with each type's shortfall."""
    q = queue_quota(
        MakeQueue()
        .card_quota('{"NVIDIA-A100": 1, "NVIDIA-H100": 1}')
        .capability(cpu="10", memory="10Gi")
        .model()
    )
    demand = pod_card_demand(POD.copy().card("NVIDIA-A100|NVIDIA-H100").gpus(2).info(), CATALOG)
    refusal = task_quota_refusal(q, demand, CATALOG, DEFAULT)
    assert refusal is not None
    assert refusal.message.startswith("no card type among NVIDIA-A100|NVIDIA-H100 has quota for the pod: ")
    assert "NVIDIA-A100" in refusal.message.split(": ", 1)[1] and "; " in refusal.message
    assert isinstance(refusal.error, QuotaExceeded)


@settings(max_examples=300, deadline=None)
@given(
    quota=st.dictionaries(st.sampled_from(["NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4"]), st.integers(0, 4)),
    allocated=st.dictionaries(
        st.sampled_from(["NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4", "cpu"]), st.integers(0, 4)
    ),
    card_name=st.sampled_from([None, "NVIDIA-A100", "NVIDIA-H100|NVIDIA-A100", "NVIDIA-T4|NVIDIA-V100"]),
    gpu=st.integers(0, 3),
    cpu=st.integers(1, 6),
    cpu_cap=st.sampled_from([None, "3", "8", "8"]),
    memory_cap=st.sampled_from([None, "10Gi", "10Gi", "10Gi"]),
    state=st.sampled_from(["Open", "Open", "Open", "Open", "Closed"]),
    unlimited=st.booleans(),
)
def test_task_quota_refusal_property(
    *,
    quota: dict[str, int],
    allocated: dict[str, int],
    card_name: str | None,
    gpu: int,
    cpu: int,
    cpu_cap: str | None,
    memory_cap: str | None,
    state: str,
    unlimited: bool,
) -> None:
    """For any queue, usage and pod: task_quota_refusal is None iff check_task(...).ok, same message."""
    text = None if not quota else "{" + ", ".join(f'"{k}": {v}' for k, v in quota.items()) + "}"
    capability = {k: v for k, v in (("cpu", cpu_cap), ("memory", memory_cap)) if v is not None}
    queue = MakeQueue().capability(**capability).state(state)
    q = queue_quota((queue if text is None else queue.card_quota(text)).model())
    try:
        demand = pod_card_demand(card_pod(POD.copy().req(cpu=str(cpu)), card_name, gpu), CATALOG)
    except InvalidAnnotation:
        return
    args = CapacityCardArgs(card_unlimited_cpu_memory=unlimited)
    ledger = ledger_with(allocated)
    check = check_task(q, ledger, demand, CATALOG, args)
    refusal = task_quota_refusal(q, demand, CATALOG, args, ledger.allocated)
    assert (refusal is None) == check.ok
    assert (None if refusal is None else refusal.message) == expected_refusal(check)
