"""overcommit (common/model/overcommit.py, scheduler/plugins/overcommit.py): the enqueue check with
Volcano's overcommit factor, by hand and through ``gpuq simulate`` with the cases of Volcano's
``pkg/scheduler/plugins/overcommit/overcommit_test.go`` TestOvercommitPlugin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.common.model import overcommit
from gpuq_k8s.common.model.errors import ConfigError
from tests.testing.builders import MakePodGroup, MakeQueue
from tests.testing.config import config_text
from tests.testing.volcano_scenarios import refused, simulate_scenario, volcano_node, volcano_pod

GI = 2**30


def test_overused_by_hand() -> None:
    """total cpu 6000m * 1.2 = 7200m, 1000m used: a 4000m job after 2000m in the queue fits
    (6000 <= 6200), a 5000m one does not; memory is only compared when the job asks for it."""
    total, used = {"cpu": 6000, "memory": 20 * GI}, {"cpu": 1000}
    assert overcommit.overused({"cpu": 4000}, {"cpu": 2000}, total, used, 1.2) == []
    assert overcommit.overused({"cpu": 5000}, {"cpu": 2000}, total, used, 1.2) == ["cpu"]
    assert overcommit.overused({"memory": 24 * GI, "cpu": 6500, "pods": 999}, {}, total, used, 1.2) == ["cpu"]
    assert overcommit.overused({"memory": 25 * GI}, {}, total, used, 1.2) == ["memory"]


def test_running_group_still_holds_what_its_pods_do_not() -> None:
    """GetInqueueResource: minResources minus what the pods hold, per resource, never negative."""
    held = overcommit.reserved_while_running({"cpu": 4000, "memory": 4 * GI}, {"cpu": 1000, "memory": 8 * GI})
    assert held == {"cpu": 3000}


def test_refusal_message_is_volcanos() -> None:
    assert overcommit.refusal_message(["cpu", "memory"]) == (
        "resource in cluster is overused: overused cpu, overused memory"
    )


@pytest.mark.parametrize(
    ("value", "factor"),
    [(None, 1.2), (1, 1.0), (1.5, 1.5), ("2.0", 2.0)],
    ids=["default", "1", "1.5", "text"],
)
def test_factor_argument(value: Any, factor: float) -> None:
    arguments = {} if value is None else {"overcommit-factor": value}
    assert overcommit.OvercommitArgs.parse(arguments).factor == factor


@pytest.mark.parametrize("value", [0.8, -1, "x", True, float("nan")])
def test_factor_below_one_or_not_a_number_is_refused(value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        overcommit.OvercommitArgs.parse({"overcommit-factor": value})
    assert err.value.field == "overcommit-factor"


def test_unknown_argument_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        overcommit.OvercommitArgs.parse({"overcommit_factor": 1.2})
    assert err.value.field == "overcommit_factor"


# -- overcommit_test.go TestOvercommitPlugin, through gpuq simulate ---------------------------------
# Upstream builds the PodGroups already Inqueue and asks JobEnqueueable; here they are Pending and the
# enqueue action decides, which is the same check: their phase after the run is the upstream verdict.


# The test's tier: overcommit (its factor given per test, 1.2 unless the test says) and predicates.
TIER = "overcommit, predicates"
ACTIONS = "enqueue, allocate"
CONFIG = config_text(TIER, actions=ACTIONS, arguments={"overcommit": {"overcommit-factor": 1.2}})


def _cluster(*groups: dict[str, Any]) -> list[dict[str, Any]]:
    """n1 (2 cpu, 4Gi) and n2 (4 cpu, 16Gi), queue c1."""
    return [
        volcano_node("n1", "2", "4Gi").obj(),
        volcano_node("n2", "4", "16Gi").obj(),
        MakeQueue("c1").weight(1).obj(),
        *groups,
    ]


def _phase(out: dict[str, Any], name: str) -> str:
    phase: str = next(g["phase"] for g in out["podGroups"] if g["name"] == name)
    return phase


def _group(name: str, **min_resources: str) -> dict[str, Any]:
    group = MakePodGroup(name, "test-namespace").queue("c1").min_member(2)
    return (group.min_resources(**min_resources) if min_resources else group).obj()


def test_overcommit_test_go_factor_more_than_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ "overCommitFactor is more than 0" (1.2): pg1 with normal resources (2000m, 2G) is enqueueable."""
    out = simulate_scenario(tmp_path, capsys, CONFIG, _cluster(_group("pg1", cpu="2000m", memory="2G")))
    assert _phase(out, "pg1") == "Inqueue"


def test_overcommit_test_go_factor_less_than_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ "overCommitFactor is less than 0" (0.8): upstream warns and uses 1.2; gpuq refuses the
    configuration at start-up, naming the key (nothing is silently replaced by a default)."""
    err = refused(
        tmp_path,
        capsys,
        config_text(TIER, actions=ACTIONS, arguments={"overcommit": {"overcommit-factor": 0.8}}),
    )
    assert "overcommit-factor: invalid value 0.8: expected a number >= 1.0" in err


def test_overcommit_test_go_required_resources_too_large(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "when the required resources of pg are too large" (20000m, 20G against 6 cpu * 1.2): not
    enqueueable; the PodGroup gets Volcano's event naming the overused resource (cpu only: 20G fits
    in 20Gi * 1.2)."""
    out = simulate_scenario(tmp_path, capsys, CONFIG, _cluster(_group("pg2", cpu="20000m", memory="20G")))
    assert _phase(out, "pg2") == "Pending"
    events = [e for e in out["events"] if e["object"] == "PodGroup/test-namespace/pg2"]
    assert [(e["type"], e["reason"], e["message"]) for e in events] == [
        ("Normal", "Unschedulable", "resource in cluster is overused: overused cpu")
    ]


def test_overcommit_test_go_pg_without_min_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "when pg does not fill MinResources": best effort, always enqueueable."""
    out = simulate_scenario(tmp_path, capsys, CONFIG, _cluster(_group("pg3")))
    assert _phase(out, "pg3") == "Inqueue"


def test_enqueued_groups_count_against_the_next(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """JobEnqueued: a PodGroup let in holds its minimum at once. 6 cpu * 1.2 = 7.2: the first 4-cpu
    group enters, the second (8 > 7.2) waits; with factor 1.5 (9 cpu) both enter."""
    groups = (_group("a", cpu="4"), _group("b", cpu="4"))
    out = simulate_scenario(tmp_path, capsys, CONFIG, _cluster(*groups))
    assert (_phase(out, "a"), _phase(out, "b")) == ("Inqueue", "Pending")
    out = simulate_scenario(
        tmp_path,
        capsys,
        config_text(TIER, actions=ACTIONS, arguments={"overcommit": {"overcommit-factor": 1.5}}),
        _cluster(*groups),
    )
    assert (_phase(out, "a"), _phase(out, "b")) == ("Inqueue", "Inqueue")


def test_used_resources_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """idle = total * factor - used: 3 cpu of bound pods leave 7.2 - 3 = 4.2 cpu for a 4.5-cpu job."""
    running = [volcano_pod("other", f"r{i}", "1", "1Gi", node="n2").obj() for i in range(3)]
    out = simulate_scenario(tmp_path, capsys, CONFIG, [*_cluster(_group("big", cpu="4500m")), *running])
    assert _phase(out, "big") == "Pending"
    out = simulate_scenario(tmp_path, capsys, CONFIG, [*_cluster(_group("big", cpu="4200m")), *running])
    assert _phase(out, "big") == "Inqueue"
