"""drf (common/model/drf.py, scheduler/plugins/drf.py): dominant shares by hand, and job order by
dominant share through ``gpuq simulate``, with the case of Volcano's
``pkg/scheduler/actions/allocate/allocate_test.go`` TestAllocate that drf decides ("two Jobs on one
node"). Volcano's own drf test (``plugins/drf/hdrf_test.go``) covers only the hierarchical mode, which
gpuq does not implement, and no Volcano test runs preemption through drf, so drf's preemptable function
is checked by hand: its victim rule directly, and through ``gpuq simulate``'s preempt action."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.common.model import drf
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.plugins.drf import DRF
from gpuq_k8s.scheduler.queue import SchedulingQueue
from gpuq_k8s.scheduler.simulate.run import VirtualClock
from tests.testing.builders import MakePod, MakePodGroup, MakeQueue
from tests.testing.config import config_text
from tests.testing.volcano_scenarios import pod, simulate_scenario, volcano_node, volcano_pod


def test_dominant_share_by_hand() -> None:
    """cpu 1/2 = 0.5, memory 1G/4G = 0.25, pods 1/10: cpu dominates at 0.5."""
    total = {"pods": 10, "cpu": 2000, "memory": 4 * 10**9}
    assert drf.dominant_share({"cpu": 1000, "memory": 10**9, "pods": 1}, total) == ("cpu", 0.5)
    assert drf.dominant_share({"memory": 3 * 10**9, "pods": 1}, total) == ("memory", 0.75)
    assert drf.dominant_share({}, total) == ("", 0.0)


def test_resource_the_cluster_lacks_is_not_a_dimension() -> None:
    """Volcano iterates the cluster total's resources only: a GPU the cluster has none of adds nothing."""
    assert drf.dominant_share({"nvidia.com/gpu": 1000, "cpu": 500}, {"cpu": 2000, "nvidia.com/gpu": 0}) == (
        "cpu",
        0.25,
    )


def test_preemptable_rule() -> None:
    """The preemptor's share with the task below (or within 1e-6 of) the victim job's share without it."""
    assert drf.preemptable(0.3, 0.5)
    assert drf.preemptable(0.5, 0.5 - 1e-7)
    assert not drf.preemptable(0.6, 0.5)


# Jobs ordered by drf (or by priority, to compare) and gang; then predicates and nodeorder.
DRF_JOB_ORDER = config_text("drf, gang", "predicates, nodeorder", actions="enqueue, allocate")
PRIORITY_JOB_ORDER = config_text("priority, gang", "predicates, nodeorder", actions="enqueue, allocate")


def _two_jobs_on_one_node() -> list[dict[str, Any]]:
    """allocate_test.go TestAllocate "two Jobs on one node": pg1 (c1, queue c1) and pg2 (c2, queue c2),
    two 1-cpu 1G pods each, one node n1 of 2 cpu, 4G, 10 pods."""
    objects: list[dict[str, Any]] = [
        MakeQueue("c1").weight(1).obj(),
        MakeQueue("c2").weight(1).obj(),
        MakePodGroup("pg1", "c1").queue("c1").min_member(0).phase("Inqueue").obj(),
        MakePodGroup("pg2", "c2").queue("c2").min_member(0).phase("Inqueue").obj(),
        volcano_node("n1", "2", "4G").obj(),
    ]
    for namespace, group in (("c1", "pg1"), ("c2", "pg2")):
        for i in (1, 2):
            objects.append(volcano_pod(namespace, f"{group}-p-{i}", "1", "1G").group(group).obj())
    return objects


def _bound(out: dict[str, Any]) -> dict[str, str]:
    return {f"{p['namespace']}/{p['name']}": p["node"] for p in out["pods"] if p["phase"] == "Bound"}


def test_allocate_test_go_two_jobs_on_one_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Expected binds: c2/pg2-p-1 and c1/pg1-p-1 on n1: once pg1 has a pod its share (cpu 0.5) is
    above pg2's (0), so pg2's first pod goes before pg1's second."""
    out = simulate_scenario(tmp_path, capsys, DRF_JOB_ORDER, _two_jobs_on_one_node())
    assert _bound(out) == {"c2/pg2-p-1": "n1", "c1/pg1-p-1": "n1"}
    assert pod(out, "pg1-p-2")["phase"] == pod(out, "pg2-p-2")["phase"] == "Pending"


def test_without_drf_one_job_takes_the_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same input ordered by priority alone (then namespace/name): pg1's two pods take n1."""
    out = simulate_scenario(tmp_path, capsys, PRIORITY_JOB_ORDER, _two_jobs_on_one_node())
    assert _bound(out) == {"c1/pg1-p-1": "n1", "c1/pg1-p-2": "n1"}


def test_job_with_running_pods_waits_behind_a_job_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pg1 already runs a 1-cpu pod (share 1/3 of 3 cpu); pg2 runs nothing: pg2's pending pod takes the
    last free cpu although pg1's pod sorts first by namespace and name."""
    objects = [
        MakeQueue("q").weight(1).obj(),
        MakePodGroup("pg1", "a").queue("q").min_member(0).phase("Running").obj(),
        MakePodGroup("pg2", "b").queue("q").min_member(0).phase("Inqueue").obj(),
        volcano_node("n1", "3", "12G").obj(),
        volcano_pod("a", "running", "1", "1G", node="n1").group("pg1").obj(),
        volcano_pod("other", "filler", "1", "1G", node="n1").obj(),
        volcano_pod("a", "waiting", "1", "1G").group("pg1").obj(),
        volcano_pod("b", "waiting", "1", "1G").group("pg2").obj(),
    ]
    out = simulate_scenario(tmp_path, capsys, DRF_JOB_ORDER, objects)
    assert _bound(out) == {"a/running": "n1", "other/filler": "n1", "b/waiting": "n1"}


