"""``gpuq simulate --fail-on pending|never|rejected``: when a simulation's outcome should fail a CI job.

Each condition met is one line on stderr naming the pods (or objects) that meet it, and the command
exits 3 (cli.py ``EXIT_FAIL_ON``) after writing its report as usual:

- ``pending``: a pod gpuq schedules ends Pending (it waits for room or can never fit);
- ``never``: such a pod's outlook is ``never`` (it can never fit under the current quota or cluster);
- ``rejected``: ``--admission`` rejected a Pod or another object.

Pods gpuq does not schedule (another schedulerName: "not scheduled by gpuq") and finished pods are not
its to place, so they meet no condition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpuq_k8s.scheduler.simulate.run import PENDING, Simulation
from gpuq_k8s.scheduler.simulate.run import REJECTED as REJECTED_PHASE

FAIL_PENDING: Final = "pending"
FAIL_NEVER: Final = "never"
REJECTED: Final = "rejected"
FAIL_ON: Final = (FAIL_PENDING, FAIL_NEVER, REJECTED)
# Names listed in a condition's line; the rest are counted.
_SHOWN: Final = 10


def fail_on(sim: Simulation, out: Mapping[str, Any], conditions: Sequence[str]) -> list[str]:
    """One line per condition of ``conditions`` that the report ``out`` of ``sim`` meets."""
    scheduler = sim.scheduler
    not_ours = {p.key for p in sim.input_pods if p.terminal or not scheduler.responsible_for(p)}
    lines: list[str] = []
    for condition in dict.fromkeys(conditions):
        if condition == REJECTED:
            hits = [f"Pod/{p['namespace']}/{p['name']}" for p in out["pods"] if p["phase"] == REJECTED_PHASE]
            hits += [str(r["object"]) for r in out.get("rejected") or ()]
            what = "rejected by admission"
        else:
            hits = [
                f"Pod/{p['namespace']}/{p['name']}"
                for p in out["pods"]
                if p["phase"] == PENDING
                and f"{p['namespace']}/{p['name']}" not in not_ours
                and (condition == FAIL_PENDING or p.get("outlook") == FAIL_NEVER)
            ]
            what = "left Pending" if condition == FAIL_PENDING else "left Pending with outlook never"
        if hits:
            more = f" and {len(hits) - _SHOWN} more" if len(hits) > _SHOWN else ""
            noun = "pod" if all(hit.startswith("Pod/") for hit in hits) else "object"
            noun += "" if len(hits) == 1 else "s"
            shown = ", ".join(hits[:_SHOWN])
            lines.append(f"--fail-on {condition}: {len(hits)} {noun} {what}: {shown}{more}")
    return lines
