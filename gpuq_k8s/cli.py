"""The ``gpuq`` command line (the composition root: it wires config, plugins and backends).

Exit codes: 0 success, 2 invalid input or configuration (one line per problem on stderr, never a
traceback), 3 a ``gpuq simulate --fail-on`` condition met, 1 an unexpected internal error.
"""

from __future__ import annotations

import gc

# No cyclic collection while the modules load (pydantic models, kubernetes_asyncio's, numpy: the
# objects they make live as long as the process), then those objects frozen out of later collections
# (below; a first collection would otherwise walk them all at once): 0.05-0.1 s of every start
# (issue 29), as scheduler/kube/heap.py does for the loaded caches.
_COLLECTING = gc.isenabled()
gc.disable()

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import argcomplete

from gpuq_k8s.common.kube.client import KubeconfigError
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.common.kube.metrics import gpuq_version
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.pods import DEFAULT_SCHEDULER, GPUQ_SCHEDULER
from gpuq_k8s.common.process.flags import add_cluster_flags
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.service import register as register_scheduler

if TYPE_CHECKING:
    from gpuq_k8s.admission import AdmissionOutcome
    from gpuq_k8s.scheduler.simulate.loader import Document
    from gpuq_k8s.scheduler.simulate.run import Simulation

# The other sub-commands' modules (simulate and its reports, admission, the webhook, certificates,
# rich's tables) are imported by the functions that run them: `gpuq scheduler` does not load them
# (issue 29: about 0.1 s of every scheduler start).

gc.freeze()
if _COLLECTING:
    gc.enable()

EXIT_INVALID: Final = 2
# `gpuq simulate --fail-on`: a condition met (not 1, a crash's, nor 2, invalid input's, so a CI log
# tells them apart).
EXIT_FAIL_ON: Final = 3
# Below this many pending pods a progress bar would only flicker.
PROGRESS_THRESHOLD: Final = 2000


