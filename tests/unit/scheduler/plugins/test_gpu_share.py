"""GPUShare in the scheduler's in-memory cycle: tensor-fusion pods on one shared GPU, charged to their
GPUResourceQuota with the allocation (design.md Semantics 19).

The first two tests are the two faults of issue 26 ("No per-GPU bookkeeping"), as they stood: a second
50-TFLOPS pod of a 1-GPU node refused, and a pod with only tensor-fusion annotations bound as a CPU pod
yet charged 50 TFLOPS and a worker.
"""

from __future__ import annotations

from dataclasses import replace

from gpuq_k8s.common.model.gpu_quota.quota import TFLOPS
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import ClusterEvent
from gpuq_k8s.scheduler.plugins.gpu_quota import GPUQuota
from gpuq_k8s.scheduler.plugins.gpu_share import NO_GPU, GPUShare
from tests.testing.builders import MakeGPUResourceQuota, MakeNode, MakePod
from tests.testing.scheduler import make_scheduler, plugin_of

GPU_IDS = "tensor-fusion.ai/gpu-ids"
TF = {"tensor-fusion.ai/tflops-request": "50", "tensor-fusion.ai/vram-request": "10Gi"}
# A 100-TFLOPS, 80 GiB card (the .tflops label overrides the built-in table).
CARD = (
    MakeNode("a100")
    .product("NVIDIA-A100")
    .label("nvidia.com/gpu.memory", "81920")
    .label("nvidia.com/gpu.tflops", "100")
    .alloc(cpu="64", memory="256Gi")
)
CPU_NODE = MakeNode("cpu").alloc(cpu="64", memory="256Gi")


def _config(placement: str = "") -> str:
    args = f"\n    arguments: {{gpuPlacement: {placement}}}" if placement else ""
    return f"""
actions: "allocate, preempt"
tiers:
- plugins:
  - name: priority
  - name: predicates
  - name: gpu-quota{args}
"""


def _scheduler(gpus: int = 1, placement: str = "", cpu_node: bool = False) -> Scheduler:
    sched, _ = make_scheduler(config=_config(placement))
    sched.set_node(CARD.copy().gpus(gpus).info())
    if cpu_node:
        sched.set_node(CPU_NODE.copy().info())
    sched.put_object(MakeGPUResourceQuota("gq").total(maxWorkers=10).obj())
    return sched


def _run(sched: Scheduler) -> None:
    while sched.schedule_one() is not None:
        pass


def _tf(name: str, annotations: dict[str, str] | None = None) -> MakePod:
    return MakePod().name(name).req(cpu="1").annotations(annotations or TF)


def _gpu_ids(sched: Scheduler) -> dict[str, str]:
    """What PreBind wrote on each pod (tensor-fusion.ai/gpu-ids)."""
    backend = sched.backend
    return {
        key: patch["metadata"]["annotations"][GPU_IDS]
        for key, ref, patch in backend.writes  # type: ignore[attr-defined]
        if ref.startswith("Pod/")
    }


def test_two_50_tflops_pods_share_the_one_gpu_and_a_third_gets_the_device_reason() -> None:
    sched = _scheduler(cpu_node=True)
    for i in range(3):
        sched.add_pod(_tf(f"w{i}").info())
    _run(sched)
    assert sched.backend.bindings == {"ns/w0": "a100", "ns/w1": "a100"}  # type: ignore[attr-defined]
    assert _gpu_ids(sched) == {"ns/w0": "a100-gpu-0", "ns/w1": "a100-gpu-0"}
    reason = sched.reasons["ns/w2"]
    assert reason.startswith(
        "0/2 nodes are available: 1 gpu-0 on a100: 0 TFLOPS left, 50 asked, 1 " + NO_GPU + "."
    ), reason
    usage = plugin_of(sched, GPUQuota).store.usage("ns")
    assert (usage.gpu_count, usage.tflops_request) == (2, 100_000)


def test_an_annotation_only_pod_is_no_cpu_pod_and_is_charged_nothing_unplaced() -> None:
    sched, _ = make_scheduler(config=_config())
    sched.set_node(CPU_NODE.copy().info())
    sched.put_object(MakeGPUResourceQuota("gq").total(maxWorkers=10).obj())
    sched.add_pod(_tf("w").info())
    _run(sched)
    assert sched.backend.bindings == {}  # type: ignore[attr-defined]
    assert sched.reasons["ns/w"].startswith(f"0/1 nodes are available: 1 {NO_GPU}.")
    assert plugin_of(sched, GPUQuota).store.usage("ns").gpu_count == 0


