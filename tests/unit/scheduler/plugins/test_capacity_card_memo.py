"""The capacity-card hot-path memos agree with the reference functions they stand for.

``TaskPlan.check`` stands for :func:`check_task`, ``CapacityCard.task_check`` / ``reserve`` for
:func:`check_task` / :func:`resolve_charge` over a fresh :func:`pod_card_demand`, and the plugin's
memoised Filter reasons for the per-call computation it replaced, even when called late.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model.capacity_card.args import CapacityCardArgs
from gpuq_k8s.common.model.capacity_card.demand import pod_card_demand, resolve_charge
from gpuq_k8s.common.model.capacity_card.engine import CapacityCard
from gpuq_k8s.common.model.capacity_card.quota import queue_quota
from gpuq_k8s.common.model.capacity_card.task import NodeFilter, TaskCheck, TaskPlan, check_task
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.refusal import Refusal
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.plugins.capacity_card import CapacityCardPlugin, _Verdict
from tests.testing.builders import MakeNode, MakePod, MakeQueue
from tests.testing.capacity_card import CATALOG, NODES, POD, card_pod, ledger_with
from tests.testing.scheduler import make_scheduler, plugin_of

CARDS = ["NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4"]
CARD_NAMES = [None, "NVIDIA-A100", "NVIDIA-H100|NVIDIA-A100", "NVIDIA-T4|NVIDIA-V100", "NVIDIA-V100"]


def assert_same_check(fast: TaskCheck, slow: TaskCheck) -> None:
    assert fast.queue == slow.queue
    assert fast.demand == slow.demand
    assert fast.card_names == slow.card_names
    assert [ids.tolist() for ids in fast.groups] == [ids.tolist() for ids in slow.groups]
    assert fast.allowed.tolist() == slow.allowed.tolist()
    assert fast.messages == slow.messages
    assert list(fast.refusals.items()) == list(slow.refusals.items())
    assert [said(r) for r in fast.refusals.values()] == [said(r) for r in slow.refusals.values()]
    assert fast.failure == slow.failure and said(fast.failure) == said(slow.failure)
    assert fast.none_reasons == slow.none_reasons
    assert fast.unoffered() == slow.unoffered()
    assert fast.ok == slow.ok


def said(refusal: Refusal | None) -> tuple[str, str] | None:
    return None if refusal is None else (refusal.reason, refusal.message)


def with_quota(queue: MakeQueue, quota: dict[str, int]) -> MakeQueue:
    """``queue`` with the card quota ``quota`` (no annotation when empty)."""
    if not quota:
        return queue
    return queue.card_quota("{" + ", ".join(f'"{k}": {v}' for k, v in quota.items()) + "}")


@settings(max_examples=300, deadline=None)
@given(
    quota=st.dictionaries(st.sampled_from(CARDS), st.integers(0, 4)),
    usages=st.lists(
        st.dictionaries(st.sampled_from([*CARDS, "cpu", "memory"]), st.integers(0, 6)), min_size=1, max_size=6
    ),
    card_name=st.sampled_from(CARD_NAMES[:4]),
    gpu=st.integers(0, 3),
    cpu=st.integers(1, 6),
    cpu_cap=st.sampled_from([None, "3", "8", "8"]),
    state=st.sampled_from(["Open", "Open", "Open", "Closed"]),
    unlimited=st.booleans(),
)
def test_task_plan_agrees_with_check_task_whatever_the_usage(
    *,
    quota: dict[str, int],
    usages: list[dict[str, int]],
    card_name: str | None,
    gpu: int,
    cpu: int,
    cpu_cap: str | None,
    state: str,
    unlimited: bool,
) -> None:
    """One plan asked under successive usages (cached checks reused) answers as check_task each time."""
    capability = {"memory": "10Gi"} if cpu_cap is None else {"cpu": cpu_cap, "memory": "10Gi"}
    q = queue_quota(with_quota(MakeQueue().capability(**capability).state(state), quota).model())
    try:
        demand = pod_card_demand(card_pod(POD.copy().req(cpu=str(cpu)), card_name, gpu), CATALOG)
    except InvalidAnnotation:
        return
    args = CapacityCardArgs(card_unlimited_cpu_memory=unlimited)
    plan = TaskPlan(q, demand, CATALOG, args)
    for allocated in usages + usages:  # the second round answers from the memo
        ledger = ledger_with(allocated)
        assert_same_check(plan.check(ledger), check_task(q, ledger, demand, CATALOG, args))


def _engine(quota: dict[str, int], unlimited: bool) -> CapacityCard:
    engine = CapacityCard(CapacityCardArgs(card_unlimited_cpu_memory=unlimited))
    engine.set_nodes(NODES)
    engine.set_queue(with_quota(MakeQueue().capability(cpu="12", memory="64Gi"), quota).model())
    return engine


@settings(max_examples=150, deadline=None)
@given(
    quota=st.dictionaries(st.sampled_from(CARDS), st.integers(0, 6)),
    pods=st.lists(
        st.tuples(
            st.sampled_from(CARD_NAMES),
            st.integers(0, 2),
            st.sampled_from(["1", "2"]),
            st.sampled_from([node.node for node in NODES]),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    ),
    unlimited=st.booleans(),
)
def test_engine_hot_path_agrees_with_the_reference_functions(
    *, quota: dict[str, int], pods: list[tuple[str | None, int, str, str, bool]], unlimited: bool
) -> None:
    """Pods of a few shared classes go pending, get checked and reserved (some unreserved and reserved
    again, some rejected by quota), and every answer equals check_task / resolve_charge from scratch."""
    engine = _engine(quota, unlimited)
    q = engine.quotas["team-a"]
    nodes = {node.node: node for node in NODES}
    pending: list[PodInfo] = []
    for i, (card_name, gpu, cpu, _, _) in enumerate(pods):
        pod = card_pod(POD.copy().name(f"p{i}").req(cpu=cpu), card_name, gpu)
        engine.set_pod(pod)
        pending.append(pod)
    for rounds in range(2):
        for pod, (_, _, _, node, unreserve) in zip(pending, pods, strict=True):
            ledger = engine.ledgers["team-a"]
            check = engine.task_check(pod)
            try:
                demand = pod_card_demand(pod, engine.catalog, autoscaled=engine.args.autoscaled_card_types)
            except InvalidAnnotation:
                assert check.failure is not None
                assert engine.reserve(pod.with_node_name(node), node, check) == {}
                continue
            assert_same_check(check, check_task(q, ledger, demand, engine.catalog, engine.args))
            if not check.ok or ledger.charge_of(pod.key) is not None:
                continue
            charge = engine.reserve(pod.with_node_name(node), node, check)
            assert charge == resolve_charge(demand, nodes[node], engine.args, check.allowed_names)
            assert ledger.charge_of(pod.key) == charge
            if unreserve and rounds == 0:
                assert engine.unreserve(pod) == charge
    total: dict[str, int] = {}
    for pod in pending:
        for key, value in (engine.ledgers["team-a"].charge_of(pod.key) or {}).items():
            total[key] = total.get(key, 0) + value
    assert engine.ledgers["team-a"].allocated == {k: v for k, v in total.items() if v}


def test_pods_of_one_class_share_their_demand_and_check() -> None:
    engine = _engine({"NVIDIA-A100": 4}, False)
    first, second = (POD.copy().name(name).card("NVIDIA-A100").gpus(1).info() for name in ("a", "b"))
    engine.set_pod(first)
    engine.set_pod(second)
    assert engine.task_check(first) is engine.task_check(second)
    engine.reserve(first.with_node_name("a1"), "a1", engine.task_check(first))
    # Usage changed but the verdict did not: still the shared check, still right.
    assert_same_check(
        engine.task_check(second),
        check_task(
            engine.quotas["team-a"],
            engine.ledgers["team-a"],
            pod_card_demand(second, engine.catalog),
            engine.catalog,
            engine.args,
        ),
    )


def test_a_queue_status_write_keeps_the_quota_object() -> None:
    engine = _engine({"NVIDIA-A100": 4}, False)
    before = engine.quotas["team-a"]
    queue = with_quota(MakeQueue().capability(cpu="12", memory="64Gi"), {"NVIDIA-A100": 4}).model()
    engine.set_queue(queue.model_copy(update={"status": queue.status.model_copy(update={"running": 3})}))
    assert engine.quotas["team-a"] is before
    engine.set_queue(with_quota(MakeQueue().capability(cpu="12", memory="64Gi"), {"NVIDIA-A100": 5}).model())
    assert engine.quotas["team-a"] is not before
    assert engine.quotas["team-a"].capability.amount("NVIDIA-A100") == 5000


def _reference_reasons(verdict: NodeFilter) -> list[tuple[list[bool], str]]:
    index = verdict.reason_index
    return [((index == code).tolist(), verdict.reasons[int(code)]) for code in np.unique(index[index >= 0])]


@settings(max_examples=100, deadline=None)
@given(codes=st.lists(st.integers(-1, 3), max_size=20))
def test_memoised_reasons_equal_the_per_call_computation(codes: list[int]) -> None:
    index = np.array(codes, dtype=np.int32)
    nodes = NodeFilter(index < 0, index, ("a", "b", "c", "d"))
    verdict = _Verdict(nodes)
    for _ in range(2):
        got = verdict.reasons()
        assert [(mask.tolist(), message) for mask, message in got] == _reference_reasons(nodes)
        assert isinstance(got, list)
        got.clear()  # a caller's list is its own
    assert verdict.any_passed == bool((index < 0).any())
    assert verdict.unresolvable.tolist() == (index >= 0).tolist()


def test_filter_reasons_called_late_describe_the_filter_call() -> None:
    """FitError asks for the reasons after the cycle went on: they still describe that Filter call."""
    sched, _ = make_scheduler(config=SchedulerConfig.default())
    for name, product in (("a100", "NVIDIA-A100"), ("h100", "NVIDIA-H100")):
        node = MakeNode(name).product(product).label("nvidia.com/gpu.memory", "81920")
        sched.set_node(node.alloc(cpu="64", memory="256Gi").gpus(8).info())
    queue = MakeQueue("q").card_quota('{"NVIDIA-A100": 2, "NVIDIA-H100": 1}')
    sched.put_object(queue.capability(cpu="100", memory="1Ti").obj())
    plugin: CapacityCardPlugin = plugin_of(sched, CapacityCardPlugin)
    pod = MakePod().queue("q").card("NVIDIA-A100|NVIDIA-H100").req(cpu="1").gpus(2)
    first = pod.copy().name("first").info()
    second = pod.copy().name("second").info()
    sched.add_pod(first)
    sched.add_pod(second)
    n = sched.cluster.n
    state = CycleState()
    assert plugin.pre_filter(state, second).is_success
    early = plugin.filter(state, second)
    expected = _reference_reasons(plugin._verdict(plugin.engine.task_check(second), n).nodes)
    assert len(expected) == 1 and early.passed.tolist().count(True) == 1  # H100 has too little quota
    # Bind the first pod to the A100 node: A100 is exhausted too, a new Filter rejects both nodes.
    bound = first.with_node_name("a100")
    first_state = CycleState()
    assert plugin.pre_filter(first_state, first).is_success
    assert plugin.reserve(first_state, bound, sched.cluster.row_of["a100"]).is_success
    later_state = CycleState()
    assert plugin.pre_filter(later_state, second).is_success
    later = plugin.filter(later_state, second)
    assert not later.passed.any()
    assert [(m.tolist(), r) for m, r in early.reasons()] == expected
    assert len(later.reasons()) == 2
