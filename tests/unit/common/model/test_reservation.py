"""The reserve action's rules (common/model/reservation.py), ported from Volcano's last code of them
(commit b27b4bbe7^, sunset by PR #2236): ``pkg/scheduler/actions/elect/elect_test.go`` TestElect's two
cases, and ``pkg/scheduler/plugins/reservation/reservation.go``'s targetJobFn and
getUnlockedNodesWithMaxIdle. Volcano's test only asserted that *some* job was elected; these assert
which one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuq_k8s.common.model.errors import ConfigError
from gpuq_k8s.common.model.reservation import (
    Candidate,
    Lock,
    ReservationArgs,
    elect,
    max_idle_node,
    waiting_since,
)

NOW = datetime(2026, 8, 20, 12, 0, tzinfo=UTC)


def test_elect_select_the_job_with_highest_priority_as_target_job() -> None:
    """elect_test.go TestElect "select the job with highest priority as target job"."""
    jobs = [Candidate("job-1", 1, NOW), Candidate("job-2", 2, NOW), Candidate("job-3", 3, NOW)]
    target = elect(jobs)
    assert target is not None and target.key == "job-3"


def test_elect_select_the_job_with_longest_waiting_time_among_the_highest_priority_jobs() -> None:
    """elect_test.go TestElect "select the job with longest waiting time among the highest priority
    jobs as target job": WaitingTime 2h, 1h, 1h, all of priority 0."""
    jobs = [
        Candidate("job-1", 0, NOW - timedelta(hours=2)),
        Candidate("job-2", 0, NOW - timedelta(hours=1)),
        Candidate("job-3", 0, NOW - timedelta(hours=1)),
    ]
    target = elect(jobs)
    assert target is not None and target.key == "job-1"


def test_priority_outweighs_waiting() -> None:
    """The design: "Priority is more important than waiting time"."""
    jobs = [Candidate("old", 0, NOW - timedelta(days=3)), Candidate("new", 1, NOW)]
    target = elect(jobs)
    assert target is not None and target.key == "new"


def test_equal_priority_and_waiting_go_to_the_first_key_and_no_job_elects_none() -> None:
    jobs = [Candidate("b", 0, NOW), Candidate("a", 0, NOW)]
    target = elect(jobs)
    assert target is not None and target.key == "a"
    assert elect([]) is None


def test_a_job_passed_over_comes_after_every_other_but_is_elected_when_alone() -> None:
    jobs = [Candidate("first", 5, NOW - timedelta(hours=1)), Candidate("second", 0, NOW)]
    target = elect(jobs, passed_over={"first"})
    assert target is not None and target.key == "second"
    alone = elect(jobs[:1], passed_over={"first"})
    assert alone is not None and alone.key == "first"


def test_waiting_since_is_the_earliest_readable_timestamp() -> None:
    assert waiting_since(["2026-08-20T12:00:00Z", "2026-08-20T11:00:00Z", "", "garbage"]) == NOW - timedelta(
        hours=1
    )
    # Nothing readable: waits least (sorts after every readable time).
    assert waiting_since([""]) > NOW


def test_max_idle_node_picks_the_node_with_most_idle_skipping_locked_ones() -> None:
    """reservation.go getUnlockedNodesWithMaxIdle: ``maxIdleNode.Idle.LessEqual(node.Idle)`` replaces
    the best; locked nodes are skipped."""
    nodes = [("a", [2, 4]), ("b", [6, 8]), ("c", [4, 4])]
    assert max_idle_node(nodes, locked=()) == "b"
    assert max_idle_node(nodes, locked={"b"}) == "c"  # c's idle >= a's in every resource
    assert max_idle_node(nodes, locked={"a", "b", "c"}) is None


def test_max_idle_node_of_equal_nodes_takes_the_last_and_a_mixed_one_does_not_displace() -> None:
    # LessEqual holds between equal idles: the last of equal nodes wins, as Volcano's loop.
    assert max_idle_node([("a", [1, 1]), ("b", [1, 1])], locked=()) == "b"
    # b has more cpu but less memory than a: not LessEqual, a stays the best.
    assert max_idle_node([("a", [1, 8]), ("b", [4, 2])], locked=()) == "a"


def test_the_lock_refuses_other_jobs_only_once_it_holds_nodes_and_expires() -> None:
    lock = Lock("PodGroup/ns/big", elected_at=100.0, timeout=30.0)
    assert not lock.refuses("Pod/ns/small")  # elected, no node locked yet
    lock = lock.with_node("n1").with_node("n2")
    assert lock.nodes == ("n1", "n2")
    assert lock.refuses("Pod/ns/small") and not lock.refuses("PodGroup/ns/big")
    assert not lock.expired(129.9) and lock.expired(130.0)


@pytest.mark.parametrize("value", [0, -1, 86401, "ten", True])
def test_lock_timeout_is_refused_outside_its_range(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        ReservationArgs.parse({"lockTimeoutSeconds": value})
    assert "lockTimeoutSeconds" in str(info.value) and "86400" in str(info.value)


def test_lock_timeout_default() -> None:
    assert ReservationArgs.parse({}).lock_timeout == 300.0
