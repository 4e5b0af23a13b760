"""The long fuzz run: ``python -m tests.fuzz --examples 1000000 [--boundary feed ...]``.

Runs each boundary of :mod:`tests.fuzz.boundaries` with ``--examples`` generated examples (no
shrinking, no example database: a long run explores, the suite's 10,000-example run is the gate).
An example that fails does not stop the run: it is counted as a crash and the first few are printed
with their traceback. Prints, per boundary, the examples run, the crashes and the time; exits 1 on
any crash.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.fuzz.boundaries import BOUNDARIES, Boundary
from tests.fuzz.http_boundaries import HTTP_BOUNDARIES

ALL = (*BOUNDARIES, *HTTP_BOUNDARIES)

_SHOWN = 5
ROUND = 10_000


def run(boundary: Boundary, examples: int, first_seed: int) -> tuple[int, int, float]:
    """``(examples run, crashes, seconds)`` of one boundary: rounds of at most :data:`ROUND` examples,
    each under its own seed (Hypothesis remembers every example of a run to avoid repeats, so one
    round of a million would hold them all in memory)."""
    counts = {"examples": 0, "crashes": 0}
    began = time.perf_counter()
    round_seed = first_seed
    while counts["examples"] < examples:
        wanted = min(ROUND, examples - counts["examples"])
        ran_before = counts["examples"]
        _round(boundary, wanted, round_seed, counts)
        if counts["examples"] == ran_before:
            break  # the strategy has no new example left
        seconds = time.perf_counter() - began
        done, crashes = counts["examples"], counts["crashes"]
        print(
            f"{boundary.name}: {done} examples, crashes: {crashes}, {seconds:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        round_seed += 1
    return counts["examples"], counts["crashes"], time.perf_counter() - began


def _round(boundary: Boundary, examples: int, round_seed: int, counts: dict[str, int]) -> None:
    @seed(round_seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(boundary.cases)
    def explore(case: Any) -> None:
        counts["examples"] += 1
        try:
            boundary.check(case)
        except Exception:  # a crash is counted and shown, the run goes on
            counts["crashes"] += 1
            if counts["crashes"] <= _SHOWN:
                where = f"{boundary.name}, seed {round_seed}: crash {counts['crashes']}"
                print(f"--- {where} on {repr(case)[:600]}", file=sys.stderr)
                traceback.print_exc()

    explore()


def main(argv: list[str] | None = None) -> int:
    names = [b.name for b in ALL]
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1_000_000, help="examples per boundary")
    parser.add_argument("--boundary", action="append", choices=names, help="only these (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="the first round's seed (each round: +1)")
    args = parser.parse_args(argv)
    # Malformed objects are logged as warnings by design; errors (a contained bug) still show.
    logging.basicConfig(level=logging.ERROR)
    crashed = 0
    for boundary in ALL:
        if args.boundary and boundary.name not in args.boundary:
            continue
        examples, crashes, seconds = run(boundary, args.examples, args.seed)
        crashed += crashes
        print(f"{boundary.name}: {examples} examples, crashes: {crashes}, {seconds:.0f} s", flush=True)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
