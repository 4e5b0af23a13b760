"""What one run bound and the other left pending, with the reason the scheduler gave.

Every pod kube-scheduler bound and gpuq left pending is listed with gpuq's PodScheduled message and
a verdict: *quota* (gpuq's quotas, which kube-scheduler knows nothing of, refused it), *order effect*
(a placement rule or the room said no, given where gpuq's other, equally valid, placements went:
the two schedulers order and score differently), *preempted* (a victim of the other's preemptions,
which chose other victims), or *unexplained* (anything else: a bug to look at). The reverse list,
pods gpuq bound and kube-scheduler did not, is printed too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from tests.e2e.differential.run import DELETED, RunResult

QUOTA: Final = "quota"
ORDER: Final = "order effect"
PREEMPTED: Final = "preempted"
UNEXPLAINED: Final = "unexplained"

# gpuq's quota refusals (ElasticQuota, queue quotas, GPUResourceQuota), as their messages name the
# quota object: kube-scheduler has none.
_QUOTA_WORDS: Final = re.compile(r"quota exceeded|below the minimum|(ElasticQuota|GPUResourceQuota|Queue)/")
# A node said no for room or a rule (kube-scheduler's FitError reasons, which gpuq's follow).
_FIT: Final = re.compile(
    r"nodes are available|Insufficient|didn't match|didn't have free ports|volume node affinity|"
    r"unbound immediate|not found|ReadWriteOncePod|max volume count|taint|unschedulable|topology spread|"
    r"anti-affinity|affinity|Too many pods|preemption",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Difference:
    pod: str
    verdict: str
    reason: str

    def __str__(self) -> str:
        return f"{self.pod}: {self.verdict}: {self.reason}"


def verdict(reason: str) -> str:
    if reason == DELETED:
        return PREEMPTED
    if _QUOTA_WORDS.search(reason):
        return QUOTA
    if _FIT.search(reason):
        return ORDER
    return UNEXPLAINED


def pending_in_second(first: RunResult, second: RunResult) -> list[Difference]:
    """Pods ``first`` bound at the end and ``second`` did not, with ``second``'s reason."""
    out = []
    for pod in sorted(first.bound - second.bound):
        reason = second.reason(pod)
        out.append(Difference(pod, verdict(reason), reason))
    return out
