"""Member plugins (scheduler/framework/registry.py, scheduler/plugins/members.py): a Volcano entry such
as ``predicates`` runs kube-scheduler's filter plugins as members, each built after the entry's plugin,
placed in the entry's tier, labelled with its own name and governed by the entry's switches; and the
``predicates`` switches (common/model/predicates.py) that the base plugin honours itself."""

from __future__ import annotations

import numpy as np
import pytest

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import ConfigErrors
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.predicates import PredicatesArgs
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import FilterPlugin, FilterResult, Handle, Plugin
from gpuq_k8s.scheduler.framework.registry import PluginSettings, plugin_args
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.plugins.members import MEMBERS, predicate
from tests.testing.builders import MakeNode, MakePod
from tests.testing.clock import FakeClock
from tests.testing.config import config_text


class NoOddRows(FilterPlugin):
    """A member that rejects every odd node row."""

    name = "NoOddRows"

    def filter(self, state: CycleState, pod: PodInfo) -> FilterResult:
        n = self.handle.cluster.n
        passed = np.arange(n) % 2 == 0
        return FilterResult(passed, lambda: [(~passed, "node(s) had an odd row")])


def _scheduler(config: str, *, ports_switch: bool = True) -> tuple[Scheduler, MemoryBackend]:
    registry = default_registry()

    def build(handle: Handle) -> Plugin:
        return NoOddRows(handle)

    registry.register_member(plugin_names.PREDICATES, predicate(lambda a: a.node_ports, build))
    backend = MemoryBackend()
    sched = Scheduler(SchedulerConfig.from_yaml(config), registry, backend, clock=FakeClock())
    backend.objects = sched.objects
    for name in ("n0", "n1", "n2", "n3"):
        sched.set_node(MakeNode(name).alloc(cpu="4", memory="8Gi", pods="10").info())
    return sched, backend


def test_a_member_runs_in_its_entrys_tier_under_its_own_name() -> None:
    sched, _ = _scheduler(config_text("priority, gang", "predicates"))
    framework = sched.framework
    member = framework.plugin("NoOddRows")
    assert member is not None and member.config_name == plugin_names.PREDICATES
    # The entry's own plugin, its members registered before (kube-scheduler's filters), then this one.
    builtin = [
        p.name for p in framework.filter_plugins if p.name not in (plugin_names.PREDICATES, "NoOddRows")
    ]
    assert [p.name for p in framework.filter_plugins] == [plugin_names.PREDICATES, *builtin, "NoOddRows"]
    # Its tier is the entry's (the second), after the entry's own plugin and its other members.
    tiers = [[p.name for p in tier] for tier in framework._tiers]
    assert tiers[1] == [plugin_names.PREDICATES, *builtin, "NoOddRows"]
    sched.add_pod(MakePod("p", "ns").req(cpu="1").scheduler("gpuq-scheduler").info())
    attempt = sched.schedule_one()
    assert attempt is not None and attempt.node in ("n0", "n2")


def test_a_member_reports_under_its_own_name() -> None:
    sched, _ = _scheduler(config_text("priority, gang", "predicates"))
    sched.add_pod(
        MakePod("p", "ns").req(cpu="1").node_selector({"x": "y"}).scheduler("gpuq-scheduler").info()
    )
    attempt = sched.schedule_one()
    assert attempt is not None and not attempt.node
    # predicates rejects every node for the selector; the member's verdict is its own.
    assert "4 node(s) didn't match Pod's node affinity/selector" in attempt.message


def test_the_entrys_switches_govern_its_members() -> None:
    config = config_text("priority, gang", "predicates", switches={"predicates": {"enablePredicate": False}})
    sched, _ = _scheduler(config)
    names = {p.name for p in sched.framework.filter_plugins}
    # Neither predicates nor its member filters (allocate's own resource fit stands in: Semantics 15).
    assert plugin_names.PREDICATES not in names and "NoOddRows" not in names
    assert sched.framework.plugin("NoOddRows") is not None  # built, but its Filter is switched off


def test_the_entrys_arguments_switch_a_member_off() -> None:
    config = config_text(
        "priority, gang", "predicates", arguments={"predicates": {"predicate.NodePortsEnable": False}}
    )
    sched, _ = _scheduler(config)
    assert sched.framework.plugin("NoOddRows") is None


def test_members_of_an_unregistered_entry_are_refused() -> None:
    registry = default_registry()
    with pytest.raises(ValueError, match="not registered"):
        registry.register_member("no-such-plugin", predicate(None, NoOddRows))


def test_every_member_table_entry_is_a_registered_plugin() -> None:
    assert set(MEMBERS) <= set(default_registry().names)


# -- the predicates arguments (Volcano's predicate.<X>Enable) ---------------------------------------


def test_predicates_arguments_default_as_volcano() -> None:
    args = PredicatesArgs.parse({})
    assert args.node_affinity and args.node_ports and args.taint_toleration and args.pod_affinity
    assert args.node_volume_limits and args.volume_zone and args.pod_topology_spread
    assert args.volume_binding and args.dynamic_resource_allocation and not args.cache


def test_predicates_arguments_report_every_problem_with_its_key() -> None:
    with pytest.raises(ConfigErrors) as caught:
        PredicatesArgs.parse({"predicate.NodePortsEnable": "no", "predicate.Nope": True})
    lines = caught.value.lines()
    assert len(lines) == 2
    assert any("predicate.NodePortsEnable" in line and "true or false" in line for line in lines)
    assert any("predicate.Nope" in line for line in lines)


def _placed(arguments: dict[str, bool], node: MakeNode, pod: MakePod) -> str:
    config = config_text("priority, gang", "predicates", arguments={"predicates": dict(arguments)})
    sched = Scheduler(
        SchedulerConfig.from_yaml(config), default_registry(), MemoryBackend(), clock=FakeClock()
    )
    sched.set_node(node.info())
    sched.add_pod(pod.scheduler("gpuq-scheduler").info())
    attempt = sched.schedule_one()
    assert attempt is not None
    return attempt.node


def test_node_affinity_enable_false_ignores_selectors() -> None:
    node = MakeNode("b").alloc(cpu="4", pods="10").label("zone", "b")
    pod = MakePod("p", "ns").req(cpu="1").node_selector({"zone": "a"})
    assert _placed({}, node, pod) == ""
    assert _placed({"predicate.NodeAffinityEnable": False}, node, pod) == "b"


def test_taint_toleration_enable_false_ignores_taints() -> None:
    node = MakeNode("tainted").alloc(cpu="4", pods="10").taint("gpu", "NoSchedule", "yes")
    pod = MakePod("p", "ns").req(cpu="1")
    assert _placed({}, node, pod) == ""
    assert _placed({"predicate.TaintTolerationEnable": False}, node, pod) == "tainted"


def test_plugin_args_of_a_member_read_the_entrys_arguments() -> None:
    config = SchedulerConfig.from_yaml(
        config_text("priority, gang", "predicates", arguments={"predicates": {"predicate.CacheEnable": True}})
    )
    settings: PluginSettings | None = config.plugin(plugin_names.PREDICATES)
    args = plugin_args(settings, PredicatesArgs)
    assert args is not None and args.cache
