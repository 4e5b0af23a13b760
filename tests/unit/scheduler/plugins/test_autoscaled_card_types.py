"""Card types a node autoscaler adds (capacity-card's ``autoscaledCardTypes``, design.md Semantics 16).

With a cluster autoscaler or Karpenter a node appears only after a pending pod asks for it. A pod
asking for a card type no node offers right now, whose queue has quota for it, waits for a node
offering it ("waits for a node offering X", not "never"), and binds once such a node joins; only the
quota makes it never. ``autoscaledCardTypes: false`` restores the strict rule for clusters without
autoscaling: such a pod can never fit the cluster as it stands.
"""

from __future__ import annotations

from gpuq_k8s.common.model.config import DEFAULT_CONFIG_YAML, SchedulerConfig
from gpuq_k8s.common.model.outlook import NEVER, WAIT, outlook_of
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.status import Code
from tests.testing.builders import MakeNode, MakePod, MakeQueue
from tests.testing.clock import FakeClock
from tests.testing.scheduler import make_scheduler

QUEUE = (
    MakeQueue("team-a").card_quota('{"NVIDIA-A100": 8, "NVIDIA-H100": 4}').capability(cpu="100", memory="1Ti")
)


def _node(name: str, product: str) -> MakeNode:
    return MakeNode(name).product(product).alloc(cpu="96", memory="1Ti", pods="110").gpus(8)


def _pod(name: str, card: str, gpus: int) -> MakePod:
    return MakePod(name, "ml").queue("team-a").req(cpu="1").gpus(gpus).card(card)


def _scheduler(config: str = DEFAULT_CONFIG_YAML) -> tuple[Scheduler, FakeClock]:
    clock = FakeClock()
    sched, _ = make_scheduler(config=SchedulerConfig.from_yaml(config), clock=clock)
    sched.put_object(QUEUE.obj())
    sched.set_node(_node("a100-1", "NVIDIA-A100").info())
    return sched, clock


def _run(sched: Scheduler) -> None:
    sched.run_enqueue()
    while sched.schedule_one() is not None or sched.run_enqueue():
        pass


def test_a_pod_waits_for_a_node_offering_its_card_type_and_binds_when_one_joins() -> None:
    sched, clock = _scheduler()
    sched.add_pod(_pod("train", "NVIDIA-H100", 2).info())
    sched.run_enqueue()
    attempt = sched.schedule_one()
    assert attempt is not None and attempt.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert attempt.message == (
        "0/1 nodes are available: Queue/team-a has quota for NVIDIA-H100, which no node offers yet "
        "(waits for a node offering NVIDIA-H100)."
    )
    assert outlook_of(attempt.message) == WAIT
    clock.now = 30.0  # past the pod's backoff
    sched.set_node(_node("h100-1", "NVIDIA-H100").info())  # NodeAdded: the pod is retried
    _run(sched)
    assert sched.cluster.pods["ml/train"].node_name == "h100-1"


def test_a_preferred_card_type_to_come_does_not_keep_a_pod_off_the_one_offered() -> None:
    """``NVIDIA-H100|NVIDIA-A100``: the H100 no node offers is a candidate, the A100 a node offers
    takes the pod now (a group with an offered candidate is decided per node, Semantics 1)."""
    sched, _ = _scheduler()
    sched.add_pod(_pod("train", "NVIDIA-H100|NVIDIA-A100", 2).info())
    _run(sched)
    assert sched.cluster.pods["ml/train"].node_name == "a100-1"


def test_only_the_quota_makes_it_never() -> None:
    sched, _ = _scheduler()
    sched.add_pod(_pod("too-many", "NVIDIA-H100", 6).info())  # H100 quota 4
    sched.add_pod(_pod("no-quota", "NVIDIA-B200", 1).info())  # not in the queue's card quota
    _run(sched)
    too_many, no_quota = sched.reasons["ml/too-many"], sched.reasons["ml/no-quota"]
    assert outlook_of(too_many) == NEVER and "NVIDIA-H100 limit 4 would have to be at least 6" in too_many
    assert outlook_of(no_quota) == NEVER and "NVIDIA-B200 limit 0 would have to be at least 1" in no_quota
    assert "no node offers" in too_many and "no node offers" in no_quota


def test_without_autoscaling_a_card_type_no_node_offers_can_never_fit() -> None:
    strict = DEFAULT_CONFIG_YAML.replace(
        "nodeOrderWeight: 100.0}", "nodeOrderWeight: 100.0, autoscaledCardTypes: false}"
    )
    assert strict != DEFAULT_CONFIG_YAML
    sched, _ = _scheduler(strict)
    sched.add_pod(_pod("train", "NVIDIA-H100", 2).info())
    _run(sched)
    reason = sched.reasons["ml/train"]
    assert outlook_of(reason) == NEVER
    assert reason.endswith("(can never fit under the current cluster: no node offers NVIDIA-H100).")
