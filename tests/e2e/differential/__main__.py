"""The differential test as a script, for larger seeds and sizes:

    python -m tests.e2e.differential [--seed 23] [--nodes-per-zone 18] [--scale 1]
        [--schedulers kube-scheduler,gpuq] [--workdir DIR]

Each scheduler runs the same generated workload on its own fresh control plane; the checker judges
every bind. Prints each run's binds, violations (every one) and settle times, then every pod
kube-scheduler bound and gpuq left pending with gpuq's reason and a verdict (quota, order effect,
unexplained), and the reverse. Exits 1 on any violation or unexplained difference, 2 when a run
could not complete, 0 otherwise. Needs the control-plane binaries (tests/e2e/controlplane/build.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.controlplane.harness import ControlPlaneError
from tests.e2e.differential.compare import UNEXPLAINED, pending_in_second
from tests.e2e.differential.run import GPUQ, KUBE_SCHEDULER, SCHEDULERS, Options, RunResult, run
from tests.e2e.differential.workload import generate


def summary(result: RunResult) -> list[str]:
    pending = len(result.pods) - len(result.bound)
    times = ", ".join(f"{phase} {seconds:.0f}s" for phase, seconds in result.seconds.items())
    lines = [
        f"{result.scheduler}: {result.binds} binds checked, {len(result.violations)} violations, "
        f"{len(result.bound)} pods bound and {pending} pending at the end (settled: {times})"
    ]
    lines += [f"  violation: {v}" for v in result.violations]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.e2e.differential", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--nodes-per-zone", type=int, default=18)
    parser.add_argument("--scale", type=int, default=1, help="rounds of every pod kind (about 530 pods each)")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS))
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs and control-plane files here")
    parser.add_argument("--settle-timeout", type=float, default=Options.settle_timeout, metavar="SECONDS")
    args = parser.parse_args(argv)
    schedulers = args.schedulers.split(",")
    unknown = sorted(set(schedulers) - set(SCHEDULERS))
    if unknown:
        parser.error(f"--schedulers: unknown {', '.join(unknown)}: expected some of {', '.join(SCHEDULERS)}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpuq-differential-"))
    began = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - began:5.0f}s] {line}", flush=True)

    workload = generate(args.seed, args.nodes_per_zone, args.scale)
    progress(f"seed {args.seed}: {len(workload.nodes)} nodes, {workload.pod_count} pods; logs in {workdir}")
    options = Options(settle_timeout=args.settle_timeout, progress=progress)
    results: dict[str, RunResult] = {}
    try:
        for name in schedulers:
            results[name] = asyncio.run(run(workload, name, workdir / name, options))
    except ControlPlaneError as error:
        print(f"error: control plane unavailable: {error}", file=sys.stderr)
        return 2
    except (TimeoutError, RuntimeError) as error:
        print(f"error: a run did not complete: {error}; logs in {workdir}", file=sys.stderr)
        return 2
    failed = False
    for result in results.values():
        print("\n".join(summary(result)))
        failed = failed or bool(result.violations)
    if KUBE_SCHEDULER in results and GPUQ in results:
        kube, gpuq = results[KUBE_SCHEDULER], results[GPUQ]
        differences = pending_in_second(kube, gpuq)
        print(f"bound by kube-scheduler, pending under gpuq: {len(differences)}")
        for difference in differences:
            print(f"  {difference}")
        failed = failed or any(d.verdict == UNEXPLAINED for d in differences)
        reverse = pending_in_second(gpuq, kube)
        print(f"bound by gpuq, pending under kube-scheduler: {len(reverse)}")
        for difference in reverse:
            print(f"  {difference}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
