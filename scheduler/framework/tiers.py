"""How plugin verdicts combine across tiers, as Volcano's session combines them
(volcano-sh/volcano ``pkg/scheduler/framework/session_plugins.go``).

The tiers given here hold only the plugins whose switch for the extension point is on (the runtime
filters them, :mod:`scheduler.framework.runtime`), in configuration order.

- victim sets (Preemptable, Reclaimable): within a tier, the answers of the plugins that do not
  abstain intersect; a tier whose plugins all abstain, or whose answer comes out empty, has no say
  and the next tier is asked. The first tier with a non-empty answer decides. (Volcano's Go lets an
  empty intersection restart from the next plugin's answer, a nil-slice accident; gpuq ends the tier
  there instead, so no pod a plugin of the tier refused is ever evicted.)
- order functions (queue order, job order): the first plugin, tier by tier, with a non-zero verdict.
- Overused: any plugin saying so. Allocatable: every plugin allowing.
- JobStarving: the first tier with a plugin decides; within it every plugin must agree; with no
  plugin at all a job is not starving.
- JobEnqueueable: a rejection rejects at once; otherwise the first tier in which some plugin
  permits admits; when every plugin abstains the job is admitted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.status import Status

P = TypeVar("P")
Tiers = Sequence[Sequence[P]]


def victims(tiers: Tiers[P], ask: Callable[[P], Sequence[PodInfo] | None]) -> list[PodInfo]:
    """Volcano's ``Preemptable``/``Reclaimable``: ``ask(plugin)`` is one plugin's answer (None abstains)."""
    for tier in tiers:
        chosen: dict[str, PodInfo] | None = None
        for plugin in tier:
            answer = ask(plugin)
            if answer is None:
                continue
            if chosen is None:
                chosen = {pod.key: pod for pod in answer}
            else:
                keep = {pod.key for pod in answer}
                chosen = {key: pod for key, pod in chosen.items() if key in keep}
            if not chosen:
                chosen = None
                break
        if chosen is not None:
            return list(chosen.values())
    return []


def order(tiers: Tiers[P], compare: Callable[[P], int]) -> int:
    """Volcano's ``QueueOrderFn``/``JobOrderFn``: the first non-zero verdict, tier by tier."""
    for tier in tiers:
        for plugin in tier:
            verdict = compare(plugin)
            if verdict:
                return verdict
    return 0


def first(tiers: Tiers[P], ask: Callable[[P], bool]) -> P | None:
    """The first plugin, tier by tier, for which ``ask`` holds. Volcano's ``Overused`` is true when
    any plugin says so (``first(overused)``), its ``Allocatable`` false as soon as one plugin refuses
    (``first(refuses)``); the plugin found names the verdict."""
    for tier in tiers:
        for plugin in tier:
            if ask(plugin):
                return plugin
    return None


def starving(tiers: Tiers[P], ask: Callable[[P], bool]) -> bool:
    """Volcano's ``JobStarving``: the first tier with a plugin decides, all of its plugins agreeing."""
    for tier in tiers:
        if tier:
            return all(ask(plugin) for plugin in tier)
    return False


def enqueueable(tiers: Tiers[P], ask: Callable[[P], Status]) -> Status:
    """Volcano's ``JobEnqueueable``: a rejection rejects at once; a Success permits at the end of its
    tier; Skip abstains. Admitted when nothing rejects."""
    for tier in tiers:
        permitted = False
        for plugin in tier:
            status = ask(plugin)
            if status.is_rejected:
                return status
            permitted = permitted or status.is_success
        if permitted:
            break
    return Status.success()
