"""The scheduling loop: drives the synchronous cycle from the event loop without busy-waiting.

It runs attempts back to back while the queue has ready pods (yielding to the event loop after each,
so watch events and bind completions are never starved), and otherwise sleeps until something
happens: an informer change or a bind completion (``wake``), the earliest backoff expiring, or the
housekeeping tick (gang Permit timeouts; every 30 s, pods parked as unschedulable
for longer than ``max_unschedulable`` go back to the queue, as kube-scheduler's leftover flush does).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Final

from gpuq_k8s.scheduler.cycle import Attempt, Scheduler
from gpuq_k8s.scheduler.framework.status import Code
from gpuq_k8s.scheduler.metrics import ERROR, SCHEDULED, UNSCHEDULABLE, SchedulerMetrics

log = logging.getLogger(__name__)

TICK: Final = 1.0
# kube-scheduler's defaults: every 30 s, pods parked as unschedulable for 5 minutes are retried even
# without an event that could help them.
FLUSH_EVERY: Final = 30.0
DEFAULT_MAX_UNSCHEDULABLE: Final = 300.0


def attempt_result(attempt: Attempt) -> str:
    """The ``result`` label of gpuq_scheduler_schedule_attempts_total (kube-scheduler's three values)."""
    code = attempt.status.code
    if code in (Code.SUCCESS, Code.WAIT):
        return SCHEDULED
    if code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
        return UNSCHEDULABLE
    return ERROR


@dataclass(eq=False)
class SchedulingLoop:
    scheduler: Scheduler
    metrics: SchedulerMetrics
    _: KW_ONLY
    clock: Callable[[], float] = time.monotonic
    max_unschedulable: float = DEFAULT_MAX_UNSCHEDULABLE
    woken: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    attempts: int = field(default=0, init=False)

    def wake(self) -> None:
        self.woken.set()

    def _enqueue(self) -> int:
        """The enqueue action; it contains an error to the PodGroup it met it on
        (:mod:`scheduler.containment`), and whatever escapes that is logged, never the loop's end."""
        try:
            return self.scheduler.run_enqueue()
        except Exception:
            log.exception("the enqueue action failed (an error in gpuq)")
            return 0

    def _reserve(self) -> bool:
        """One step of the reserve action, once per tick (Volcano's one per session; Semantics 15);
        an error of gpuq's is logged, never the loop's end."""
        try:
            return self.scheduler.run_reserve()
        except Exception:
            log.exception("the reserve action failed (an error in gpuq)")
            return False

    async def run(self, stop: asyncio.Event) -> None:
        scheduler = self.scheduler
        next_tick = self.clock() + TICK
        next_flush = self.clock() + FLUSH_EVERY
        while not stop.is_set():
            self.woken.clear()
            self._enqueue()
            while not stop.is_set():
                began = time.perf_counter()
                try:
                    attempt = scheduler.schedule_one()
                except Exception:
                    # A bug must not take scheduling down for every other pod; this one waits for its next
                    # update (logged with the traceback).
                    log.exception("scheduling attempt failed")
                    self.metrics.attempt(ERROR, time.perf_counter() - began)
                    await asyncio.sleep(0)
                    continue
                if attempt is None:
                    if self._enqueue():
                        continue
                    break
                self.attempts += 1
                self.metrics.attempt(attempt_result(attempt), time.perf_counter() - began)
                await asyncio.sleep(0)
            now = self.clock()
            if now >= next_tick:
                next_tick = now + TICK
                if scheduler.expire_waiting():
                    continue  # the rollback woke the pods its release can help: schedule them now
                if self._reserve():
                    continue  # a lock released: the pods it kept out are ready now
            if now >= next_flush:
                next_flush = now + FLUSH_EVERY
                moved = scheduler.queue.flush_unschedulable(self.max_unschedulable)
                if moved:
                    log.info(
                        "retrying %d pod(s) unschedulable for %.0f s or longer", moved, self.max_unschedulable
                    )
                    continue  # schedule them now
            timeout = next_tick - now
            upcoming = scheduler.queue.next_backoff()
            if upcoming is not None:
                timeout = min(timeout, max(upcoming - now, 0.001))
            try:
                async with asyncio.timeout(timeout):
                    await self.woken.wait()
            except TimeoutError:
                pass
