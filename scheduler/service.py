"""``gpuq scheduler``: the secondary scheduler process against a real cluster (design.md "Command line").

Start-up: flags (:mod:`scheduler.flags`), configuration, and whether the metrics port can be listened
on (any of them wrong is exit code 2 with one line, before anything starts) -> logging -> metrics and
probes port (/livez, /readyz, /metrics) -> informers -> once all have listed, the caches are fed to
the scheduler in dependency order -> with ``--leader-elect``, wait for the Lease, then
have every cache pass the previous leader's last writes (a live watch catches up to the present
resourceVersion; only a cache that cannot is listed again) -> the scheduling loop and the batched
writer. Only the leader binds and writes; a standby keeps its caches warm so a takeover starts
scheduling within one retry period (plus 1-2 s for the watches to catch up).

SIGTERM / SIGINT: stop taking pods, let binds in flight finish, write what is pending, release the
Lease (only when every write was answered: a write given up may still land, and the next leader must
not list before it does, so then the Lease is left to expire), stop the informers. A lost Lease
stops the process at once with exit code 1 (as kube-scheduler does): another replica may already be
binding.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuq_k8s.common.kube.client import GatedClient, new_api_client
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.common.kube.diff import Change, strip_managed_fields
from gpuq_k8s.common.kube.events import EventRecorder
from gpuq_k8s.common.kube.informer import Informer, InformerSet
from gpuq_k8s.common.kube.leader import LeaderElector
from gpuq_k8s.common.kube.status import StatusWriter
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import GpuqError, InvalidValue
from gpuq_k8s.common.model.wire import section, split_ref
from gpuq_k8s.common.process.flags import listen_error
from gpuq_k8s.scheduler import cache_debugger
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.flags import SchedulerOptions, add_flags
from gpuq_k8s.scheduler.kube import heap
from gpuq_k8s.scheduler.kube.backend import KubeBackend
from gpuq_k8s.scheduler.kube.feed import REPLAY_ORDER, SELECTOR_ONLY, Feed, selector_only
from gpuq_k8s.scheduler.kube.loop import SchedulingLoop
from gpuq_k8s.scheduler.kube.pod_cache import PodDecoder
from gpuq_k8s.scheduler.kube.quota_status import QuotaStatus
from gpuq_k8s.scheduler.metrics import SchedulerMetrics, StateSnapshot
from gpuq_k8s.scheduler.plugins import default_registry

log = logging.getLogger("gpuq.scheduler")

EXIT_INVALID: Final = 2
EXIT_LEASE_LOST: Final = 1
STATUS_KINDS: Final = {k.kind: k for k in kinds.STATUS_WRITES}
# On taking the Lease, a live watch that has not passed the present resourceVersion by then (stalled;
# kube-apiserver's bookmark comes within 1-2 s) gives way to a list of its kind.
CATCH_UP_TIMEOUT: Final = 10.0


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``scheduler`` to the ``gpuq`` sub-commands; the parsed args' ``func`` runs it."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "scheduler",
        help="run the gpuq secondary scheduler against a cluster",
        description="Schedule pods whose spec.schedulerName is --scheduler-name, with gpuq's quota plugins.",
    )
    add_flags(p)
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    """Flags, then the configuration, then the machine (the metrics port), each an exit 2 with one
    line on stderr before anything connects; then the service until it stops."""
    try:
        options = SchedulerOptions.from_args(args)
    except GpuqError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    try:
        config = read_config(options.config)
        # Plugin arguments are validated when the plugins are built: do it now, not after start-up.
        Scheduler(config, default_registry(), _NoBackend(), clock=time.monotonic)
    except GpuqError as err:
        for line in err.lines():  # every problem of the configuration, one line each
            print(f"error: {options.config or 'configuration'}: {line}", file=sys.stderr)
        return EXIT_INVALID
    try:
        options.preflight()
        options.log.configure()
        # A port lost since the preflight is the same one line (a kubeconfig error: gpuq_k8s/cli.py).
        return asyncio.run(Service(options, config).serve())
    except InvalidValue as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID


class _NoBackend:
    """Only for validating the configuration: nothing is ever scheduled through it."""

    def bind(self, *a: Any) -> None: ...
    def pre_bind(self, *a: Any) -> None: ...
    def roll_back(self, *a: Any) -> None: ...
    def evict(self, *a: Any) -> None: ...
    def record_event(self, *a: Any) -> None: ...
    def set_pod_condition(self, *a: Any, **k: Any) -> None: ...
    def patch_status(self, *a: Any) -> None: ...


class Service:
    def __init__(self, options: SchedulerOptions, config: SchedulerConfig) -> None:
        self.options = options
        self.config = config
        self.identity = options.identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.metrics = SchedulerMetrics()
        self.stop = asyncio.Event()
        self.elector: LeaderElector | None = None
        self.informers: InformerSet | None = None
        self.feed: Feed | None = None
        self.exit_code = 0
        self.cache_debugger = cache_debugger.CacheDebugger(log)

    # -- probes -----------------------------------------------------------------------------------
    def ready(self) -> bool:
        """Fed from the caches and every watch live (``InformerSet.watching``): not while a watch
        silent past ``--watch-inactivity-timeout`` (or broken) is being re-established."""
        return (
            self.feed is not None
            and self.feed.ready
            and self.informers is not None
            and self.informers.watching
        )

    def not_ready_reason(self) -> str:
        if self.feed is None or not self.feed.ready or self.informers is None:
            return "informer caches not synced"
        down = sorted(kind for kind, i in self.informers.informers.items() if not i.watching)
        return f"watch not live: {', '.join(down)}" if down else "ok"

    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def writes_allowed(self) -> bool:
        """The one gate of every write (bind, eviction, status, event, condition), consulted when
        the request is sent: without ``--leader-elect`` always; else only while the Lease is ours
        and renewed within the renew deadline, and never again once it was lost."""
        return self.elector is None or self.elector.writes_allowed()

    def _app(self) -> web.Application:
        async def livez(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            if self.ready():
                return web.Response(text="ok")
            return web.Response(status=503, text=self.not_ready_reason())

        async def metrics(_: web.Request) -> web.Response:
            body = generate_latest(self.metrics.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/livez", livez)
        app.router.add_get("/healthz", livez)
        app.router.add_get("/readyz", readyz)
        app.router.add_get("/metrics", metrics)
        return app

    # -- lookups for the writers ------------------------------------------------------------------
    def _cached(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        if self.informers is None or kind not in self.informers.informers:
            return None
        return self.informers[kind].get(namespace, name)

    def _current_status(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        obj = self._cached(kind, namespace, name)
        return None if obj is None else section(obj, "status")

    def _resolve(self, ref: str) -> tuple[str, str] | None:
        kind, namespace, name = split_ref(ref)
        obj = self._cached(kind, namespace, name)
        if obj is None:
            return None
        return str(obj.get("apiVersion") or ""), str((obj.get("metadata") or {}).get("uid") or "")

    # -- the process --------------------------------------------------------------------------------
    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        options = self.options
        host, port = options.serving.bind_address, options.serving.metrics_port
        api = await new_api_client(options.cluster.kubeconfig, options.cluster.context)
        runner = web.AppRunner(self._app(), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as err:  # lost the port since the preflight
            await runner.cleanup()
            await api.close()
            raise listen_error("--metrics-port", host, port, err) from None
        log.info("metrics and probes on http://%s:%d", host, port)

        writer = GatedClient(api, self.writes_allowed)
        events = EventRecorder(
            writer, controller=options.scheduler_name, instance=self.identity, resolve=self._resolve
        )
        statuses = StatusWriter(
            writer,
            STATUS_KINDS,
            self._current_status,
            on_written=lambda kind: self.metrics.status_writes.labels(kind).inc(),
        )
        backend = KubeBackend(
            writer,
            events=events,
            statuses=statuses,
            metrics=self.metrics,
            bind_concurrency=options.bind_concurrency,
            may_write=self.writes_allowed,
        )
        scheduler = Scheduler(
            self.config,
            default_registry(),
            backend,
            clock=time.monotonic,
            scheduler_name=options.scheduler_name,
            observe=self.metrics.observe,
        )
        scheduler.contain.counted = lambda kind: self.metrics.internal_errors.labels(kind).inc()
        feed = self.feed = Feed(scheduler, on_waited=self.metrics.waited)
        loop.add_signal_handler(signal.SIGUSR2, self._debug_cache, scheduler)
        scheduling = SchedulingLoop(
            scheduler, self.metrics, max_unschedulable=options.max_unschedulable_seconds
        )
        feed.wake = backend.wake = scheduling.wake
        backend.on_bound = feed.assume
        backend.settled = feed.settled
        backend.lookup = lambda kind, namespace, name: self._cached(kind.kind, namespace, name)
        quota = QuotaStatus.of(scheduler)
        backend.on_status = quota.observe_status
        # A standby's state gauges would show every pending pod as queued forever and a quota as it
        # stood when the standby last looked: only the leader reports them (design.md "Metrics").
        self.metrics.watch(lambda: quota.snapshot() if self.leading() else StateSnapshot())

        def handler(change: Change) -> None:
            if change.type == "delete" and change.obj.get("kind") == kinds.POD.kind:
                backend.forget_pod(f"{change.key[0]}/{change.key[1]}")
            feed.handler(change)
            backend.objects_changed()

        self.informers = InformerSet(
            Informer(
                api,
                kind,
                handlers=[handler],
                inactivity_timeout=options.watch_inactivity_timeout,
                transform=_transform(kind),
                decoder=PodDecoder() if kind is kinds.POD else None,
                watch_list=True,
                on_page=feed.page if kind is kinds.POD else None,
                deliver_first_list=False,  # Feed.load reads the first lists from the caches
            )
            for kind in REPLAY_ORDER
        )
        tasks: list[asyncio.Task[Any]] = []
        scheduling_started = False
        try:
            if options.leader_elect:
                self.elector = LeaderElector(
                    api,
                    namespace=options.lease_namespace,
                    name=options.lease_name,
                    identity=self.identity,
                    timings=options.timings,
                )
                tasks.append(asyncio.create_task(self.elector.run(), name="leader-election"))
                tasks.append(asyncio.create_task(self._watch_lease(), name="lease-watch"))
                # One try at the Lease before the first lists: when it is free (a fresh start, or a
                # previous leader that released it or let it expire), lists started after taking it
                # hold every write of that leader and are not listed again below. A Lease held by a
                # live leader leaves this replica a standby with warm caches, as before.
                if not await self._until(self.elector.attempted.wait()):
                    return self.exit_code
            with heap.loading():
                self.informers.start()
                if not await self._until(feed.load(self.informers)):
                    return self.exit_code
            log.info(
                "caches synced: %d nodes, %d pods",
                len(self.informers[kinds.NODE.kind]),
                len(self.informers[kinds.POD.kind]),
            )
            if self.elector is not None:
                log.info("waiting for Lease %s/%s", self.elector.namespace, self.elector.name)
                if not await self._until(self.elector.leading.wait()):
                    return self.exit_code
                if not await self._until(self._take_over()):
                    return self.exit_code
                adopted = feed.adopt_admitted()
                if adopted:
                    log.info(
                        "PodGroups admitted by the previous leader, Pending here: %d adopted as Inqueue (%s)",
                        len(adopted),
                        ", ".join(adopted[:10]) + (", ..." if len(adopted) > 10 else ""),
                    )
            tasks.append(asyncio.create_task(self._writer(scheduler, backend), name="writer"))
            log.info("scheduling as %s (%s)", options.scheduler_name, self.identity)
            scheduling_started = True
            await scheduling.run(self.stop)
        finally:
            log.info("stopping")
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # Statuses are written from the scheduler's state only once it was complete and current
            # (replayed, and re-listed if it had to be): a stop during the lists writes nothing.
            answered = True
            if scheduling_started and self.leading() and self.exit_code == 0:
                answered = await backend.drain()
                scheduler.sync_status()
                await backend.flush()
            if self.elector is not None and self.exit_code == 0:
                if answered:
                    await self.elector.release()
                else:
                    # A write given up may still land: the next leader must not list before it does.
                    # The Lease expires on its own (leaseDurationSeconds) instead of being handed over.
                    log.warning("writes given up while stopping may still land: the Lease is left to expire")
            await self.informers.stop()
            await runner.cleanup()
            await api.close()
        return self.exit_code

    def _debug_cache(self, scheduler: Scheduler) -> None:
        """SIGUSR2: compare the scheduler's state with the informers' caches, log every mismatch, then
        dump its view (:mod:`scheduler.cache_debugger`, kube-scheduler's cache debugger): both taken
        now, compared and dumped in steps by a task that lets the loop run between them."""
        feed, informers = self.feed, self.informers
        if feed is None or informers is None or not feed.ready:
            log.info("cache comparison skipped: the caches are not loaded yet")
            return
        self.cache_debugger.start(
            lambda: cache_debugger.snapshot(
                scheduler,
                (name for _, name in informers[kinds.NODE.kind].items()),
                informers[kinds.POD.kind].items().values(),
                assumed=feed.assumed,
            )
        )

    async def _take_over(self) -> None:
        """Before the first decision as leader: every cache of a kind the scheduler writes holds the
        previous leader's last writes.

        Those writes (binds, statuses, claims' allocations) were answered before it released the
        Lease, or before the Lease expired, but the watches may not have shown them yet: counted from
        a lagging cache, a quota would be spent twice, a device allocated twice, and a status
        compared with a stale one left wrong. A cache whose list started after the Lease was taken
        has them already. Any other cache of those kinds (:data:`kinds.SCHEDULER_WRITES`) catches up
        on its live watch (:meth:`Informer.catch_up`: the collection's present resourceVersion, read
        now, and the watch past it); only a cache that cannot (its watch down, or not past it within
        ``CATCH_UP_TIMEOUT``) is listed again. The caches of the kinds only others write (nodes,
        namespaces, classes...) are as fresh as their watches, as they were before the takeover.
        """
        assert self.elector is not None and self.informers is not None
        taken = self.elector.acquired_at
        began = time.monotonic()
        stale = [
            i
            for i in self.informers.informers.values()
            if i.list_began < taken and i.kind in kinds.SCHEDULER_WRITES
        ]
        outcomes = await asyncio.gather(
            *(i.catch_up(CATCH_UP_TIMEOUT) for i in stale), return_exceptions=True
        )
        caught: list[bool] = []
        for informer, outcome in zip(stale, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome  # a cancellation (a stop meanwhile): not a kind to list again
                # The present could not be read (the apiserver failed the request): the kind is
                # listed like one whose watch did not pass it; never a decision from that cache as is.
                log.warning(
                    "%s: could not catch up on taking the Lease (%s): listing it again",
                    informer.kind.kind,
                    outcome or type(outcome).__name__,
                )
            caught.append(outcome is True)
        behind = [i for i, ok in zip(stale, caught, strict=True) if not ok]
        await asyncio.gather(*(i.relist() for i in behind))
        if behind:
            kinds_behind = ", ".join(sorted(i.kind.kind for i in behind))
            log.info("caches re-listed on taking the Lease: %s", kinds_behind)
        if stale and len(behind) < len(stale):
            read = max(i.last_catch_up[0] for i, ok in zip(stale, caught, strict=True) if ok)
            log.info(
                "caches caught up on taking the Lease without a list: %d kinds in %.2fs "
                "(the present read in %.2fs)",
                len(stale) - len(behind),
                time.monotonic() - began,
                read,
            )
        if not stale:
            log.info("caches listed after taking the Lease: no re-list")

    async def _until(self, awaitable: Any) -> bool:
        """Await ``awaitable`` unless a stop signal comes first; True if it completed. Its error is
        raised here: a start step that failed (the caches' load, the takeover's catch-up) must never
        be taken for one that completed, and the scheduler must not go on from a state it left
        half-built."""
        work = asyncio.ensure_future(awaitable)
        stopping = asyncio.create_task(self.stop.wait())
        await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            return False
        work.result()
        return True

    async def _watch_lease(self) -> None:
        assert self.elector is not None
        await self.elector.lost.wait()
        log.error("leader election lost; exiting")
        self.exit_code = EXIT_LEASE_LOST
        self.stop.set()
        # Nothing is written from here on: every write passes writes_allowed(), False once lost.

    async def _writer(self, scheduler: Scheduler, backend: KubeBackend) -> None:
        interval = self.options.flush_interval
        while True:
            await asyncio.sleep(interval)
            try:
                scheduler.sync_status()
                await backend.flush()
            except Exception:
                log.exception("batched write failed")


def _transform(kind: kinds.Kind) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """What each informer keeps of an object (scheduler/kube/feed.py; the pod informer's decoder
    keeps only what is read of a pod, its shared parts once: scheduler/kube/pod_cache.py)."""
    if kind in SELECTOR_ONLY:
        return selector_only
    return None if kind is kinds.POD else strip_managed_fields


def pid_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"
