"""make_scheduler: a Scheduler on the in-memory backend, from plugin names or a whole configuration
(kube-scheduler's ``framework_helpers.go`` / ``NewFramework`` in its tests, Kueue's test scheduler)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, overload

from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from gpuq_k8s.scheduler.plugins import default_registry
from tests.testing.clock import FakeClock
from tests.testing.config import config_text

B = TypeVar("B", bound=MemoryBackend)
P = TypeVar("P")


@overload
def make_scheduler(
    *plugins: str,
    config: str | SchedulerConfig | None = None,
    backend: None = None,
    clock: Callable[[], float] | None = None,
) -> tuple[Scheduler, MemoryBackend]: ...


@overload
def make_scheduler(
    *plugins: str,
    config: str | SchedulerConfig | None = None,
    backend: B,
    clock: Callable[[], float] | None = None,
) -> tuple[Scheduler, B]: ...


def make_scheduler(
    *plugins: str,
    config: str | SchedulerConfig | None = None,
    backend: MemoryBackend | None = None,
    clock: Callable[[], float] | None = None,
) -> tuple[Scheduler, MemoryBackend]:
    """The scheduler and its backend, wired as ``gpuq simulate`` wires them (the backend reads the
    scheduler's objects).

    ``plugins`` names the plugins after predicates in the second tier, priority and gang making the
    first (actions enqueue, allocate, preempt); or ``config`` gives the whole configuration, as text or
    model. ``backend`` is a fresh :class:`MemoryBackend` unless given (a subclass that records what it
    is asked); ``clock`` a :class:`FakeClock` at 0 unless given.
    """
    if plugins and config is not None:
        raise TypeError("make_scheduler takes plugin names or a config, not both")
    if config is None:
        config = config_text("priority, gang", ["predicates", *plugins])
    model = SchedulerConfig.from_yaml(config) if isinstance(config, str) else config
    if backend is None:
        backend = MemoryBackend()
    scheduler = Scheduler(model, default_registry(), backend, clock=FakeClock() if clock is None else clock)
    backend.objects = scheduler.objects
    backend.cluster = scheduler.cluster
    return scheduler, backend


def plugin_of(scheduler: Scheduler, kind: type[P]) -> P:
    """The scheduler's plugin of class ``kind``."""
    return next(p for p in scheduler.framework.plugins if isinstance(p, kind))