def test_pack_and_spread_follow_gpu_placement() -> None:
    for placement, expected in (
        ("CompactFirst", {"ns/w0": "a100-gpu-0", "ns/w1": "a100-gpu-0"}),
        ("LowLoadFirst", {"ns/w0": "a100-gpu-0", "ns/w1": "a100-gpu-1"}),
    ):
        sched = _scheduler(gpus=2, placement=placement)
        for i in range(2):
            sched.add_pod(_tf(f"w{i}", {"tensor-fusion.ai/tflops-request": "20"}).info())
        _run(sched)
        assert _gpu_ids(sched) == expected, placement


def test_vram_limits_as_well_as_tflops() -> None:
    sched = _scheduler()
    for i in range(3):
        sched.add_pod(
            _tf(
                f"w{i}", {"tensor-fusion.ai/tflops-request": "1", "tensor-fusion.ai/vram-request": "30Gi"}
            ).info()
        )
    _run(sched)
    assert sorted(sched.backend.bindings) == ["ns/w0", "ns/w1"]  # type: ignore[attr-defined]
    assert "gpu-0 on a100: 20Gi VRAM left, 30Gi asked" in sched.reasons["ns/w2"]


def test_pods_in_flight_never_share_more_than_one_device_holds() -> None:
    """Reserve holds the room before any binding: the third pod reserved at once is refused."""
    sched = _scheduler()
    plugin = plugin_of(sched, GPUShare)
    row = sched.cluster.row_of["a100"]
    outcomes = []
    for i in range(3):
        pod = _tf(f"w{i}").info()
        state = CycleState()
        assert plugin.pre_filter(state, pod).is_success
        outcomes.append(plugin.reserve(state, replace(pod, node_name="a100"), row))
    assert [s.is_success for s in outcomes] == [True, True, False]
    assert outcomes[2].message == "gpu-0 on a100: 0 TFLOPS left, 50 asked"
    plugin.unreserve(state, pod, row)  # the refused pod holds nothing: nothing given back
    assert plugin.ledger.use("a100").devices[0].tflops == 100_000


def test_restart_rebuilds_the_shares_from_the_pods_gpu_ids() -> None:
    sched = _scheduler(gpus=2, placement="LowLoadFirst")
    # bound before the restart: 90 TFLOPS on gpu-1 (as its annotation says), none on gpu-0
    sched.add_pod(
        _tf("old", {"tensor-fusion.ai/tflops-request": "90"})
        .node("a100")
        .annotation(GPU_IDS, "a100-gpu-1")
        .info()
    )
    plugin = plugin_of(sched, GPUShare)
    assert plugin.ledger.use("a100").devices[1].tflops == 90_000
    assert plugin_of(sched, GPUQuota).store.usage("ns").tflops_request == 90_000
    sched.add_pod(_tf("new", {"tensor-fusion.ai/tflops-request": "20"}).info())
    _run(sched)
    sched.add_pod(_tf("big", {"tensor-fusion.ai/tflops-request": "90"}).info())
    _run(sched)
    assert _gpu_ids(sched) == {"ns/new": "a100-gpu-0"}
    assert "gpu-1 on a100: 10 TFLOPS left, 90 asked" in sched.reasons["ns/big"]
    assert "gpu-0 on a100: 80 TFLOPS left, 90 asked" in sched.reasons["ns/big"]


def test_a_bound_pod_with_a_bad_gpu_ids_is_placed_anew_with_a_warning() -> None:
    sched = _scheduler()
    sched.add_pod(_tf("old").node("a100").annotation(GPU_IDS, "elsewhere-gpu-0").info())
    assert plugin_of(sched, GPUShare).ledger.use("a100").devices[0].tflops == 50_000
    assert any(
        "tensor-fusion.ai/gpu-ids: invalid value 'elsewhere-gpu-0'" in e.message
        for e in sched.backend.events  # type: ignore[attr-defined]
    )


