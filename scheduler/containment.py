"""Containment: an error of gpuq's own met while handling one object stays with that object.

A malformed object is not a bug: its reader raises a :class:`~common.model.errors.GpuqError` and the
rule falls back as design.md Semantics 3 says. Anything else escaping while the scheduler applies an
object, enqueues a PodGroup or schedules a pod is a bug in gpuq, and it must cost that one object,
never the process: a scheduler that died of one object would die again on the same object after
every restart (every replica would crash-loop on ``replay``). So the caller catches it and hands it
here, which makes it visible three ways, never silently:

* logged at ERROR with the object's reference and the traceback;
* counted: ``gpuq_scheduler_internal_errors_total{kind}`` (the service connects ``counted``);
* a Warning event ``InternalError`` on the object, naming the exception (its text quoted bounded).

The caller then skips the object (its next change is applied afresh) and the loop goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from gpuq_k8s.common.model.events import INTERNAL_ERROR, EventRecord
from gpuq_k8s.common.model.quoting import quote
from gpuq_k8s.common.model.wire import split_ref

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Containment:
    """``record`` emits an event; ``counted(kind)`` counts one contained error of an object of ``kind``."""

    record: Callable[[EventRecord], None]
    counted: Callable[[str], None] = lambda kind: None

    def __call__(self, ref: str, doing: str, err: Exception, consequence: str) -> None:
        """``doing`` (``apply the update of``, ``enqueue``, ``schedule``) ``ref`` raised ``err``;
        ``consequence`` says what happens to the object meanwhile."""
        kind = split_ref(ref)[0]
        log.error("could not %s %s (an error in gpuq); %s", doing, ref, consequence, exc_info=err)
        self.counted(kind)
        reason = f"{type(err).__name__}: {quote(str(err))}"
        message = f"gpuq could not {doing} this {kind} ({reason}, an error in gpuq, logged); {consequence}"
        self.record(EventRecord(ref, "Warning", INTERNAL_ERROR, message))
