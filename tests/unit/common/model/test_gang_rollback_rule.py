"""The rule that rolls a gang's waiting members back when one of them finds no node
(common/model/gang.py ``rollback_on_failure``; scheduler/cycle.py counts its inputs and acts on it).

The cases are Volcano's pkg/scheduler/actions/allocate/allocate_test.go "prepredicate failed and tasks
are not used up, continue on until min member meet" and those of
tests/unit/scheduler/test_gang_rollback.py, restated on the rule: the counts each case's cycle sees
when the member fails."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model.gang import RollbackDecision, rollback_on_failure

G = "PodGroup ml/big"

# (case, minMember, placed, waiting, still to be tried, rolled back, reason)
CASES = [
    (
        # allocate_test.go: minMember 2, p0 (master) waits on n1, p1 (master) fails there; p2 and p3
        # (workers) are still to be tried: p0 stays, and p2 completes the gang.
        "allocate_test.go prepredicate failed and tasks are not used up, continue on until min member meet",
        2,
        1,
        1,
        2,
        False,
        f"{G}: 1 member(s) placed and 2 still to be tried can reach minMember 2",
    ),
    (
        # The same job once p2 is bound and p3 fails too: the quorum is reached, nothing is undone.
        "allocate_test.go the same job, the last worker failing after the quorum",
        2,
        2,
        0,
        0,
        False,
        f"{G}: no member waits in Permit",
    ),
    (
        # test_gang_rollback.py: a 3 x 4-GPU gang, two wait on the 8-GPU node, the third fails and
        # none is left to try: the two are rolled back at once, not at the Permit timeout.
        "test_gang_rollback a member no node takes rolls its waiting siblings back at once",
        3,
        2,
        2,
        0,
        True,
        f"{G}: 2 member(s) placed and 0 still to be tried cannot reach minMember 3: "
        "its 2 member(s) waiting in Permit are rolled back",
    ),
    (
        # test_gang_rollback.py: the third member gated (never tried): no member of the big gang fails;
        # the small gang's members fail behind it with none of their own waiting.
        "test_gang_rollback the fitting gang fails behind the waiting one: nothing of its own to roll back",
        2,
        0,
        0,
        1,
        False,
        f"{G}: no member waits in Permit",
    ),
    (
        "one member short with one still to be tried: the waiting ones stay",
        3,
        2,
        2,
        1,
        False,
        f"{G}: 2 member(s) placed and 1 still to be tried can reach minMember 3",
    ),
    (
        # Placed members count bound and finished ones (Volcano's ReadyTaskNum), not only the waiting.
        "bound and waiting members together short of minMember, none to try",
        4,
        3,
        1,
        0,
        True,
        f"{G}: 3 member(s) placed and 0 still to be tried cannot reach minMember 4: "
        "its 1 member(s) waiting in Permit are rolled back",
    ),
    (
        "the quorum reached while a member fails: Permit lets the waiting ones through",
        2,
        2,
        1,
        0,
        False,
        f"{G}: 2 member(s) placed reach minMember 2",
    ),
    (
        "minMember 1: no member waits for another",
        1,
        0,
        1,
        0,
        False,
        f"{G}: minMember 1: no member waits for another",
    ),
]


@pytest.mark.parametrize("case", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rollback_on_failure(case: tuple[int, int, int, int, bool, str]) -> None:
    min_member, placed, waiting, to_try, reject, reason = case
    decision = rollback_on_failure(G, min_member=min_member, placed=placed, waiting=waiting, to_try=to_try)
    assert decision == RollbackDecision(reject, reason)


@pytest.mark.parametrize("min_member", [2, 3, 5])
def test_rolled_back_exactly_when_placed_and_to_try_fall_short(min_member: int) -> None:
    """Over every count up to minMember: rolled back iff something waits, the quorum is not reached,
    and the members placed and still to be tried together fall short of it."""
    for placed in range(min_member + 1):
        for waiting in range(placed + 1):
            for to_try in range(min_member + 1):
                decision = rollback_on_failure(
                    G, min_member=min_member, placed=placed, waiting=waiting, to_try=to_try
                )
                expected = waiting > 0 and placed + to_try < min_member
                assert decision.reject is expected, (placed, waiting, to_try, decision.reason)
