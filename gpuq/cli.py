"""The ``gpuq`` command line (the composition root: it wires config, plugins and backends).

Exit codes: 0 success, 2 invalid input or configuration (one line per problem on stderr, never a
traceback), 1 an unexpected internal error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, Final

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from certs import command as certs_command
from common.kube.config_file import read_config
from common.model.errors import GpuqError
from common.model.events import FAILED_SCHEDULING
from common.model.quantity import format_bytes
from gpuq.admission import AdmissionOutcome, admit
from scheduler.kube.explain import live_simulation
from scheduler.plugins import default_registry
from scheduler.service import register as register_scheduler
from scheduler.simulate.loader import ingest, read
from scheduler.simulate.run import Simulation, prepare, report, run
from webhook import command as webhook_command

EXIT_INVALID: Final = 2
# Below this many pending pods a progress bar would only flicker.
PROGRESS_THRESHOLD: Final = 2000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuq", description="GPU-aware quota management and scheduling.")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser(
        "simulate",
        help="schedule manifests against an in-memory cluster",
        description="Run the gpuq scheduler against the Nodes and Pods of FILE_OR_DIR, in memory.",
    )
    sim.add_argument("-f", "--filename", action="append", required=True, metavar="FILE_OR_DIR")
    sim.add_argument("--config", metavar="CONF.yaml", help="scheduler configuration (Volcano format)")
    sim.add_argument("-o", "--output", choices=("table", "json"), default="table")
    sim.add_argument("--explain", action="store_true", help="per-node filter reasons and scores")
    sim.add_argument(
        "--admission",
        action="store_true",
        help="first run every object through the webhook's mutators and validators; report rejections",
    )
    exp = sub.add_parser(
        "explain",
        help="why a pod is pending, or why it went where it went",
        description="Simulate FILE_OR_DIR and explain one pod's last scheduling attempt.",
    )
    exp.add_argument("pod", metavar="NAMESPACE/POD")
    exp.add_argument("-f", "--filename", action="append", metavar="FILE_OR_DIR")
    exp.add_argument("--kubeconfig", metavar="P", help="explain from the live cluster instead of files")
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


def _simulate(
    files: Sequence[str], config_path: str | None, explain: bool, admission: AdmissionOutcome | None = None
) -> Simulation | list[str]:
    """Load, (optionally) admit, build and run. ``admission`` receives what the webhook refused."""
    try:
        config = read_config(config_path)
    except GpuqError as err:
        where = config_path or "default config"
        return [f"{where}: {err}"]
    docs, errors = read(files)
    if admission is not None and not errors:
        outcome = admit(docs, config)
        docs = outcome.admitted
        admission.rejected_pods.extend(outcome.rejected_pods)
        admission.rejected.extend(outcome.rejected)
        admission.warnings.extend(outcome.warnings)
    sim = prepare(ingest(docs, errors), config, default_registry(), explain=explain)
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


_BYTES: Final = frozenset({"memory", "ephemeral-storage"})


def _amount(resource: str, value: Any) -> str:
    # The JSON carries bytes; people read 64Gi.
    if resource in _BYTES and isinstance(value, int):
        return format_bytes(value)
    return str(value)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_amount(k, v)}" for k, v in value.items()) or "-"
    return str(value)


def _print_table(out: dict[str, Any]) -> None:
    console = Console()
    table = Table(title="Pods", title_justify="left")
    for column in ("NAMESPACE", "NAME", "PHASE", "NODE", "CARD TYPE", "REASON"):
        table.add_column(column, overflow="fold")
    styles = {"Bound": "green", "Pending": "yellow", "Preempted": "red", "Rejected": "red"}
    for pod in out["pods"]:
        table.add_row(
            pod["namespace"],
            pod["name"],
            f"[{styles.get(pod['phase'], '')}]{pod['phase']}[/]",
            _fmt(pod["node"]),
            _fmt(pod.get("cardType")),
            _fmt(pod["reason"]),
        )
    console.print(table)
    bound = sum(1 for p in out["pods"] if p["phase"] == "Bound")
    console.print(f"{bound}/{len(out['pods'])} pods bound")
    for section, title, keys in (
        ("queues", "Queues", ("allocated", "capability", "inqueue")),
        ("elasticQuotas", "ElasticQuotas", ("used",)),
        ("podGroups", "PodGroups", ("phase",)),
    ):
        rows = out.get(section) or []
        if not rows:
            continue
        t = Table(title=title, title_justify="left")
        named = "namespace" in rows[0]
        if named:
            t.add_column("NAMESPACE")
        t.add_column("NAME")
        for key in keys:
            t.add_column(key.upper())
        for row in rows:
            cells = ([row["namespace"]] if named else []) + [row["name"]] + [_fmt(row.get(k)) for k in keys]
            t.add_row(*cells)
        console.print(t)
    _print_gpu_quotas(console, out.get("gpuResourceQuotas") or [])
    _print_warnings(console, out.get("events") or [])
    for section, title in (
        ("rejected", "Rejected by admission"),
        ("admissionWarnings", "Admission warnings"),
    ):
        rows = out.get(section) or []
        if rows:
            t = Table(title=title, title_justify="left")
            t.add_column("OBJECT")
            t.add_column("MESSAGE", overflow="fold")
            for row in rows:
                t.add_row(row["object"], row["message"])
            console.print(t)


def _print_gpu_quotas(console: Console, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    t = Table(title="GPUResourceQuotas", title_justify="left")
    for column in ("NAMESPACE", "NAME", "USED", "AVAILABLE %", "CONDITIONS"):
        t.add_column(column, overflow="fold")
    for row in rows:
        status = row.get("status") or {}
        used = status.get("used") or {}
        used_text = ", ".join(
            [f"{kind}.{k}={v}" for kind in ("requests", "limits") for k, v in (used.get(kind) or {}).items()]
            + ([f"workers={used['workers']}"] if "workers" in used else [])
        )
        conditions = ", ".join(f"{c['type']}={c['status']}" for c in status.get("conditions") or ())
        available = _fmt(status.get("availablePercent"))
        t.add_row(row["namespace"], row["name"], used_text or "-", available, conditions)
    console.print(t)


def _print_warnings(console: Console, events: list[dict[str, Any]]) -> None:
    """The Warning events (a malformed annotation met, a quota refusal...); FailedScheduling is left
    out: the Pods table's REASON column already says why each pending pod waits."""
    rows = [e for e in events if e["type"] == "Warning" and e["reason"] != FAILED_SCHEDULING]
    if not rows:
        return
    t = Table(title="Warning events", title_justify="left")
    for column in ("OBJECT", "REASON", "MESSAGE"):
        t.add_column(column, overflow="fold")
    for event in rows:
        t.add_row(event["object"], event["reason"], event["message"])
    console.print(t)