def test_live_keys_are_read_again_at_the_head() -> None:
    """A queue with live keys (drf's) puts a pod whose key grew since it was pushed behind the pods now
    ahead of it; with fixed keys (priority's) the order is the one taken at push time."""
    share = {"a": 0.0, "b": 0.0}

    def key(p: PodInfo) -> tuple[Any, ...]:
        return (share[p.namespace], p.namespace, p.name)

    for live, expected in ((True, ["a/1", "b/1", "a/2", "b/2"]), (False, ["a/1", "a/2", "b/1", "b/2"])):
        share.update(a=0.0, b=0.0)
        queue = SchedulingQueue(key, lambda: 0.0, live_keys=live)
        for namespace in ("a", "b"):
            for name in ("1", "2"):
                queue.add(MakePod(name, namespace).info())
        popped = []
        while (next_pod := queue.pop()) is not None:
            popped.append(next_pod.key)
            share[next_pod.namespace] += 0.5  # its job's share grows as it is placed
            queue.done(next_pod.key)
        assert popped == expected, live


def test_victims_follow_volcanos_preemptable_rule() -> None:
    """drf's preemptable function: job a holds 3 of 4 cpu, job b nothing; b's 1-cpu preemptor has a
    share of 1/4 with it. a's pods, taken one after another, leave a at 2/4 (a victim), 1/4 (equal: a
    victim) and 0/4 (below: not one)."""
    config = SchedulerConfig.from_yaml(DRF_JOB_ORDER)
    sched = Scheduler(config, default_registry(), MemoryBackend(), clock=VirtualClock())
    sched.set_node(volcano_node("n1", "4", "400G").info())
    for group in ("a", "b"):
        sched.put_object(MakePodGroup(group, "ns").queue("q").min_member(0).phase("Running").obj())
    placed = [volcano_pod("ns", f"a{i}", "1", "1G", node="n1").group("a").info() for i in range(3)]
    for running in placed:
        sched.add_pod(running)
    plugin = sched.framework.plugin("drf")
    assert isinstance(plugin, DRF)
    preemptor = volcano_pod("ns", "b0", "1", "1G").group("b").info()
    assert [p.name for p in plugin.victims(preemptor, placed)] == ["a0", "a1"]


def _preempt_config(drf_preemptable: bool) -> str:
    """preempt with drf's preemptable function (Volcano's default for drf) beside conformance, which
    allows any pod that is not critical or in kube-system; priority orders jobs and says which are
    starving, with its own preemptable function off."""
    return config_text(
        "priority, conformance, drf",
        "predicates",
        switches={"priority": {"enablePreemptable": False}, "drf": {"enablePreemptable": drf_preemptable}},
    )


def _running_jobs(a: int, b: int, a_priority: int = 0) -> list[dict[str, Any]]:
    """Queue q; n1 (4 cpu, 16G) full with job a's ``a`` running 1-cpu pods (pod priority
    ``a_priority``) and job b's ``b`` (pod priority 0)."""
    objects: list[dict[str, Any]] = [MakeQueue("q").weight(1).obj(), volcano_node("n1", "4", "16G").obj()]
    for job, count, priority in (("a", a, a_priority), ("b", b, 0)):
        objects.append(MakePodGroup(job, "ns").queue("q").min_member(1).phase("Running").obj())
        for i in range(count):
            objects.append(
                volcano_pod("ns", f"{job}{i}", "1", "1G", node="n1").group(job).priority(priority).obj()
            )
    return objects


def test_drf_preempt_takes_only_from_the_job_above_the_preemptors_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """By hand (Volcano's unit tests run no preemption through drf): job a runs 3 of n1's 4 cpu, job
    b runs 1. A new job c's 1-cpu pod has a share of 1/4 with it. Without one pod, a keeps 2/4 >= 1/4 (a
    victim); without b0, b has 0 < 1/4 (not one). So one of a's pods goes and b0 stays, although the
    node walk takes the lowest-priority pod first (b0 at 0, a's at 10) when drf does not object."""
    objects = [
        *_running_jobs(a=3, b=1, a_priority=10),
        MakePodGroup("c", "ns").queue("q").min_member(1).phase("Inqueue").obj(),
        volcano_pod("ns", "c0", "1", "1G").group("c").priority(100).obj(),
    ]
    out = simulate_scenario(tmp_path, capsys, _preempt_config(True), objects)
    gone = {p["name"] for p in out["pods"] if p["phase"] == "Preempted"}
    assert len(gone) == 1 and gone < {"a0", "a1", "a2"}
    assert _bound(out)["ns/c0"] == "n1" and _bound(out)["ns/b0"] == "n1"


@pytest.mark.parametrize("drf_preemptable", [True, False])
def test_drf_preemptable_switch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], drf_preemptable: bool
) -> None:
    """By hand: job a runs 1 of n1's 4 cpu, job b runs 3 and has a fourth 1-cpu pod pending (share 4/4
    with it). Without a0, a has 0 < 1: drf allows no victim, so (conformance and drf intersecting in
    their tier) nothing is evicted. With drf's ``enablePreemptable: false`` (Volcano's default file)
    conformance alone decides and a0 makes room for b3."""
    objects = [*_running_jobs(a=1, b=3), volcano_pod("ns", "b3", "1", "1G").group("b").obj()]
    out = simulate_scenario(tmp_path, capsys, _preempt_config(drf_preemptable), objects)
    if drf_preemptable:
        assert pod(out, "a0")["phase"] == "Bound" and pod(out, "b3")["phase"] == "Pending"
    else:
        assert pod(out, "a0")["phase"] == "Preempted" and _bound(out)["ns/b3"] == "n1"
