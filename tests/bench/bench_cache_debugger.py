"""The cache debugger (SIGUSR2) at 150,000 pods: the longest stall of the event loop during a
comparison and dump (prints figures; not a test).

    python -m tests.bench.bench_cache_debugger                  # 150,000 pods on 15,000 nodes
    python -m tests.bench.bench_cache_debugger --pods 20000     # a quick look

The scheduler's state and the informer's pods are built in memory (no API server): ``--nodes`` nodes,
``--pods`` pods bound 10 to a node apart from 2 % left pending (queued), in 20 namespaces each with an
ElasticQuota (capacity-scheduling's ledger is audited too), five bound pods missing from the informer
and five pods the scheduler never saw (mismatches to log). A ticker task on the same loop records the
longest gap between its turns while:

* the reference: the comparison and the dump as they ran before, in one synchronous step (the former
  signal handler: ``compare`` then ``dump``, every line logged);
* the cooperative run (:class:`scheduler.cache_debugger.CacheDebugger`, what SIGUSR2 starts now): the
  snapshot taken at once, then the comparison and the dump in steps, the loop run between them.

Both write their lines to a list; the script checks they are the same lines. The leader renews its
Lease every ``retry_period`` (2 s) and loses it after ``renew_deadline`` (10 s) without a renewal: a
stall of seconds holds the renewal back, and the watches' reads with it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cache_debugger import CacheDebugger, compare, dump, snapshot
from gpuq_k8s.scheduler.cycle import Scheduler
from tests.testing.builders import MakeElasticQuota, MakeNode, MakePod
from tests.testing.scheduler import make_scheduler

NAMESPACES = 20


class Lines(logging.Handler):
    """Keeps every record's level and message (formatting is part of the cost measured)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def build(nodes: int, pods: int) -> tuple[Scheduler, list[str], list[dict[str, Any]]]:
    """The scheduler fed with the cluster, and the informer's node names and pods."""
    sched, _ = make_scheduler("capacity-scheduling")
    for n in range(NAMESPACES):
        sched.put_object(MakeElasticQuota("eq", f"team-{n}").min(cpu="1000").max(cpu="100000").obj())
    names = [f"node-{i:05d}" for i in range(nodes)]
    for name in names:
        sched.set_node(MakeNode(name).alloc(cpu="64", memory="512Gi", pods="110").info())
    objects: list[dict[str, Any]] = []
    bound: list[PodInfo] = []
    pending: list[PodInfo] = []
    for i in range(pods):
        pod = MakePod(f"pod-{i:06d}", f"team-{i % NAMESPACES}").req(cpu="100m", memory="256Mi")
        if i % 50 == 49:
            obj = pod.obj()
            pending.append(PodInfo.from_dict(obj))
        else:
            obj = pod.node(names[(i // 10) % nodes]).phase("Running").obj()
            bound.append(PodInfo.from_dict(obj))
        objects.append(obj)
    sched.add_bound_pods(bound)
    for info in pending:
        sched.add_pod(info)
    informer = objects[5:]  # five bound pods the informer lost (the scheduler still counts them)
    informer += [MakePod(f"unseen-{i}", "team-0").req(cpu="1").node(names[0]).obj() for i in range(5)]
    return sched, names, informer


async def stalls(run: Callable[[], Any]) -> tuple[list[float], float]:
    """(the gaps between two turns of a ticker on the loop, longest first; the run's wall time) for
    ``run`` (returning a task to await, or a plain function run as a signal handler runs)."""
    gaps: list[float] = []
    stop = False

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    began = time.perf_counter()
    result = run()
    if asyncio.iscoroutine(result) or isinstance(result, asyncio.Task):
        await result
    else:
        done = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(lambda: done.set_result(None))
        await done
    wall = time.perf_counter() - began
    stop = True
    await tick
    return sorted(gaps, reverse=True), wall


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=15_000)
    parser.add_argument("--pods", type=int, default=150_000)
    args = parser.parse_args()

    began = time.perf_counter()
    sched, names, informer = build(args.nodes, args.pods)
    print(f"built {args.nodes:,} nodes, {args.pods:,} pods in {time.perf_counter() - began:.1f}s")

    reference, cooperative = Lines(), Lines()
    ref_log = logging.getLogger("bench.reference")
    coop_log = logging.getLogger("bench.cooperative")
    for logger, handler in ((ref_log, reference), (coop_log, cooperative)):
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False

    def synchronous() -> None:  # the former signal handler's work, in one step
        snap = snapshot(sched, names, informer)
        found = compare(snap)
        for mismatch in found.mismatches:
            ref_log.warning("cache mismatch: %s", mismatch)
        ref_log.info("cache comparison: %s", found.summary())
        for line in dump(snap):
            ref_log.info("cache dump: %s", line)

    ref_gaps, ref_wall = await stalls(synchronous)

    debugger = CacheDebugger(coop_log)
    taken = 0.0

    def take() -> Any:
        nonlocal taken
        t = time.perf_counter()
        snap = snapshot(sched, names, informer)
        taken = time.perf_counter() - t
        return snap

    coop_gaps, coop_wall = await stalls(lambda: debugger.start(take))
    ref_stall, coop_stall = ref_gaps[0], coop_gaps[0]

    same = reference.lines == cooperative.lines
    print(f"lines logged: {len(reference.lines):,} (reference), {len(cooperative.lines):,} (cooperative)")
    print(f"summary: {next(line for line in cooperative.lines if 'cache comparison:' in line)}")
    print(
        f"reference   (one synchronous step): longest stall {ref_stall * 1000:8.1f} ms, wall {ref_wall:.2f}s"
    )
    print(
        f"cooperative (snapshot, then steps): longest stall {coop_stall * 1000:8.1f} ms, "
        f"wall {coop_wall:.2f}s (the snapshot: {taken * 1000:.1f} ms)"
    )
    print(f"cooperative: the next longest stalls {', '.join(f'{g * 1000:.1f}' for g in coop_gaps[1:4])} ms")
    print(f"stall ratio reference/cooperative: {ref_stall / coop_stall:.1f}x; same lines: {same}")
    if not same:
        raise SystemExit("the cooperative run logged other lines than the reference")


if __name__ == "__main__":
    asyncio.run(main())
