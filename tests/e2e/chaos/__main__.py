"""Run the chaos soak: ``python -m tests.e2e.chaos [--seed N] [--operations N] ...``.

Prints progress, then the figures (faults by kind, pods created and deleted, checks, violations,
wall time) and every violation; exits 1 on any violation (keeping the logs), 0 otherwise. Needs
the control-plane binaries (``bash tests/e2e/controlplane/build.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time

import aiohttp

from tests.e2e.chaos.soak import Options, Soak
from tests.e2e.controlplane.harness import ControlPlaneError


def main(argv: list[str] | None = None) -> int:
    defaults = Options()
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--operations", type=int, default=defaults.operations, help="pod creates + deletes")
    parser.add_argument("--fault-every", type=int, default=defaults.fault_every, help="operations per fault")
    parser.add_argument(
        "--settle-every", type=int, default=defaults.settle_every, help="operations per settle"
    )
    parser.add_argument("--settle-timeout", type=float, default=defaults.settle_timeout, metavar="SECONDS")
    parser.add_argument("--flush-interval", type=float, default=defaults.flush_interval, metavar="SECONDS")
    args = parser.parse_args(argv)
    began = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - began:6.0f}s] {line}", flush=True)

    options = Options(
        seed=args.seed,
        operations=args.operations,
        fault_every=args.fault_every,
        settle_every=args.settle_every,
        settle_timeout=args.settle_timeout,
        flush_interval=args.flush_interval,
        progress=progress,
    )
    soak = Soak(options)
    progress(f"chaos soak: seed {args.seed}, {args.operations} operations; logs in {soak.workdir}")
    try:
        figures = asyncio.run(soak.run())
    except ControlPlaneError as error:
        print(f"error: control plane unavailable: {error}", file=sys.stderr)
        return 2
    except (TimeoutError, aiohttp.ClientError, RuntimeError) as error:
        # The soak's own requests failing for good (an apiserver that stopped answering): no verdict.
        reason = str(error) or type(error).__name__
        print(f"error: soak stopped, the API failed it: {reason}; logs in {soak.workdir}", file=sys.stderr)
        return 2
    print("\n".join(figures.lines()))
    for violation in figures.violations:
        print(f"VIOLATION: {violation}")
    if figures.violations:
        print(f"logs (scheduler replicas, etcd, kube-apiserver) kept in {soak.workdir}")
        return 1
    shutil.rmtree(soak.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
