"""The capacity-scheduling and gpu-quota hot paths agree with the reference paths they shortcut.

* ElasticQuotaInfos keeps ``used`` in plain dicts and answers PreFilter with a plain-int pass; the
  reference is the Resources arithmetic and :meth:`ElasticQuotaInfos._prefilter_slow`.
* :func:`card_request` (from a precomputed card share) agrees with :func:`request_from_card`, and
  the plugin's cached per-row derivation with :meth:`GPUQuota._request_slow`.
* CapacityScheduling's deferred freeable arrays equal a direct per-pod sum.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq_k8s.common.model.cards.card_type import CardType
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.elastic.ledger import ElasticQuotaInfos
from gpuq_k8s.common.model.elastic.quota import ElasticQuota
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.gpu_quota.card_share import CardShare, card_share
from gpuq_k8s.common.model.gpu_quota.request import card_request, request_from_card
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import EMPTY, Resources
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.plugins.capacity_scheduling import CapacityScheduling
from gpuq_k8s.scheduler.plugins.gpu_quota import GPUQuota
from tests.testing.builders import GPU, MakeGPUResourceQuota, MakeNode, MakePod
from tests.testing.scheduler import make_scheduler

KEYS = ("cpu", "memory", "nvidia.com/gpu", "pods")
NAMESPACES = ("a", "b", "c")

amounts = st.dictionaries(st.sampled_from(KEYS), st.integers(0, 40), max_size=4)
requests = amounts.map(Resources)


@st.composite
def ledgers(draw: Any) -> tuple[ElasticQuotaInfos, dict[str, Resources]]:
    """A ledger after random quotas, reserves and unreserves, and each quota's ``used`` as the
    reference computes it: immutable Resources arithmetic, as before the in-place ledger."""
    infos = ElasticQuotaInfos()
    reference: dict[str, Resources] = {}
    charged: dict[str, tuple[str, Resources]] = {}

    def upsert(ns: str) -> None:
        infos.upsert(
            ElasticQuota(namespace=ns, name="q", min=Resources(draw(amounts)), max=Resources(draw(amounts)))
        )
        used = EMPTY
        for other, request in charged.values():
            if other == ns:
                used = used + request
        reference[ns] = used

    for ns in draw(st.lists(st.sampled_from(NAMESPACES), unique=True, max_size=2)):
        upsert(ns)
    for _ in range(draw(st.integers(0, 14))):
        step = draw(st.sampled_from(("reserve", "reserve", "unreserve", "upsert", "remove")))
        ns = draw(st.sampled_from(NAMESPACES))
        if step == "reserve":
            key = f"{ns}/p{draw(st.integers(0, 6))}"
            request = draw(requests)
            assert infos.reserve(ns, key, request) == (key not in charged)
            if key not in charged:
                charged[key] = (ns, request)
                if ns in reference:
                    reference[ns] = reference[ns] + request
        elif step == "unreserve" and charged:
            key = draw(st.sampled_from(sorted(charged)))
            owner, request = charged.pop(key)
            assert infos.unreserve(owner, key)
            if owner in reference:
                reference[owner] = reference[owner] - request
        elif step == "upsert":
            upsert(ns)
        elif step == "remove":
            infos.remove(ns)
            reference.pop(ns, None)
    return infos, reference


@settings(max_examples=300, deadline=None)
@given(ledgers(), st.sampled_from(NAMESPACES), requests)
def test_elastic_prefilter_fast_path_matches_the_reference(
    ledger: tuple[ElasticQuotaInfos, dict[str, Resources]], namespace: str, request: Resources
) -> None:
    infos, _ = ledger
    for asked, ref in ((request, "Pod/x/y"), (dict(request), "")):  # a plain dict is not memoised
        fast = infos.prefilter(namespace, asked, ref)
        slow = infos._prefilter_slow(namespace, asked, ref)
        assert (fast and (fast.rule, fast.message)) == (slow and (slow.rule, slow.message))


@settings(max_examples=300, deadline=None)
@given(ledgers())
def test_elastic_used_in_place_matches_resources_arithmetic(
    ledger: tuple[ElasticQuotaInfos, dict[str, Resources]],
) -> None:
    infos, reference = ledger
    assert infos.namespaces() == sorted(reference)
    total = EMPTY
    for ns, used in reference.items():
        snapshot = infos.snapshot()
        info = infos.get(ns)
        assert info is not None and info.used == used
        assert infos.used_numbers(ns) == used.to_numbers()
        assert snapshot.get(ns) == info
        total = total + used
    assert infos.total_used == total.nonzero()


PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "Tesla-T4", "NVIDIA-H100-80GB-HBM3", "Mystery-GPU", "NVIDIA-A30")


@st.composite
def cards(draw: Any) -> CardType:
    kind = draw(st.sampled_from(("whole", "mps", "mig")))
    return CardType(
        name="card",
        kind=kind,
        product=draw(st.sampled_from(PRODUCTS)),
        resource=draw(st.sampled_from(("nvidia.com/gpu", "nvidia.com/gpu.shared"))),
        count=8,
        memory_mib=draw(st.none() | st.integers(1, 100_000)),
        replicas=draw(st.none() | st.integers(1, 8)) if kind == "mps" else None,
        mig_profile=draw(st.sampled_from(("1g.10gb", "2c.3g.20gb", "bogus"))) if kind == "mig" else None,
    )


@settings(max_examples=400, deadline=None)
@given(
    cards(),
    st.none() | st.sampled_from(("100", "312500m", "oops")),
    st.integers(1, 9000),
    st.booleans(),
    st.booleans(),
)
def test_card_request_matches_request_from_card(
    card: CardType, tflops_label: str | None, units: int, need_tflops: bool, need_vram: bool
) -> None:
    labels = {} if tflops_label is None else {"nvidia.com/gpu.tflops": tflops_label}
    pod = MakePod("p", "ns").req(**{card.resource: f"{units}m"}).info()
    share: CardShare = card_share(card, labels)
    fast = card_request(units, share, require_tflops=need_tflops, require_vram=need_vram)
    try:
        reference = request_from_card(pod, card, labels, require_tflops=need_tflops, require_vram=need_vram)
    except InvalidValue:
        assert fast is None
    else:
        assert fast == reference


def _quota_cluster() -> Scheduler:
    """The default configuration with a GPUResourceQuota, ElasticQuotas in namespaces a and b, GPU nodes
    of three products (the T4 without its memory label) and a CPU node."""
    sched, _ = make_scheduler(config=SchedulerConfig.default())
    sched.put_object(
        MakeGPUResourceQuota("gpu", "tf").total(requests={"tflops": "2000", "vram": "2000Ti"}).obj()
    )
    for ns in ("a", "b"):
        sched.put_object(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "ElasticQuota",
                "metadata": {"name": "eq", "namespace": ns},
                "spec": {"min": {"cpu": "10"}, "max": {"cpu": "100"}},
            }
        )
    products = ("NVIDIA-A100", "Mystery-GPU", "Tesla-T4", "")
    for i, product in enumerate(products):
        node = MakeNode(f"n{i}").alloc(cpu="64", memory="512Gi", pods="110")
        if i != 2:
            node.label(f"{GPU}.memory", "81920")
        if product:
            node.product(product).gpus("8")
        sched.set_node(node.info())
    return sched


def _gpu_pod(name: str, ns: str, gpus: int, annotations: dict[str, str]) -> PodInfo:
    pod = MakePod(name, ns).annotations(annotations).req(cpu="1")
    return (pod.req(**{GPU: str(gpus)}) if gpus else pod).info()


def _outcome(call: Any) -> Any:
    try:
        return call()
    except InvalidValue as err:
        return str(err)


@pytest.mark.parametrize("ns", ["tf", "other"])
@pytest.mark.parametrize("gpus", [0, 1, 3])
@pytest.mark.parametrize(
    "annotations", [{}, {"tensor-fusion.ai/tflops-request": "10"}, {"tensor-fusion.ai/gpu-count": "x"}]
)
def test_gpu_quota_cached_request_matches_the_reference(
    ns: str, gpus: int, annotations: dict[str, str]
) -> None:
    sched = _quota_cluster()
    plugin = next(p for p in sched.framework.plugins if isinstance(p, GPUQuota))
    pod = _gpu_pod("p", ns, gpus, annotations)
    for row in range(sched.cluster.n + 1):
        fast = _outcome(lambda: plugin._request_on(pod, row))  # noqa: B023
        assert fast == _outcome(lambda: plugin._request_slow(pod, row))  # noqa: B023


def test_capacity_scheduling_deferred_freeable_matches_a_direct_sum() -> None:
    sched = _quota_cluster()
    plugin = next(p for p in sched.framework.plugins if isinstance(p, CapacityScheduling))
    cluster = sched.cluster
    pods = [
        MakePod(f"p{i}", ns)
        .req({"cpu": "1"} | ({"nvidia.com/gpu": str(i % 3)} if i % 3 else {}))
        .node(f"n{i % 4}")
        .info()
        for i in range(40)
        for ns in ("a", "b", "c")
    ]
    for pod in pods:
        cluster.add_pod(pod)
    for pod in pods[::3]:
        cluster.remove_pod(pod.key)
    plugin._flush()
    expected: dict[str | None, Any] = {}
    for pod in cluster.pods.values():
        target = pod.namespace if pod.namespace in plugin.infos else None
        array = expected.setdefault(target, np.zeros_like(cluster.allocatable))
        array[cluster.row_of[pod.node_name]] += cluster.pod_vector(pod)
    for target, array in expected.items():
        got = plugin._unquoted if target is None else plugin._freeable[target]
        assert np.array_equal(got, array)


def test_cluster_add_after_reserve_charges_once_and_after_unreserve_charges_again() -> None:
    sched = _quota_cluster()
    gpu = next(p for p in sched.framework.plugins if isinstance(p, GPUQuota))
    elastic = next(p for p in sched.framework.plugins if isinstance(p, CapacityScheduling))
    state = CycleState()
    first, second = _gpu_pod("p1", "tf", 1, {}), _gpu_pod("p2", "a", 2, {})
    for pod in (first, second):
        assert gpu.reserve(state, pod, 0).is_success
        elastic.reserve(state, pod, 0)
        sched.cluster.add_pod(pod.with_node_name("n0"))
    assert gpu.store.usage("tf").gpu_count == 1
    assert gpu.store.usage("a").gpu_count == 1
    info = elastic.infos.get("a")
    assert info is not None and info.used == Resources({"cpu": 1000, "nvidia.com/gpu": 2000})
    # Reserved, released, then bound by someone else: the cluster's add charges it.
    third = _gpu_pod("p3", "a", 1, {})
    assert gpu.reserve(state, third, 0).is_success
    elastic.reserve(state, third, 0)
    gpu.unreserve(state, third, 0)
    elastic.unreserve(state, third, 0)
    sched.cluster.add_pod(third.with_node_name("n0"))
    assert gpu.store.usage("a").gpu_count == 2
    info = elastic.infos.get("a")
    assert info is not None and info.used == Resources({"cpu": 2000, "nvidia.com/gpu": 3000})
