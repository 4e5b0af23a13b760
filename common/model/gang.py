"""A gang's rules that read only its members (Volcano's ``JobInfo`` and gang plugin, volcano-sh/volcano
``pkg/scheduler/api/job_info.go`` and ``pkg/scheduler/plugins/gang/gang.go``): per-task minimums
and the least a gang can ever ask of a quota at once.

- **Tasks.** A pod's task (role) is its ``volcano.sh/task-spec`` annotation, else label (Volcano's
  ``getTaskRole``). A PodGroup's ``spec.minTaskMember`` holds a minimum per task; it applies only
  when ``minMember`` is at least the sum of those minimums (Volcano skips the per-task checks
  otherwise). A gang is *valid* while every task has at least its minimum of pods (``CheckTaskValid``:
  gang refuses the job) and *ready* once, beside minMember, every task has its minimum placed
  (``CheckTaskReady``: Permit waits).
- **Arguments** (:class:`GangArgs`): ``permitWaitingTimeSeconds``, the longest a gang holds its
  reserved pods in Permit waiting for its quorum before they are rolled back and it gives way to
  others (scheduler-plugins coscheduling's argument of that name and default; Volcano's gang
  plugin takes no arguments, and holds nothing past a session).
- **Total demand.** A gang's ``minMember`` pods must be held at once: a quota that cannot hold the
  least that many of its pods ask together can never admit it. The least is, per resource, the sum of
  the ``minMember`` smallest requests (a bound that never overstates the demand, also for gangs whose
  pods ask different amounts).
- **Rollback on a member's failure** (:func:`rollback_on_failure`). A member no node takes (nor a
  preemption made room for) rolls back its siblings waiting in Permit at once when the members placed
  and those still to be tried cannot reach minMember; while they can, the waiting ones stay (Volcano's
  allocate tries every task of a job in its session and discards the job's partial allocation at the
  session's end when it is not ready: allocate_test.go "prepredicate failed and tasks are not used up,
  continue on until min member meet"; scheduler-plugins coscheduling rejects the waiting pods in its
  PostFilter, "optimistic rejection").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, ClassVar, Final

from pydantic import Field

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.annotations import TASK_SPEC
from gpuq_k8s.common.model.plugin_args import PluginArgs, expect
from gpuq_k8s.common.model.pods import PodInfo

DEFAULT_PERMIT_WAITING_SECONDS: Final = 60.0


class GangArgs(PluginArgs):
    """The ``gang`` arguments: how long a gang may hold its reserved pods waiting for its quorum."""

    PLUGIN: ClassVar[str] = plugin_names.GANG

    permit_waiting_time: Annotated[
        float,
        Field(gt=0, allow_inf_nan=False),
        expect("a positive number of seconds such as 60"),
    ] = Field(DEFAULT_PERMIT_WAITING_SECONDS, alias="permitWaitingTimeSeconds")


def task_of(pod: PodInfo) -> str:
    """The pod's task in its PodGroup ("" when it names none)."""
    return pod.annotations.get(TASK_SPEC) or pod.labels.get(TASK_SPEC) or ""


def task_minimums(min_member: int, min_task_member: Mapping[str, int]) -> Mapping[str, int]:
    """The per-task minimums that apply: none when minMember is below their sum (Volcano's
    ``MinAvailable < TaskMinAvailableTotal``), and none of 0."""
    if not min_task_member or min_member < sum(min_task_member.values()):
        return {}
    return {task: minimum for task, minimum in min_task_member.items() if minimum > 0}


@dataclass(frozen=True, slots=True)
class TaskShortfall:
    """A task with fewer pods than its minimum (``have`` of ``need``)."""

    task: str
    have: int
    need: int

    def __str__(self) -> str:
        return f"task {self.task or '(none)'} has {self.have} of its minTaskMember {self.need}"


def task_shortfalls(minimums: Mapping[str, int], pods: Iterable[PodInfo]) -> list[TaskShortfall]:
    """The tasks of ``minimums`` that ``pods`` do not fill, by task name."""
    counts: dict[str, int] = {}
    for pod in pods:
        task = task_of(pod)
        counts[task] = counts.get(task, 0) + 1
    return [
        TaskShortfall(task, counts.get(task, 0), need)
        for task, need in sorted(minimums.items())
        if counts.get(task, 0) < need
    ]


def least_total(requests: Sequence[Mapping[str, int]], count: int) -> dict[str, int]:
    """Per resource any of ``requests`` asks: the sum of its ``count`` smallest amounts (a request
    that does not ask it counts 0): what any ``count`` of these pods ask together, at least."""
    resources = sorted({r for request in requests for r, amount in request.items() if amount > 0})
    out: dict[str, int] = {}
    for resource in resources:
        amounts = sorted(request.get(resource, 0) for request in requests)
        out[resource] = sum(amounts[:count])
    return out


@dataclass(frozen=True, slots=True)
class RollbackDecision:
    """Whether a gang's waiting members are rolled back now, and why (or why not)."""

    reject: bool
    reason: str


def rollback_on_failure(
    gang: str, *, min_member: int, placed: int, waiting: int, to_try: int
) -> RollbackDecision:
    """After a member of ``gang`` (``PodGroup ns/name``) found no node and no preemption room: roll its
    ``waiting`` members (in Permit) back when the ``placed`` ones (bound, binding, waiting or finished:
    ``GroupTracker.ready_members``) and the ``to_try`` ones (its other members still in the active
    queue, not counted anywhere yet) cannot reach ``min_member``."""
    if min_member <= 1:
        return RollbackDecision(False, f"{gang}: minMember {min_member}: no member waits for another")
    if waiting <= 0:
        return RollbackDecision(False, f"{gang}: no member waits in Permit")
    if placed >= min_member:
        return RollbackDecision(False, f"{gang}: {placed} member(s) placed reach minMember {min_member}")
    if placed + to_try >= min_member:
        reachable = (
            f"{placed} member(s) placed and {to_try} still to be tried can reach minMember {min_member}"
        )
        return RollbackDecision(False, f"{gang}: {reachable}")
    return RollbackDecision(
        True,
        f"{gang}: {placed} member(s) placed and {to_try} still to be tried cannot reach minMember "
        f"{min_member}: its {waiting} member(s) waiting in Permit are rolled back",
    )


def quorum_missed(gang: str, min_member: int, minimums: Mapping[str, int], placed: Sequence[PodInfo]) -> str:
    """Why a gang (``PodGroup ns/name``) whose ``placed`` pods waited in Permit was rolled back."""
    if len(placed) < min_member:
        return f"{gang}: only {len(placed)} of minMember {min_member} pod(s) could be placed"
    short = task_shortfalls(minimums, placed)
    detail = ", ".join(str(s) for s in short) if short else "its quorum was not reached"
    return f"{gang}: {len(placed)} pod(s) could be placed, not with every task at its minimum ({detail})"
