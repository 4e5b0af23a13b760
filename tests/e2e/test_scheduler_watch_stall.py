"""Watch stall (issue 11): the scheduler's Pod watch is held silent while its binds still go through.

The scheduler reaches the apiserver through the HTTP proxy of ``tests/e2e/proxy.py``. The proxy
*stalls* the Pod watch: the connection stays open and no byte of it is forwarded (the apiserver's
events, bookmarks included, wait in the proxy), while every other request passes.

1. ``test_quotas_hold_while_the_pod_watch_is_silent``: an ElasticQuota ``max``, a Queue's
   ``volcano.sh/card.quota`` and a GPUResourceQuota's ``maxWorkers``, each with more pods than it
   holds. The binds are slowed, so most land while the watch is silent for 60 s: the scheduler never
   sees them confirmed and must keep counting them (assumed pods do not expire on a timer), while the
   pods it refused are retried (``--max-unschedulable-seconds 1``) and more pods are created. The
   bound pods, recounted per quota from the API every second, never exceed a limit read from the
   quota objects; once the watch flows again every quota is full, and a freed place is taken. With
   ``--watch-inactivity-timeout`` 75 s (longer than the stall and than the apiserver's bookmark
   period), the Pod and ElasticQuota watches, kept busy by events and bookmarks, are never
   re-established; the PriorityClass and PodGroup watches, of kinds nobody changes, get bookmarks
   on etcd 3.6 as well (its progress notifications move the apiserver's watch cache on; on etcd 3.4
   they got none), but not always within the bound: one that fell silent is re-established from its
   resourceVersion. Nothing is re-listed.
2. ``test_a_silent_watch_is_re_established_and_readiness_follows``: with a bound of 10 s, every Pod
   read is held (the watch and its re-establishment): ``/readyz`` turns 503 naming Pod once the watch
   has been silent for the bound, and stays so; once the proxy lets go, the new watch answers,
   ``/readyz`` is 200 and a pod created meanwhile is bound, delivered by that watch (no re-list).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from gpuq_k8s.common.model.quantity import parse_quantity
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import proxy as proxy_fixtures
from tests.e2e.cluster_fixtures import GPU_NODE, Cluster, SchedulerFactory, eventually, node_of
from tests.e2e.proxy import ApiProxy, is_bind, is_watch, lists_of, reads_of
from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota, MakeQueue
from tests.testing.config import BASE_TIER

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
proxy = proxy_fixtures.proxy
run_proxied = proxy_fixtures.run_proxied

CONFIG = BASE_TIER + (
    "  - name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: true, nodeOrderWeight: 1.0}\n"
    "  - name: capacity-scheduling\n"
    "  - name: gpu-quota\n"
)
STALL = 60.0  # seconds the Pod watch is silent
BOUND = 75.0  # --watch-inactivity-timeout of the first test: past the bookmark period, past the stall
BIND_DELAY = 2.5  # each bind waits this long in the proxy, one at a time: they land during the stall
CARD = "NVIDIA-A100"
TF_ANNOTATIONS = {
    "tensor-fusion.ai/tflops-request": "10",
    "tensor-fusion.ai/vram-request": "1Gi",
    "tensor-fusion.ai/tflops-limit": "10",
    "tensor-fusion.ai/vram-limit": "1Gi",
}
# Changed during the test (pods bound, statuses written): kept alive by events and bookmarks.
ACTIVE_KINDS = ("pods", "elasticquotas")
# Changed by nobody while the scheduler runs: bookmarks, or re-established when silent past the bound.
QUIET_KINDS = {"priorityclasses": "PriorityClass", "podgroups": "PodGroup"}


class Quotas:
    """The three quotas of the first test, their pods, and the recount from the API."""

    def __init__(self, cluster: Cluster, scheduler: str, card_ns: str, gq_ns: str, queue: str) -> None:
        self.cluster = cluster
        self.scheduler = scheduler
        self.namespaces = {"ElasticQuota": cluster.namespace, "Queue": card_ns, "GPUResourceQuota": gq_ns}
        self.queue = queue
        self.limits: dict[str, int] = {}
        self.created = dict.fromkeys(self.namespaces, 0)
        self.worst = dict.fromkeys(self.namespaces, 0)
        self.checks = 0

    async def read_limits(self) -> None:
        """Each limit as the quota object states it (1 cpu, 1 card, 1 worker per pod)."""
        c, ns = self.cluster, self.namespaces
        eq = await c.get(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns['ElasticQuota']}/elasticquotas/eq"
        )
        self.limits["ElasticQuota"] = int(parse_quantity(eq["spec"]["max"]["cpu"]))
        queue = await c.get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{self.queue}")
        self.limits["Queue"] = int(
            json.loads(queue["metadata"]["annotations"]["volcano.sh/card.quota"])[CARD]
        )
        gq = await c.get(
            f"/apis/tensor-fusion.ai/v1/namespaces/{ns['GPUResourceQuota']}/gpuresourcequotas/gq"
        )
        self.limits["GPUResourceQuota"] = int(gq["spec"]["total"]["maxWorkers"])

    async def create(self, kind: str) -> None:
        index = self.created[kind]
        self.created[kind] += 1
        ns = self.namespaces[kind]
        name = f"{kind.lower()}-{index:02d}"
        if kind == "ElasticQuota":
            await self.cluster.pod(name, {"cpu": "1"}, scheduler=self.scheduler, namespace=ns)
        elif kind == "Queue":
            annotations = {"volcano.sh/card.name": CARD, "scheduling.volcano.sh/queue-name": self.queue}
            await self.cluster.pod(
                name,
                {"cpu": "1", "nvidia.com/gpu": "1"},
                limits={"nvidia.com/gpu": "1"},
                annotations=annotations,
                scheduler=self.scheduler,
                namespace=ns,
            )
        else:
            await self.cluster.pod(
                name, {"cpu": "1"}, annotations=TF_ANNOTATIONS, scheduler=self.scheduler, namespace=ns
            )

    async def bound(self) -> dict[str, list[str]]:
        out = {}
        for kind, ns in self.namespaces.items():
            pods = await self.cluster.pods(ns)
            out[kind] = sorted(n for n, p in pods.items() if node_of(p))
        return out

    async def check(self) -> dict[str, list[str]]:
        """Recount; fail at once if any quota is exceeded."""
        bound = await self.bound()
        self.checks += 1
        for kind, names in bound.items():
            self.worst[kind] = max(self.worst[kind], len(names))
            assert len(names) <= self.limits[kind], f"{kind} exceeded: {len(names)} > {self.limits[kind]}"
        return bound

    async def full(self) -> dict[str, list[str]] | None:
        bound = await self.check()
        return bound if all(len(bound[k]) == self.limits[k] for k in bound) else None


async def test_quotas_hold_while_the_pod_watch_is_silent(
    cluster: Cluster, proxy: ApiProxy, run_proxied: SchedulerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"gpuq-{cluster.test_id}"
    queue = f"q-{cluster.test_id}"
    card_ns = await cluster.extra_namespace("card")
    gq_ns = await cluster.extra_namespace("gq")
    # the memory label: tensor-fusion pods share its GPUs by VRAM too (design.md Semantics 19)
    labels = {"nvidia.com/gpu.product": CARD, "nvidia.com/gpu.memory": "81920"}
    await cluster.node("gpu", GPU_NODE, labels=labels)
    await cluster.create(
        MakeElasticQuota("eq", cluster.namespace).min(cpu="4").max(cpu="4").obj(),
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.namespace}/elasticquotas",
    )
    await cluster.create(
        MakeQueue(queue).card_quota(json.dumps({CARD: 3})).weight(1).obj(),
        "/apis/scheduling.volcano.sh/v1beta1/queues",
    )
    gq = MakeGPUResourceQuota("gq", gq_ns).total(
        requests={"tflops": "100000", "vram": "1000Gi"},
        limits={"tflops": "100000", "vram": "1000Gi"},
        maxWorkers=3,
    )
    await cluster.create(gq.obj(), f"/apis/tensor-fusion.ai/v1/namespaces/{gq_ns}/gpuresourcequotas")
    quotas = Quotas(cluster, name, card_ns, gq_ns, queue)
    await quotas.read_limits()
    assert quotas.limits == {"ElasticQuota": 4, "Queue": 3, "GPUResourceQuota": 3}

    proxy.delay(is_bind, BIND_DELAY)
    scheduler = run_proxied(
        name,
        CONFIG,
        *("--bind-concurrency", "1", "--max-unschedulable-seconds", "1"),
        *("--watch-inactivity-timeout", str(BOUND)),
    )
    try:
        await scheduler.wait_ready(60)
        first_watch = min(x.received for x in proxy.exchanges if x.watch and not x.streaming_list)
        # Two pods over each limit, all seen by the scheduler before its Pod watch goes silent.
        for kind in quotas.namespaces:
            for _ in range(quotas.limits[kind] + 2):
                await quotas.create(kind)
        expected = sum(quotas.created.values())

        async def all_seen() -> bool:
            added = {(e.namespace, e.name) for e in proxy.events if e.kind == "Pod" and e.type == "ADDED"}
            return len({k for k in added if k[0] in quotas.namespaces.values()}) == expected

        await eventually(all_seen, 30, "the scheduler's watch delivered every pod", scheduler.log)
        stall = proxy.stall(is_watch("pods"))
        stalled_at = time.time()
        bound_at_stall = sum(len(v) for v in (await quotas.check()).values())

        # 60 s of silence: binds land, refused pods are retried, more pods arrive; recount each second.
        deadline = stalled_at + STALL
        rounds = 0
        while time.time() < deadline:
            if rounds % 5 == 0:
                for kind in quotas.namespaces:
                    await quotas.create(kind)
            rounds += 1
            await quotas.check()
            await asyncio.sleep(1.0)
        during = await quotas.check()
        stall.clear()
        released_at = time.time()
        binds_in_stall = [
            x
            for x in proxy.exchanges
            if is_bind(x) and x.status == 201 and x.answered and stalled_at < x.answered < released_at
        ]
        assert len(binds_in_stall) >= 5, f"only {len(binds_in_stall)} binds went through during the stall"

        full = await eventually(quotas.full, 60, "every quota full", scheduler.log)
        assert any(e.at > released_at and e.kind == "Pod" for e in proxy.events)  # the held events flowed
        # A freed place is taken by a waiting pod, never two.
        for kind, names in full.items():
            await cluster.request("DELETE", f"/api/v1/namespaces/{quotas.namespaces[kind]}/pods/{names[0]}")

        async def refilled() -> dict[str, list[str]] | None:
            bound = await quotas.full()
            return bound if bound and all(full[k][0] not in bound[k] for k in bound) else None

        await eventually(refilled, 60, "every quota refilled after a delete", scheduler.log)
        for _ in range(5):
            await quotas.check()
            await asyncio.sleep(0.5)

        # Past the bound: a watch kept busy by events and bookmarks was never re-established. One of
        # a kind nobody changed gets bookmarks on etcd 3.6 too (its progress notifications move the
        # apiserver's watch cache on), but not always within the bound: if it fell silent it was
        # re-established from its resourceVersion. Nothing was re-listed.
        await asyncio.sleep(max(0.0, first_watch + BOUND + 5 - time.time()))
        log = scheduler.log(5000)
        for resource in (*ACTIVE_KINDS, *QUIET_KINDS):
            lists = [x for x in proxy.exchanges if lists_of(resource)(x)]
            assert len(lists) == 1, f"{resource} listed {len(lists)} times"
        for resource in ACTIVE_KINDS:
            watches = [x for x in proxy.exchanges if is_watch(resource)(x)]
            assert len(watches) == 1, f"{resource}: {len(watches)} watches"
        bookmarked = {
            e.exchange.resource
            for e in proxy.events
            if e.type == "BOOKMARK" and not e.exchange.streaming_list  # a watch's, not a list's end
        }
        assert set(ACTIVE_KINDS) <= bookmarked, bookmarked
        for resource, kind in QUIET_KINDS.items():
            watches = [x for x in proxy.exchanges if is_watch(resource)(x)]
            silent = f"{kind}: watch silent for {BOUND:.0f}s, re-establishing" in log
            assert resource in bookmarked or silent, f"{resource}: neither bookmarked nor re-established"
            assert len(watches) == 1 + log.count(f"{kind}: watch silent for"), (
                f"{resource}: {len(watches)} watches"
            )
        assert "re-listing" not in log
        assert "Traceback" not in log
    finally:
        code = scheduler.terminate()
    assert code == 0, scheduler.log()
    with capsys.disabled():
        print(
            f" [{sum(quotas.created.values())} pods; bound at the stall {bound_at_stall},"
            f" during it {sum(len(v) for v in during.values())} ({len(binds_in_stall)} binds answered);"
            f" worst {quotas.worst} of {quotas.limits} over {quotas.checks} recounts]",
            end="",
        )


async def test_a_silent_watch_is_re_established_and_readiness_follows(
    cluster: Cluster, proxy: ApiProxy, run_proxied: SchedulerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"gpuq-{cluster.test_id}"
    bound = 10.0  # the checks while stalled take ~3 s: the re-established watch is still waiting
    await cluster.node("n", {"cpu": "8", "memory": "8Gi", "pods": "110"})
    scheduler = run_proxied(name, BASE_TIER, "--watch-inactivity-timeout", str(bound))
    try:
        await scheduler.wait_ready(60)
        await cluster.pod("before", {"cpu": "1"}, scheduler=name)
        await eventually(lambda: _bound(cluster, "before"), 30, "before bound", scheduler.log)

        stall = proxy.stall(reads_of("pods"))
        stalled_at = time.monotonic()

        async def unready() -> str | None:
            code, body = await asyncio.to_thread(scheduler.get, "/readyz")
            # The Pod watch itself (not PodGroup's): the quiet kinds' watches are re-established
            # every bound too, each briefly not live.
            down = body.removeprefix("watch not live: ").split(", ")
            return body if code == 503 and "Pod" in down else None

        body = await eventually(unready, bound + 30, "/readyz 503 for the silent Pod watch", scheduler.log)
        unready_after = time.monotonic() - stalled_at
        assert unready_after >= bound - 0.5, f"unready after {unready_after:.1f}s, before the bound"
        assert body.startswith("watch not live: "), body
        assert f"Pod: watch silent for {bound:.0f}s, re-establishing" in scheduler.log(400)
        await cluster.pod("during", {"cpu": "1"}, scheduler=name)
        for _ in range(4):  # the re-list is held too: not ready all along
            await asyncio.sleep(0.5)
            assert (await asyncio.to_thread(scheduler.get, "/readyz"))[0] == 503
        assert not await _bound(cluster, "during")

        stall.clear()
        released = time.monotonic()

        async def ready() -> bool:
            return (await asyncio.to_thread(scheduler.get, "/readyz"))[0] == 200

        await eventually(ready, 30, "/readyz 200 again", scheduler.log)
        ready_after = time.monotonic() - released
        await eventually(lambda: _bound(cluster, "during"), 30, "during bound", scheduler.log)
        pod_watches = [x for x in proxy.exchanges if is_watch("pods")(x)]
        assert len(pod_watches) >= 2, "the Pod watch was not re-established"
        # Resumed from its resourceVersion: "during" came on the new watch, with no list.
        assert len([x for x in proxy.exchanges if lists_of("pods")(x)]) == 1
    finally:
        code = scheduler.terminate()
    assert code == 0, scheduler.log()
    with capsys.disabled():
        print(
            f" [unready {unready_after:.1f}s after the stall began, ready {ready_after:.1f}s after release]",
            end="",
        )


async def _bound(cluster: Cluster, name: str) -> bool:
    return bool(node_of((await cluster.pods()).get(name) or {}))
