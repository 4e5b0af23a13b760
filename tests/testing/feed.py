"""The informer -> scheduler feed (scheduler/kube/feed.py) over the in-memory backend: the objects as
the informer delivers them, the changes it hands the feed, and a scheduler fed by it (no API)."""

from __future__ import annotations

import asyncio
from typing import Any

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.kube.feed import Feed
from gpuq_k8s.scheduler.memory_backend import MemoryBackend
from tests.testing.builders import MakeNode, MakePod
from tests.testing.clock import FakeClock
from tests.testing.scheduler import make_scheduler

CONFIG = """\
actions: "enqueue, allocate, preempt"
tiers:
- plugins:
  - name: priority
- plugins:
  - name: predicates
  - name: capacity-scheduling
"""

# As the informer delivers them: a resourceVersion, the pods Pending at priority 0.
NODE = MakeNode().resource_version("1").alloc(cpu="4", memory="8Gi", pods="110")
POD = MakePod().image("x").req(cpu="1").priority(0).phase("Pending").resource_version("1")


def key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def add(obj: dict[str, Any]) -> Change:
    return Change("add", key(obj), obj)


def update(old: dict[str, Any], new: dict[str, Any]) -> Change:
    return Change("update", key(new), new, old)


def make_feed(config: str = CONFIG) -> tuple[Scheduler, MemoryBackend, Feed, FakeClock]:
    """A scheduler on the in-memory backend fed by a :class:`Feed` that has replayed its lists."""
    clock = FakeClock()
    scheduler, backend = make_scheduler(config=config, clock=clock)
    feed = Feed(scheduler)
    feed.ready = True
    return scheduler, backend, feed, clock


class InformerCache:
    """What :meth:`Feed.replay` reads of an informer: its cache of listed objects by (namespace, name)."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]], *, synced: bool = True) -> None:
        self._objects = objects
        self.synced = asyncio.Event()  # what Feed.load waits for: the informer's first list done
        if synced:
            self.synced.set()

    def items(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self._objects

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get((namespace, name))