def test_whole_gpu_and_shared_pods_never_collide_on_a_device() -> None:
    sched = _scheduler(gpus=2)
    sched.add_pod(_tf("shared").info())
    _run(sched)
    sched.add_pod(MakePod().name("two-whole").req(cpu="1").gpus(2).info())
    _run(sched)
    assert (
        "a100: 1 of 2 GPU(s) shared by tensor-fusion pods, 0 held whole, 2 asked whole"
        in sched.reasons["ns/two-whole"]
    )
    sched.add_pod(MakePod().name("one-whole").req(cpu="1").gpus(1).info())
    _run(sched)
    sched.add_pod(_tf("big", {"tensor-fusion.ai/tflops-request": "60"}).info())
    _run(sched)
    assert sorted(sched.backend.bindings) == ["ns/one-whole", "ns/shared"]  # type: ignore[attr-defined]
    assert "1 GPU(s) on a100 held by whole-GPU pods" in sched.reasons["ns/big"]


def test_bad_annotation_is_refused_naming_the_pod_annotation_value_and_expectation() -> None:
    sched = _scheduler()
    sched.add_pod(_tf("bad", {"tensor-fusion.ai/tflops-request": "fifty"}).info())
    _run(sched)
    # without a GPUResourceQuota in the namespace gpu-quota skips the pod: GPUShare says it
    free, _ = make_scheduler(config=_config())
    free.set_node(CARD.copy().gpus(1).info())
    free.add_pod(_tf("bad", {"tensor-fusion.ai/tflops-request": "fifty"}).info())
    _run(free)
    assert "tensor-fusion.ai/tflops-request: invalid value 'fifty'" in free.reasons["ns/bad"]
    queued = free.queue.get("ns/bad")
    assert queued is not None and queued.rejected_by == frozenset({"GPUShare:annotation"})
    for event in (ClusterEvent.POD_DELETED, ClusterEvent.NODE_CHANGED, ClusterEvent.QUOTA_CHANGED):
        assert free.queue.on_event(event) == 0  # only the pod's own update can cure it
    assert (
        "Pod/ns/bad: tensor-fusion.ai/tflops-request: invalid value 'fifty': expected a Kubernetes quantity"
        in sched.reasons["ns/bad"]
    )


def test_a_failed_binding_rolls_the_gpu_ids_back_and_gives_the_share_back() -> None:
    sched = _scheduler()
    sched.backend.fail_binds.add("ns/w")  # type: ignore[attr-defined]
    sched.add_pod(_tf("w").info())
    sched.schedule_one()
    assert ("ns/w", "Pod/ns/w") in sched.backend.rolled_back  # type: ignore[attr-defined]
    assert plugin_of(sched, GPUShare).ledger.use("a100").shared == 0
    assert plugin_of(sched, GPUQuota).store.usage("ns").gpu_count == 0


def test_preemption_sees_the_share_a_victim_frees() -> None:
    sched = _scheduler()
    sched.add_pod(
        _tf("low", {"tensor-fusion.ai/tflops-request": "80"})
        .node("a100")
        .annotation(GPU_IDS, "a100-gpu-0")
        .priority(1)
        .info()
    )
    sched.add_pod(_tf("high", {"tensor-fusion.ai/tflops-request": "50"}).priority(100).info())
    _run(sched)
    assert "ns/low" in sched.backend.evictions  # type: ignore[attr-defined]
    _run(sched)
    assert sched.backend.bindings.get("ns/high") == "a100"  # type: ignore[attr-defined]
    assert plugin_of(sched, GPUShare).ledger.use("a100").devices[0].tflops == 50_000


def test_simulate_reports_the_device_chosen() -> None:
    sched = _scheduler()
    sched.add_pod(_tf("w").info())
    _run(sched)
    plugin = plugin_of(sched, GPUShare)
    assert plugin.pod_fields(sched.cluster.pods["ns/w"]) == {"gpuIds": "a100-gpu-0"}
    assert TFLOPS  # the unit the ledger keeps (milli-TFLOPS) is the quota's


