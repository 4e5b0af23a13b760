"""The scheduler service's start steps when they fail (scheduler/service.py): a step that raised is
never taken for one that completed, and a cache that could not catch up on taking the Lease is
listed again before the first decision, whatever stopped it (a timeout or the apiserver's error)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from gpuq_k8s.common.kube.errors import ServerError
from gpuq_k8s.common.kube.informer import Informer, InformerSet
from gpuq_k8s.common.kube.leader import LeaderElector
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.scheduler.flags import SchedulerOptions
from gpuq_k8s.scheduler.service import Service
from tests.testing.feed import CONFIG


@dataclass(eq=False)
class Cache(Informer):
    """A live cache whose reads of the present fail with ``error`` (None: answered, at resourceVersion
    ``present``); its lists are counted, not sent (the loop that would serve them is not running)."""

    error: Exception | None = None
    present: str = "7"
    relisted: int = 0

    async def _present(self) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        return {"metadata": {"resourceVersion": self.present, "continue": "more"}, "items": []}

    async def relist(self) -> None:
        self.relisted += 1


def cache(kind: kinds.Kind, error: Exception | None = None, at: str = "7") -> Cache:
    informer = Cache(None, kind, error=error)
    informer.watching = True
    informer.synced.set()
    informer._resource_version = at  # its watch has passed ``at``
    return informer


def service(*informers: Informer) -> Service:
    svc = Service(SchedulerOptions(identity="x"), SchedulerConfig.from_yaml(CONFIG))
    svc.informers = InformerSet(informers)
    svc.elector = LeaderElector(None, namespace="ns", name="lease", identity="x")
    svc.elector.acquired_at = 1e12  # every cache was listed before the Lease was taken
    return svc


def test_a_cache_whose_present_cannot_be_read_is_listed_again_on_taking_the_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing = cache(kinds.POD_GROUP, ServerError(503, "ServiceUnavailable", "etcdserver: leader changed"))
    passed = cache(kinds.POD)  # its watch is at the present already
    svc = service(failing, passed)
    asyncio.run(svc._take_over())
    assert (failing.relisted, passed.relisted) == (1, 0)
    assert "PodGroup: could not catch up on taking the Lease (etcdserver: leader changed)" in caplog.text


def test_a_start_step_that_raised_is_not_taken_for_one_that_completed() -> None:
    svc = service()

    async def broken() -> None:
        raise RuntimeError("an error of gpuq's own")

    async def run() -> bool:
        return await svc._until(broken())

    with pytest.raises(RuntimeError, match="an error of gpuq's own"):
        asyncio.run(run())


def test_a_start_step_stopped_by_a_signal_is_not_completed() -> None:
    svc = service()

    async def run() -> bool:
        svc.stop.set()
        return await svc._until(asyncio.sleep(3600))

    assert asyncio.run(run()) is False
