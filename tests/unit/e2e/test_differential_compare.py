"""The differential test's verdicts on a pod one scheduler bound and the other left pending
(tests/e2e/differential/compare.py), on the messages the schedulers write."""

from __future__ import annotations

import pytest

from tests.e2e.differential.compare import ORDER, PREEMPTED, QUOTA, UNEXPLAINED, verdict
from tests.e2e.differential.run import DELETED


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (
            "0/54 nodes are available: quota exceeded in ElasticQuota/ns-q/quota (max) for cpu: requested 1, "
            "available 0, used 6, limit 6 (waits for room: cpu used 6 would have to drop to 5).",
            QUOTA,
        ),
        (
            "0/54 nodes are available: 44 Insufficient cpu, 6 node(s) had untolerated taint "
            "{dedicated: special}. preemption: Pod/ns-c/f: no eligible victims on any node (NoQuota).",
            ORDER,
        ),
        ("0/54 nodes are available: 28 node(s) didn't match pod anti-affinity rules.", ORDER),
        ('0/54 nodes are available: persistentvolumeclaim "does-not-exist" not found.', ORDER),
        (DELETED, PREEMPTED),
        ("binding rejected: pod has schedulingGates", UNEXPLAINED),
        ("(no PodScheduled condition)", UNEXPLAINED),
    ],
)
def test_verdicts(reason: str, expected: str) -> None:
    assert verdict(reason) == expected
