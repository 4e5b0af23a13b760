"""A PodGroup's phase and counts from its pods (common/model/podgroup_status.py), case by case as
Volcano's ``jobStatus`` (pkg/scheduler/framework/session.go) decides them, and a Queue's counts as
its queue controller's ``syncQueue`` (pkg/controllers/queue/queue_controller_action.go) makes them."""

from __future__ import annotations

import pytest

from gpuq_k8s.common.model.podgroup_status import (
    COMPLETED,
    INQUEUE,
    PENDING,
    RUNNING,
    Members,
    podgroup_counts,
    podgroup_phase,
    queue_counts,
)


@pytest.mark.parametrize(
    ("current", "min_member", "members", "expected"),
    [
        # enough allocated (placed or finished) pods: Running
        (INQUEUE, 2, Members(placed=2, running=2), RUNNING),
        (PENDING, 2, Members(placed=2), RUNNING),  # bound before the scheduler saw them
        (RUNNING, 2, Members(placed=1, running=1, succeeded=1), RUNNING),
        # every allocated pod finished: Completed (Volcano: succeeded + failed == allocated)
        (RUNNING, 2, Members(succeeded=2), COMPLETED),
        (RUNNING, 2, Members(succeeded=1, failed=1), COMPLETED),
        (RUNNING, 1, Members(succeeded=3), COMPLETED),
        # not enough: Pending, unless admitted (Inqueue stays Inqueue)
        (INQUEUE, 3, Members(placed=2), INQUEUE),
        (PENDING, 3, Members(placed=2), PENDING),
        (RUNNING, 3, Members(placed=2), PENDING),  # fell below minMember (pods deleted)
        # a new pod of a Completed job running again (a Job's next completions)
        (COMPLETED, 2, Members(placed=1, running=1, succeeded=2), RUNNING),
        # gpuq's two deliberate differences (module doc)
        (PENDING, 0, Members(), PENDING),  # Volcano: Running, then Completed, with no pod at all
        (COMPLETED, 2, Members(), COMPLETED),  # its finished pods were deleted: still over
    ],
)
def test_podgroup_phase(current: str, min_member: int, members: Members, expected: str) -> None:
    assert podgroup_phase(current, min_member, members) == expected


def test_counts_are_volcanos_running_succeeded_failed() -> None:
    assert podgroup_counts(Members(placed=3, running=2, succeeded=1)) == {
        "running": 2,
        "succeeded": 1,
        "failed": 0,
    }
    # bound but not running yet: not "running" (0 is written, to replace an earlier count)
    assert podgroup_counts(Members(placed=1)) == {"running": 0, "succeeded": 0, "failed": 0}


def test_queue_counts_podgroups_by_phase() -> None:
    phases = [PENDING, INQUEUE, RUNNING, RUNNING, COMPLETED, "Unknown"]
    assert queue_counts(phases) == {"pending": 1, "inqueue": 1, "running": 2, "completed": 1, "unknown": 1}
    assert queue_counts([]) == {"pending": 0, "running": 0, "unknown": 0, "inqueue": 0, "completed": 0}
