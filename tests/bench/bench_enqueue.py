"""The enqueue action beside many Inqueue PodGroups (in memory; not a timed test).

capacity-scheduling's enqueue check counts what every Inqueue job of the ElasticQuotas reserves
(design.md Semantics 4). It reads that once per pass of the enqueue action (data flow step 1); this
prints how long admitting ``--inqueue`` jobs takes, and a pass over ``--pending`` jobs that do not fit
(each over its namespace's max) while they are Inqueue.

    python tests/bench/bench_enqueue.py [--inqueue 1000] [--members 4] [--pending 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.testing.builders import MakeElasticQuota, MakeNode, MakePod, MakePodGroup
from tests.testing.scheduler import make_scheduler

NAMESPACES = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inqueue", type=int, default=1000, help="PodGroups admitted first")
    parser.add_argument("--members", type=int, default=4, help="pods per admitted PodGroup")
    parser.add_argument("--pending", type=int, default=100, help="PodGroups that do not fit, then")
    args = parser.parse_args()
    sched, _ = make_scheduler("capacity-scheduling")
    for n in range(NAMESPACES):
        sched.put_object(MakeElasticQuota("eq", f"t{n}").min(cpu="1000").max(cpu="100000").obj())
    sched.set_node(MakeNode("n").alloc(cpu="8", memory="16Gi", pods="110").info())
    for g in range(args.inqueue):
        ns = f"t{g % NAMESPACES}"
        sched.put_object(MakePodGroup(f"g{g}", ns).min_member(args.members).obj())
        for m in range(args.members):
            sched.add_pod(MakePod(f"g{g}-{m}", ns).group(f"g{g}").req(cpu="1").info())
    began = time.perf_counter()
    moved = sched.run_enqueue()
    admitted = time.perf_counter() - began
    for g in range(args.pending):
        ns = f"t{g % NAMESPACES}"
        sched.put_object(MakePodGroup(f"big{g}", ns).min_member(1).obj())
        sched.add_pod(MakePod(f"big{g}-0", ns).group(f"big{g}").req(cpu="200000").info())
    began = time.perf_counter()
    still = sched.run_enqueue()
    refused = time.perf_counter() - began
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{args.inqueue} PodGroups x {args.members} pods: {moved} admitted in one pass, {admitted:.2f} s")
    pending = f"a pass over {args.pending} Pending PodGroups that do not fit ({still} admitted)"
    print(f"{pending}: {refused * 1000:.0f} ms")


if __name__ == "__main__":
    main()
