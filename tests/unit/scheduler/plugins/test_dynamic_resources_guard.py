"""The DynamicResources guard (scheduler/plugins/dynamic_resources.py): until gpuq allocates
ResourceClaims, a pod with ``spec.resourceClaims`` is never bound; it stays pending, unresolvable, with
a reason that says so, under every configuration that does not switch it off explicitly."""

from __future__ import annotations

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.scheduler.framework.status import Code
from tests.testing.builders import MakeNode, MakePod
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

NODE = MakeNode("n1").alloc(cpu="4", memory="8Gi", pods="10")
CLAIMING = MakePod("p").req(cpu="1").resource_claims("gpu", "nic")
REASON = "pod uses DRA resource claims (gpu, nic), which gpuq does not allocate yet"


def _attempt(config: str) -> tuple[str, str, Code, str]:
    sched, backend = make_scheduler(config=config)
    sched.set_node(NODE.info())
    sched.add_pod(CLAIMING.info())
    attempt = sched.schedule_one()
    assert attempt is not None
    condition = backend.conditions.get("ns/p")
    return attempt.node, attempt.message, attempt.status.code, condition.message if condition else ""


def test_a_pod_with_claims_stays_pending_with_the_reason() -> None:
    node, message, code, condition = _attempt(config_text("priority, gang", "predicates"))
    assert node == ""
    assert message == f"0/1 nodes are available: {REASON}."
    assert code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert condition == message  # PodScheduled=False carries it (and so explain and kubectl gpuq)


def test_a_configuration_without_predicates_keeps_the_guard() -> None:
    node, message, _, _ = _attempt(config_text("priority, gang", "capacity-scheduling"))
    assert node == "" and REASON in message


def test_predicate_dynamic_resource_allocation_enable_false_places_it_as_if_it_had_no_claims() -> None:
    config = config_text(
        "priority, gang",
        "predicates",
        arguments={"predicates": {"predicate.DynamicResourceAllocationEnable": False}},
    )
    sched, _ = make_scheduler(config=config)
    assert sched.framework.plugin(plugin_names.DYNAMIC_RESOURCES) is None
    node, _, _, _ = _attempt(config)
    assert node == "n1"


def test_a_pod_without_claims_passes() -> None:
    sched, _ = make_scheduler()
    sched.set_node(NODE.info())
    sched.add_pod(MakePod("q").req(cpu="1").info())
    attempt = sched.schedule_one()
    assert attempt is not None and attempt.node == "n1"


def test_no_cluster_event_retries_it() -> None:
    """Its claims are immutable and gpuq allocates none: nothing in the cluster can help."""
    sched, _ = make_scheduler()
    sched.set_node(NODE.info())
    sched.add_pod(CLAIMING.info())
    sched.schedule_one()
    sched.set_node(MakeNode("n2").alloc(cpu="4", memory="8Gi", pods="10").info())
    sched.add_pod(MakePod("r").req(cpu="1").node("n1").info())
    sched.delete_pod("ns/r")
    queued = sched.queue.get("ns/p")
    assert queued is not None and queued.pool == "unschedulable"