def _print_explain(pod: dict[str, Any]) -> None:
    console = Console()
    console.print(
        f"Pod {pod['namespace']}/{pod['name']}: {pod['phase']}"
        + (f" on {pod['node']}" if pod["node"] else "")
        + (f" ({pod['reason']})" if pod["reason"] else "")
    )
    nodes = pod.get("nodes") or {}
    if not nodes:
        return
    plugins = sorted({p for n in nodes.values() for p in n["scores"]})
    table = Table(title_justify="left")
    table.add_column("NODE")
    table.add_column("FILTERED", overflow="fold")
    for plugin in plugins:
        table.add_column(plugin, justify="right")
    table.add_column("TOTAL", justify="right")
    for name, node in nodes.items():
        table.add_row(
            name, _fmt(node["filtered"]), *[_fmt(node["scores"].get(p)) for p in plugins], _fmt(node["total"])
        )
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("scheduler", "webhook", "certs"):
        return int(args.func(args))
    if args.command == "simulate":
        admission = AdmissionOutcome() if args.admission else None
        result = _simulate(args.filename, args.config, args.explain, admission)
        if isinstance(result, list):
            return _fail(result)
        out = report(result, explain=args.explain)
        if admission is not None:
            # design.md "gpuq simulate": rejected Pods are listed with phase Rejected; other rejected
            # objects under "rejected". Admission warnings (usage-dependent checks) are kept too.
            out["pods"] = sorted(
                [*out["pods"], *admission.rejected_pods], key=lambda p: (p["namespace"], p["name"])
            )
            out["rejected"] = admission.rejected
            out["admissionWarnings"] = admission.warnings
        if args.output == "json":
            print(json.dumps(out, indent=2))
        else:
            _print_table(out)
        return 0
    if args.command == "explain":
        namespace, sep, name = args.pod.partition("/")
        if not sep or not namespace or not name:
            return _fail([f"NAMESPACE/POD: invalid value {args.pod!r}: expected <namespace>/<pod>"])
        if bool(args.filename) == bool(args.kubeconfig):
            return _fail(["explain: give either -f FILE_OR_DIR or --kubeconfig P"])
        if args.kubeconfig:
            result = live_simulation(args.kubeconfig, args.config, (namespace, name))
        else:
            result = _simulate(args.filename, args.config, True)
        if isinstance(result, list):
            return _fail(result)
        out = report(result, explain=True)
        match = [p for p in out["pods"] if p["namespace"] == namespace and p["name"] == name]
        if not match:
            return _fail([f"Pod/{namespace}/{name}: not found in the input"])
        if args.output == "json":
            print(json.dumps(match[0], indent=2))
        else:
            _print_explain(match[0])
        return 0
    return 1  # pragma: no cover - argparse enforces a known command


if __name__ == "__main__":
    sys.exit(main())