def test_nodes_are_scored_by_the_placement_too() -> None:
    """tensor-fusion scores a node by its GPUs' use: CompactFirst fills the used node, LowLoadFirst the
    idle one."""
    for placement, same in (("CompactFirst", True), ("LowLoadFirst", False)):
        sched, backend = make_scheduler(config=_config(placement))
        for name in ("n1", "n2"):
            sched.set_node(CARD.copy().name(name).gpus(1).info())
        sched.put_object(MakeGPUResourceQuota("gq").total(maxWorkers=10).obj())
        sched.add_pod(_tf("w0", {"tensor-fusion.ai/tflops-request": "20"}).info())
        _run(sched)
        sched.add_pod(_tf("w1", {"tensor-fusion.ai/tflops-request": "20"}).info())
        _run(sched)
        assert (backend.bindings["ns/w0"] == backend.bindings["ns/w1"]) is same, placement


def test_many_nodes_refused_group_by_what_they_lack_and_explain_keeps_every_device() -> None:
    sched, _ = make_scheduler(config=_config())
    for i in range(10):
        sched.set_node(CARD.copy().name(f"n{i}").gpus(1).info())
    sched.put_object(MakeGPUResourceQuota("gq").total(maxWorkers=100).obj())
    for i in range(10):
        sched.add_pod(_tf(f"w{i}", {"tensor-fusion.ai/tflops-request": "80"}).info())
    _run(sched)
    sched.add_pod(_tf("late").info())
    _run(sched)
    assert sched.reasons["ns/late"].startswith(
        "0/10 nodes are available: 10 no GPU to share has the TFLOPS asked."
    ), sched.reasons["ns/late"]
    plugin = plugin_of(sched, GPUShare)
    state = CycleState()
    late = sched.pending["ns/late"]
    assert plugin.pre_filter(state, late).is_success
    result = plugin.filter(state, late)
    assert result.detail is not None
    assert result.detail(sched.cluster.row_of["n3"]) == "gpu-0 on n3: 20 TFLOPS left, 50 asked"
    assert result.unresolvable is not None and not result.unresolvable.any()  # room can be freed


def test_a_pod_no_gpu_could_ever_hold_is_unresolvable() -> None:
    sched = _scheduler()
    sched.add_pod(_tf("huge", {"tensor-fusion.ai/tflops-request": "150"}).info())
    _run(sched)
    plugin = plugin_of(sched, GPUShare)
    state = CycleState()
    pod = sched.pending["ns/huge"]
    assert plugin.pre_filter(state, pod).is_success
    result = plugin.filter(state, pod)
    assert result.unresolvable is not None and result.unresolvable.all()
    assert "gpu-0 on a100: 100 TFLOPS left, 150 asked" in sched.reasons["ns/huge"]


def test_a_pod_asking_a_gpu_resource_with_the_annotations_stays_a_whole_card_pod() -> None:
    """The device plugin hands ``nvidia.com/gpu`` out whole (kubelet would refuse a second pod on the
    one card): such pods are charged by their annotations but never share (design.md Semantics 19)."""
    sched = _scheduler()
    for i in range(2):
        sched.add_pod(_tf(f"w{i}").gpus(1).info())
    _run(sched)
    assert list(sched.backend.bindings) == ["ns/w0"]  # type: ignore[attr-defined]
    assert "Insufficient nvidia.com/gpu" in sched.reasons["ns/w1"]
    assert _gpu_ids(sched) == {}
    assert plugin_of(sched, GPUShare).ledger.use("a100").whole == 1


def test_pods_put_back_in_another_order_keep_their_devices() -> None:
    """Preemption's dry run takes victims off and puts them back; in memory (gpuq simulate) the pods
    carry no gpu-ids, so the ledger remembers where each was rather than choosing again."""
    sched = _scheduler(gpus=2)
    sched.add_pod(_tf("a", {"tensor-fusion.ai/tflops-request": "60"}).info())
    _run(sched)
    sched.add_pod(_tf("b", {"tensor-fusion.ai/tflops-request": "50"}).info())
    _run(sched)
    plugin = plugin_of(sched, GPUShare)
    before = {key: share.devices for key, share in plugin.ledger.shares().items()}
    assert before == {"ns/a": (0,), "ns/b": (1,)}
    a, b = sched.cluster.remove_pod("ns/a"), sched.cluster.remove_pod("ns/b")
    assert a is not None and b is not None
    sched.cluster.add_pod(b)  # alone on idle devices, b would pack onto gpu-0
    sched.cluster.add_pod(a)
    assert {key: share.devices for key, share in plugin.ledger.shares().items()} == before
