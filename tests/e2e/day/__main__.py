"""Run a day in the life: ``python -m tests.e2e.day [--seed N] [--jobs N] [--minutes M] [--nodes N]
[--html PAGE] [--json FILE]``.

A seeded simulated day of GPU work (training gangs, inference Deployments, notebooks, ETL pods on GPU
nodes, in bursts) on kwok nodes, with two ``gpuq scheduler`` replicas and faults (kill -9, leader
switch, watch stall), every invariant checked after every step (tests/e2e/day/checks.py). Prints
progress, then the figures and every violation; writes the HTML page of the run (and its data as
JSON) when asked. Exits 1 on any violation (keeping the logs), 2 when the run could not be made, 0
otherwise. Needs the binaries of ``bash tests/e2e/controlplane/build.sh`` (kwok included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import aiohttp

from tests.e2e.controlplane.harness import ControlPlaneError
from tests.e2e.day.page import render
from tests.e2e.day.run import Day, Options


def main(argv: list[str] | None = None) -> int:
    defaults = Options()
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.day", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--jobs", type=int, default=defaults.jobs, help="jobs arriving over the day")
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="real minutes of the day")
    parser.add_argument("--nodes", type=int, default=defaults.nodes, help="kwok GPU nodes (8 GPUs each)")
    parser.add_argument("--fault-every", type=float, default=defaults.fault_every, metavar="SECONDS")
    parser.add_argument(
        "--shortest",
        type=float,
        default=defaults.shortest,
        metavar="SECONDS",
        help="shortest job, in real seconds",
    )
    parser.add_argument(
        "--step", type=float, default=defaults.step, metavar="SECONDS", help="seconds per step"
    )
    parser.add_argument("--html", type=Path, help="write the page of the run here")
    parser.add_argument("--json", type=Path, help="write the run's data here")
    args = parser.parse_args(argv)
    began = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - began:6.0f}s] {line}", flush=True)

    options = Options(
        seed=args.seed,
        jobs=args.jobs,
        minutes=args.minutes,
        nodes=args.nodes,
        fault_every=args.fault_every,
        shortest=args.shortest,
        step=args.step,
        progress=progress,
    )

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # asyncio.run cancels the day: its replicas and control plane stop

    signal.signal(signal.SIGTERM, interrupted)
    day = Day(options)
    progress(f"a day in the life: seed {args.seed}, {args.jobs} jobs in {args.minutes:g} min")
    progress(f"logs in {day.workdir}")
    try:
        figures = asyncio.run(day.run())
    except ControlPlaneError as error:
        print(f"error: control plane unavailable: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted; logs in {day.workdir}", file=sys.stderr)
        return 130
    except (TimeoutError, aiohttp.ClientError, RuntimeError) as error:
        reason = str(error) or type(error).__name__
        print(f"error: the day stopped, the API failed it: {reason}; logs in {day.workdir}", file=sys.stderr)
        return 2
    data = figures.data()
    if args.html is not None:
        args.html.write_text(render(data))
        progress(f"page: {args.html}")
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True))
    print("\n".join(figures.lines()))
    for violation in figures.violations:
        print(f"VIOLATION {violation}")
    if figures.violations:
        print(f"logs kept in {day.workdir}")
        return 1
    shutil.rmtree(day.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
