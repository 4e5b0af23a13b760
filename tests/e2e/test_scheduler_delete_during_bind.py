"""Delete during bind (issue 11): 500 pods are created with binds slowed down and 250 of them are
deleted mid-burst. No bind is sent for a pod after its delete was observed, and the pending count
returns to 0 (from /metrics).

The scheduler talks to the apiserver through the HTTP proxy of ``tests/e2e/proxy.py``, which holds
each bind POST for a moment (and nothing else), so binds queue up while the deletes land.

What "observed" means: the scheduler's informer applying the DELETED event to its cache, which its
feed logs (DEBUG, ``observed delete of pod ns/name``) in the same synchronous step, before any other
task runs; from then on the bind path's check (``Feed.settled``) answers GONE. The bind path logs
``sending bind of pod ns/name to node`` after that check, right before the request. Both lines come
from one process and one event loop, so their order in the log is the order in which the scheduler
observed the delete and decided to send: the assertion is that, per deleted pod, no ``sending bind``
line follows its ``observed delete`` line. The proxy's record of the bind POSTs it received shows the
log tells the truth (one POST per logged send, per pod) and gives the figures. (Comparing the
proxy's receive time with the log's timestamp instead would flag a bind written to the socket a
millisecond before the delete was observed and read by the proxy a millisecond after.)
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Awaitable, Sequence

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import proxy as proxy_fixtures
from tests.e2e.cluster_fixtures import (
    Cluster,
    SchedulerFactory,
    SchedulerProcess,
    eventually,
    metric_value,
    node_of,
)
from tests.e2e.proxy import ApiProxy, is_bind
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
proxy = proxy_fixtures.proxy
run_proxied = proxy_fixtures.run_proxied

PODS = 500
DELETED = 250  # every other pod
BIND_DELAY = 2.0  # seconds each bind POST waits in the proxy
# 16 binds in the proxy at any time, about 8/s: the deletes meet binds in flight, and most of them
# land before their pod's bind is sent.
BIND_CONCURRENCY = "16"
IN_FLIGHT_AT_DELETE = 32  # bind POSTs received before the deletes start
# The scheduler metrics this test reads, named once (their names are to get the gpuq_ prefix).
PENDING_METRIC = "gpuq_scheduler_pending_pods"
ATTEMPTS_METRIC = "gpuq_scheduler_schedule_attempts_total"

SENDING = re.compile(r"^sending bind of pod (\S+) to ")
OBSERVED = re.compile(r"^observed delete of pod (\S+)$")


def pending_total(scheduler: SchedulerProcess) -> float:
    text = scheduler.metrics()
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith((PENDING_METRIC + "{", PENDING_METRIC + " "))
    )


def scheduler_lines(scheduler: SchedulerProcess) -> list[str]:
    """The ``msg`` of every JSON log line, in order."""
    out = []
    for line in scheduler.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            out.append(str(json.loads(line).get("msg") or ""))
    return out


async def gathered(limit: int, jobs: Sequence[Awaitable[object]]) -> None:
    """Await ``jobs`` (coroutines), at most ``limit`` at once."""
    semaphore = asyncio.Semaphore(limit)

    async def one(job: Awaitable[object]) -> None:
        async with semaphore:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


async def test_no_bind_is_sent_for_a_pod_after_its_delete_was_observed(
    cluster: Cluster, proxy: ApiProxy, run_proxied: SchedulerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"gpuq-{cluster.test_id}"
    ns = cluster.namespace
    await cluster.node("n", {"cpu": "1000", "memory": "1000Gi", "pods": "1000"})
    proxy.delay(is_bind, BIND_DELAY)
    scheduler = run_proxied(
        name,
        BASE_TIER,
        *("--bind-concurrency", BIND_CONCURRENCY, "--log-format", "json", "--log-level", "DEBUG"),
    )
    loop = asyncio.get_running_loop()
    try:
        await scheduler.wait_ready(60)
        began = loop.time()
        await gathered(32, [cluster.pod(f"p{i:03d}", {"cpu": "1"}, scheduler=name) for i in range(PODS)])
        created = loop.time()
        deleted = {f"p{i:03d}" for i in range(1, PODS, 2)}
        assert len(deleted) == DELETED
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}

        async def binds_flowing() -> int:
            return sum(1 for x in proxy.exchanges if is_bind(x)) >= IN_FLIGHT_AT_DELETE

        await eventually(binds_flowing, 60, f"{IN_FLIGHT_AT_DELETE} binds sent", scheduler.log)
        bound_before = sum(1 for p in (await cluster.pods()).values() if node_of(p))
        await gathered(
            32,
            [
                cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}", body)
                for pod in sorted(deleted)
            ],
        )
        assert bound_before < PODS // 2, f"{bound_before} bound before the deletes: the binds were not slowed"

        async def survivors_bound() -> bool:
            pods = await cluster.pods()
            return len(pods) == PODS - DELETED and all(node_of(p) for p in pods.values())

        await eventually(survivors_bound, 150, "the 250 survivors bound", scheduler.log)
        settled = loop.time()

        async def no_pending() -> bool:
            return pending_total(scheduler) == 0.0

        await eventually(no_pending, 30, f"{PENDING_METRIC} back to 0", scheduler.log)

        # Per deleted pod: no bind sent after its delete was observed (the order of the log).
        lines = scheduler_lines(scheduler)
        observed_at: dict[str, int] = {}
        sent: dict[str, list[int]] = {}
        for index, msg in enumerate(lines):
            if found := OBSERVED.match(msg):
                observed_at.setdefault(found.group(1), index)
            elif found := SENDING.match(msg):
                sent.setdefault(found.group(1), []).append(index)
        keys = {f"{ns}/{pod}" for pod in deleted}
        assert keys <= set(observed_at), f"deletes never observed: {sorted(keys - set(observed_at))[:5]}"
        late = {
            k: (observed_at[k], sent[k]) for k in keys if any(i > observed_at[k] for i in sent.get(k, ()))
        }
        assert not late, f"binds sent after the delete was observed (line of delete, lines of binds): {late}"

        # The proxy saw exactly the binds the log says were sent.
        posts = Counter(x.pod for x in proxy.exchanges if is_bind(x) and x.namespace == ns)
        assert posts == Counter({k: len(v) for k, v in sent.items() if k.startswith(f"{ns}/")})
        deleted_posted = keys & set(posts)
        gone = sum(1 for x in proxy.exchanges if is_bind(x) and x.status == 404)
        never_posted = keys - set(posts)
        # Mid-burst: most deleted pods were still waiting for their bind when the delete came.
        assert len(never_posted) >= DELETED // 2, f"only {len(never_posted)} deletes came before the bind"
        assert sum(posts.values()) <= PODS, f"{sum(posts.values())} bind POSTs for {PODS} pods"

        # A deleted pod is forgotten, never retried: at most one attempt per pod ever created.
        await asyncio.sleep(2)
        text = scheduler.metrics()
        attempts = sum(
            metric_value(text, ATTEMPTS_METRIC, {"result": r}) or 0.0
            for r in ("scheduled", "unschedulable", "error")
        )
        assert attempts <= PODS, f"{attempts} attempts for {PODS} pods\n{scheduler.log(200)}"
        assert pending_total(scheduler) == 0.0
        assert "Traceback" not in scheduler.log(20000)
        with capsys.disabled():
            print(
                f" [{PODS} created in {created - began:.1f}s, {bound_before} bound before the deletes;"
                f" of {DELETED} deleted: {len(never_posted)} never sent a bind,"
                f" {len(deleted_posted)} had a bind sent before ({gone} answered 404);"
                f" {sum(posts.values())} bind POSTs; settled {settled - began:.1f}s after the first create]",
                end="",
            )
    finally:
        code = scheduler.terminate()
    assert code == 0, scheduler.log()