def _parser(*, scheduler_only: bool = False) -> argparse.ArgumentParser:
    """The command line; ``scheduler_only``: with the ``scheduler`` sub-command alone (its start loads
    no other sub-command's modules)."""
    parser = argparse.ArgumentParser(prog="gpuq", description="GPU-aware quota management and scheduling.")
    parser.add_argument("--version", action="version", version=f"gpuq {gpuq_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    if scheduler_only:
        register_scheduler(sub)
        return parser
    from gpuq_k8s.certs import command as certs_command
    from gpuq_k8s.scheduler.simulate.fail_on import FAIL_ON
    from gpuq_k8s.scheduler.simulate.run import EXPLAIN_ALL, EXPLAIN_PENDING
    from gpuq_k8s.webhook import command as webhook_command

    sim = sub.add_parser(
        "simulate",
        help="schedule manifests (and the live cluster's state) in memory",
        description="Run the gpuq scheduler against the Nodes and Pods of FILE_OR_DIR, in memory; with "
        "--kubeconfig, against the live cluster's state (read once, never written) plus FILE_OR_DIR.",
    )
    sim.add_argument("-f", "--filename", action="append", default=[], metavar="FILE_OR_DIR")
    add_cluster_flags(
        sim, "start from this live cluster's state, read-only (--context alone: $KUBECONFIG, ~/.kube/config)"
    )
    sim.add_argument("--config", metavar="CONF.yaml", help="scheduler configuration (Volcano format)")
    sim.add_argument("-o", "--output", choices=("table", "json", "html"), default="table")
    sim.add_argument(
        "--explain",
        nargs="?",
        const=EXPLAIN_PENDING,
        choices=(EXPLAIN_PENDING, EXPLAIN_ALL),
        help="per-node filter reasons and scores: of the pods left pending (--explain), or of every pod "
        "(--explain=all)",
    )
    sim.add_argument(
        "--admission",
        action="store_true",
        help="first run every object through the webhook's mutators and validators; report rejections",
    )
    sim.add_argument(
        "--strict",
        action="store_true",
        help="refuse objects of kinds gpuq does not simulate (default: skip them, with one summary line)",
    )
    sim.add_argument(
        "--scheduler-name",
        default=GPUQ_SCHEDULER,
        metavar="NAME",
        help=f"schedule the pods whose spec.schedulerName is NAME (default {GPUQ_SCHEDULER}; "
        f"{DEFAULT_SCHEDULER} takes the pods that set none)",
    )
    sim.add_argument(
        "--fail-on",
        action="append",
        choices=FAIL_ON,
        default=[],
        help=f"exit {EXIT_FAIL_ON} when a pod gpuq schedules ends pending, pending with outlook never, or "
        "rejected by --admission (repeatable)",
    )
    exp = sub.add_parser(
        "explain",
        help="why a pod is pending, or why it went where it went",
        description="Explain one pod's last scheduling attempt, from FILE_OR_DIR or the live cluster.",
    )
    exp.add_argument("pod", metavar="NAMESPACE/POD")
    exp.add_argument("-f", "--filename", action="append", metavar="FILE_OR_DIR")
    add_cluster_flags(exp, "explain from this live cluster (without -f: $KUBECONFIG, ~/.kube/config)")
    exp.add_argument("--config", metavar="CONF.yaml")
    exp.add_argument("-o", "--output", choices=("table", "json"), default="table")
    register_scheduler(sub)
    webhook_command.register(sub)
    certs_command.register(sub)
    return parser


def _fail(problems: Sequence[str]) -> int:
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return EXIT_INVALID


def _admitted(
    docs: list[Document], config: SchedulerConfig, admission: AdmissionOutcome | None
) -> list[Document]:
    if admission is None:
        return docs
    from gpuq_k8s.admission import admit

    outcome = admit(docs, config)
    admission.rejected_pods.extend(outcome.rejected_pods)
    admission.rejected.extend(outcome.rejected)
    admission.warnings.extend(outcome.warnings)
    return outcome.admitted


def _simulate(
    files: Sequence[str],
    config_path: str | None,
    explain: bool,
    admission: AdmissionOutcome | None = None,
    live: tuple[str | None, str | None] | None = None,
    *,
    strict: bool = False,
    scheduler_name: str = GPUQ_SCHEDULER,
) -> Simulation | list[str]:
    """Load, (optionally) admit, build and run. ``admission`` receives what the webhook refused;
    ``live`` (kubeconfig, context): start from that cluster's state, ``files`` on top. The objects of
    kinds gpuq does not simulate are skipped with one line on stderr (``strict``: refused)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpuq_k8s.scheduler.simulate.live import live_simulation
    from gpuq_k8s.scheduler.simulate.loader import Manifests, ingest, read, skipped_summary
    from gpuq_k8s.scheduler.simulate.run import prepare, run

    try:
        config = read_config(config_path)
    except GpuqError as err:
        where = config_path or "default config"
        return [f"{where}: {line}" for line in err.lines()]
    docs, errors = read(files)
    if not errors:
        docs = _admitted(docs, config, admission)
    extra: Manifests = ingest(docs, errors, strict=strict)
    if extra.skipped and not extra.errors:
        print(
            f"{skipped_summary(extra.skipped)} (kinds gpuq does not simulate; --strict refuses them)",
            file=sys.stderr,
        )
    if live is not None:
        if extra.errors:
            return extra.errors
        return live_simulation(
            live[0],
            config_path,
            context=live[1],
            extra=extra,
            explain=explain,
            scheduler_name=scheduler_name,
        )
    sim = prepare(extra, config, default_registry(), explain=explain, scheduler_name=scheduler_name)
    if isinstance(sim, list):
        return sim
    pending = sum(1 for p in sim.input_pods if not p.bound)
    if pending >= PROGRESS_THRESHOLD and sys.stderr.isatty():
        with Progress(
            TextColumn("scheduling"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task("pods", total=pending)
            run(sim, progress=lambda k: bar.advance(task, k))
    else:
        run(sim)
    return sim


def quiet_broken_pipe(command: Callable[[], int]) -> int:
    """``gpuq ... | head -1``: the reader left; stop quietly (no BrokenPipeError traceback)."""
    try:
        code = command()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return code


def _run_simulate(args: argparse.Namespace) -> int:
    from gpuq_k8s.admission import AdmissionOutcome
    from gpuq_k8s.scheduler.simulate.fail_on import REJECTED, fail_on
    from gpuq_k8s.scheduler.simulate.html import render as render_html
    from gpuq_k8s.scheduler.simulate.run import explains, node_detail, report, write_json
    from gpuq_k8s.tables import print_report

    if not args.filename and not args.kubeconfig and not args.context:
        return _fail(["simulate: give -f FILE_OR_DIR, --kubeconfig P (the live cluster), or both"])
    if REJECTED in args.fail_on and not args.admission:
        return _fail(["--fail-on rejected: nothing is rejected without --admission: add --admission"])
    admission = AdmissionOutcome() if args.admission else None
    live = (args.kubeconfig, args.context) if args.kubeconfig or args.context else None
    result = _simulate(
        args.filename,
        args.config,
        args.explain is not None,
        admission,
        live,
        strict=args.strict,
        scheduler_name=args.scheduler_name,
    )
    if isinstance(result, list):
        return _fail(result)
    out = report(result)
    if admission is not None:
        # design.md "gpuq simulate": rejected Pods are listed with phase Rejected; other rejected
        # objects under "rejected". Admission warnings (usage-dependent checks) are kept too.
        out["pods"] = sorted(
            [*out["pods"], *admission.rejected_pods], key=lambda p: (p["namespace"], p["name"])
        )
        out["rejected"] = admission.rejected
        out["admissionWarnings"] = admission.warnings
    failed = fail_on(result, out, args.fail_on)

    def detail(entry: Mapping[str, Any]) -> dict[str, Any] | None:
        return node_detail(result, entry) if explains(entry, args.explain) else None

    if args.output == "json":
        write_json(out, sys.stdout.write, detail)
    elif args.output == "html":
        sys.stdout.write(render_html(out))
    else:
        print_report(out, explain=detail if args.explain else None)
    for line in failed:
        print(line, file=sys.stderr)
    return EXIT_FAIL_ON if failed else 0


def _run_explain(args: argparse.Namespace) -> int:
    from gpuq_k8s.scheduler.simulate.live import live_simulation
    from gpuq_k8s.scheduler.simulate.run import node_detail, report
    from gpuq_k8s.tables import print_explain

    namespace, sep, name = args.pod.partition("/")
    if not sep or not namespace or not name or "/" in name:
        return _fail([f"NAMESPACE/POD: invalid value {args.pod!r}: expected <namespace>/<pod>"])
    if args.filename and (args.kubeconfig or args.context):
        return _fail(["explain: give either -f FILE_OR_DIR or the live cluster (--kubeconfig, --context)"])
    if args.filename:
        result = _simulate(args.filename, args.config, True)
    else:
        result = live_simulation(args.kubeconfig, args.config, (namespace, name), context=args.context)
    if isinstance(result, list):
        return _fail(result)
    out = report(result)
    match = [p for p in out["pods"] if p["namespace"] == namespace and p["name"] == name]
    if not match:
        return _fail([f"Pod/{namespace}/{name}: not found in the input"])
    detail = node_detail(result, match[0])  # this pod's alone: every pod's would cost 2.5 M entries
    if detail is not None:
        match[0]["nodes"] = detail
    if args.output == "json":
        print(json.dumps(match[0], indent=2))
    else:
        print_explain(match[0])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    # `gpuq scheduler ...` (not a shell asking argcomplete for completions): its sub-command alone.
    parser = _parser(scheduler_only=given[:1] == ["scheduler"] and "_ARGCOMPLETE" not in os.environ)
    argcomplete.autocomplete(parser)  # returns at once unless the shell asks for completions
    args = parser.parse_args(argv)
    if args.command in ("scheduler", "webhook", "certs"):
        try:
            return int(args.func(args))
        except KubeconfigError as err:  # raised as the process connects, before it serves anything
            print(f"error: {err}", file=sys.stderr)
            return EXIT_INVALID
    if args.command == "simulate":
        return quiet_broken_pipe(lambda: _run_simulate(args))
    if args.command == "explain":
        return quiet_broken_pipe(lambda: _run_explain(args))
    return 1  # pragma: no cover - argparse enforces a known command


if __name__ == "__main__":
    sys.exit(main())
