"""``kubectl gpuq``: the kubectl plugin (the ``kubectl-gpuq`` console script).

    kubectl gpuq queues [-A]            per queue and card type: used / limit, pending and inqueue
    kubectl gpuq pending [-n NS | -A]   pending pods with their place in their queue and the reason
                                        (a gated pod: POSITION "gated", the gates it waits for)
    kubectl gpuq explain NS/POD         why a pod waits (or went where it went), node by node

Each takes ``-o table|wide|json|yaml`` as kubectl's own commands do (``wide``: more columns; ``json``
and ``yaml``: the rows, or the pod's verdict, as data). Queues are cluster-scoped: ``queues -A`` is
accepted and changes nothing, as ``kubectl get nodes -A``. It honours ``$KUBECONFIG``,
``--kubeconfig``, ``--context`` and ``-n`` as kubectl does, and only reads. Shell completion comes from
argcomplete (docs/install.md "Shell completion"); ``kubectl_complete-gpuq`` answers kubectl's own
completion of plugins.

A user who may read every kind the scheduler watches gets the scheduler's own view: the live state
scheduled in memory by the real scheduler code (:mod:`scheduler.simulate.live`), so the reasons and
the order are what gpuq would decide now. A namespace-scoped user gets what that user may read: the
pods of the namespace with the reason the scheduler recorded on each (its PodScheduled message, which
carries the outlook), their place among the pending pods of their queue that the user can see, and
the Queues' recorded usage when Queues are readable; a note on stderr says what could not be read.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import argcomplete
import yaml
from rich.table import Table

from gpuq_k8s.cli import quiet_broken_pipe
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.common.kube.metrics import gpuq_version
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.annotations import GROUP_NAME
from gpuq_k8s.common.model.capacity_card.quota import queue_quota
from gpuq_k8s.common.model.crd import PodGroup, Queue
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.outlook import outlook_of
from gpuq_k8s.common.model.placement.scheduling_gates import waiting_for
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.queues import queue_of
from gpuq_k8s.common.model.resources import Resources
from gpuq_k8s.common.process.flags import add_cluster_flags
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.plugins.priority import pod_priority
from gpuq_k8s.scheduler.simulate.live import ReadError, Snapshot, manifests, snapshot
from gpuq_k8s.scheduler.simulate.run import GATED, PENDING, Simulation, prepare, report, run
from gpuq_k8s.tables import amount, fmt, make_console, print_explain

EXIT_INVALID: Final = 2
DEFAULT_NAMESPACE: Final = "default"
OUTPUTS: Final = ("table", "wide", "json", "yaml")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    add_cluster_flags(common, "kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    common.add_argument("-n", "--namespace", metavar="NS", help="the namespace (default: the context's)")
    common.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    parser = argparse.ArgumentParser(
        prog="kubectl gpuq", description="gpuq's view of a cluster: queues, pending pods, explanations."
    )
    parser.add_argument("--version", action="version", version=f"kubectl-gpuq {gpuq_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    queues = sub.add_parser(
        "queues", parents=[common], help="per queue and card type: used / limit, pending, inqueue"
    )
    queues.add_argument(
        "-A", "--all-namespaces", action="store_true", help="accepted: Queues are cluster-scoped"
    )
    pending = sub.add_parser(
        "pending", parents=[common], help="pending pods, their queue position and reason"
    )
    pending.add_argument(
        "-A", "--all-namespaces", action="store_true", help="pending pods of every namespace"
    )
    explain = sub.add_parser("explain", parents=[common], help="why a pod waits, node by node")
    explain.add_argument("pod", metavar="[NAMESPACE/]POD")
    return parser


def _context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context, as kubectl takes it when -n is not given."""
    path = kubeconfig or (os.environ.get("KUBECONFIG") or "~/.kube/config").split(os.pathsep)[0]
    try:
        data = yaml.safe_load(Path(path).expanduser().read_text()) or {}
    except (OSError, yaml.YAMLError):
        return DEFAULT_NAMESPACE  # reading the cluster says what is wrong with the file
    if not isinstance(data, Mapping):
        return DEFAULT_NAMESPACE
    name = context or data.get("current-context")
    contexts = data.get("contexts")
    for entry in contexts if isinstance(contexts, list) else ():
        if isinstance(entry, Mapping) and entry.get("name") == name:
            spec = entry.get("context")
            namespace = spec.get("namespace") if isinstance(spec, Mapping) else None
            return str(namespace or DEFAULT_NAMESPACE)
    return DEFAULT_NAMESPACE


class View:
    """What the user can see: the scheduler's view (``sim``) or the recorded state (``snap`` only)."""

    def __init__(self, snap: Snapshot, sim: Simulation | None) -> None:
        self.snap = snap
        self.sim = sim
        self.report = report(sim, explain=True) if sim is not None else None

    @property
    def full(self) -> bool:
        return self.sim is not None


def _read(args: argparse.Namespace, namespace: str) -> View | list[str]:
    """Everything if the user may, else the namespace; the scheduler's view when all was read."""
    try:
        snap = snapshot(args.kubeconfig, args.context)
        if snap.forbidden:
            scoped = snapshot(args.kubeconfig, args.context, namespace)
            scoped.forbidden = snap.forbidden  # what the user may not list across the cluster
            return View(scoped, None)
        settings = read_config(None)
    except (ReadError, GpuqError) as err:
        return [str(err)]
    sim = prepare(manifests(snap), settings, default_registry(), explain=True)
    if isinstance(sim, list):
        return sim
    run(sim)
    return View(snap, sim)


def _note(view: View, namespace: str) -> None:
    if view.full:
        return
    print(
        f"note: this user may not list {', '.join(view.snap.forbidden)} across the cluster; showing what it "
        f"may read (namespace {namespace}; reasons as the scheduler recorded them)",
        file=sys.stderr,
    )


def _podgroups(snap: Snapshot) -> dict[str, PodGroup]:
    groups: dict[str, PodGroup] = {}
    for obj in snap.objects.get(kinds.POD_GROUP.kind, ()):
        try:
            group = PodGroup.from_dict(obj)
        except GpuqError:
            continue
        groups[f"{group.namespace}/{group.name}"] = group
    return groups


def _pod_infos(snap: Snapshot) -> list[PodInfo]:
    pods = []
    for obj in snap.objects.get(kinds.POD.kind, ()):
        try:
            pods.append(PodInfo.from_dict(obj))
        except GpuqError:
            continue
    return pods


def _recorded_reason(obj: Mapping[str, Any]) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return None


def _queue_order(pod: PodInfo) -> tuple[Any, ...]:
    """The scheduling queue's order (the priority plugin's QueueSort): namespace and name as a pair,
    not as ``ns/name`` (``a-b/c`` sorts before ``a/z`` as a string, after it as a pair)."""
    return (-pod_priority(pod), pod.creation_timestamp, pod.namespace, pod.name)


def pending_rows(view: View) -> list[dict[str, Any]]:
    """Pending pods in queue order (priority high first, then creationTimestamp, then name), each
    with its queue, its position among that queue's pending pods, its outlook and reason. A gated pod
    (``spec.schedulingGates``) is listed with phase ``Gated`` and no position: the scheduler never
    tries it until its gates are removed."""
    groups = _podgroups(view.snap)
    infos = {p.key: p for p in _pod_infos(view.snap)}
    raw = {
        f"{(o.get('metadata') or {}).get('namespace')}/{(o.get('metadata') or {}).get('name')}": o
        for o in view.snap.objects.get(kinds.POD.kind, ())
    }
    rows: list[dict[str, Any]] = []
    if view.report is not None:
        for pod in view.report["pods"]:
            key = f"{pod['namespace']}/{pod['name']}"
            info = infos.get(key)
            if pod["phase"] in (PENDING, GATED) and info is not None:
                rows.append(
                    {"pod": info, "phase": pod["phase"], "reason": pod["reason"], "outlook": pod["outlook"]}
                )
    else:
        for key, info in infos.items():
            if not info.bound and not info.terminal and not info.deleting:
                if info.scheduling_gates:
                    rows.append(
                        {
                            "pod": info,
                            "phase": GATED,
                            "reason": waiting_for(info.scheduling_gates),
                            "outlook": None,
                        }
                    )
                    continue
                reason = _recorded_reason(raw.get(key) or {})
                rows.append({"pod": info, "phase": PENDING, "reason": reason, "outlook": outlook_of(reason)})
    rows.sort(key=lambda r: _queue_order(r["pod"]))
    counts: dict[str, int] = {}
    out = []
    for row in rows:
        info = row["pod"]
        queue = queue_of(info, groups)
        position = None
        if row["phase"] == PENDING:
            counts[queue] = counts.get(queue, 0) + 1
            position = counts[queue]
        out.append(
            {
                "namespace": info.namespace,
                "name": info.name,
                "queue": queue,
                "phase": row["phase"],
                "position": position,
                "outlook": row["outlook"],
                "reason": row["reason"],
                "priority": pod_priority(info),
                "created": info.creation_timestamp or None,
                "podGroup": info.annotations.get(GROUP_NAME),
            }
        )
    for row in out:
        row["of"] = counts.get(row["queue"], 0)
    return out


def queue_rows(view: View) -> list[dict[str, Any]]:
    """Per queue and resource of its limit (card types, cpu, memory): used, limit, inqueue, and
    the queue's pending pods."""
    pending: dict[str, int] = {}
    for row in pending_rows(view):
        pending[row["queue"]] = pending.get(row["queue"], 0) + 1
    sections: list[Mapping[str, Any]] = []
    if view.report is not None:
        sections = view.report["queues"]
    else:
        for obj in view.snap.objects.get(kinds.QUEUE.kind, ()):
            try:
                model = Queue.from_dict(obj)
                capability = queue_quota(model).capability.to_numbers()
            except GpuqError:
                continue
            allocated = ((obj.get("status") or {}).get("allocated")) or {}
            sections.append(
                {
                    "name": model.name,
                    "capability": capability,
                    "allocated": _numbers(allocated),
                    "inqueue": {},
                }
            )
    rows = []
    for section in sections:
        limits = section.get("capability") or {}
        used = section.get("allocated") or {}
        for resource in sorted(set(limits) | set(used)):
            rows.append(
                {
                    "queue": section["name"],
                    "resource": resource,
                    "used": used.get(resource, 0),
                    "limit": limits.get(resource),
                    "inqueue": (section.get("inqueue") or {}).get(resource, 0),
                    "pending": pending.get(section["name"], 0),
                }
            )
    return rows


def _numbers(quantities: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return Resources.parse(quantities, "status.allocated").to_numbers()
    except GpuqError:
        return {}


def _table(columns: Sequence[str], rows: list[list[str]]) -> None:
    """kubectl's plain columns (no box, no padding at the ends of lines)."""
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console = make_console()
    with console.capture() as captured:
        console.print(table)
    for line in captured.get().splitlines():
        print(line.rstrip())


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    return quiet_broken_pipe(lambda: _main(args))


def complete() -> int:
    """``kubectl_complete-gpuq ARGS... WORD``: kubectl's completion of a plugin (kubectl 1.26+ runs
    this executable with the words typed after ``kubectl gpuq``; it prints one candidate a line, then
    ``:4``, cobra's "no file completion" directive). The candidates are argcomplete's, as for
    ``kubectl-gpuq``."""
    words = sys.argv[1:] or [""]
    line = " ".join(["kubectl-gpuq", *words])
    found = io.StringIO()
    environment = {
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_SUPPRESS_SPACE": "0",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "COMP_TYPE": "9",
    }
    saved = {key: os.environ.get(key) for key in environment}
    os.environ.update(environment)
    try:
        argcomplete.autocomplete(_parser(), output_stream=found, exit_method=_Done.stop)
    except _Done:
        pass
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    for candidate in found.getvalue().split("\n"):
        if candidate.strip():
            print(candidate.strip())
    print(":4")
    return 0


class _Done(Exception):
    """argcomplete's exit, turned into a return (it would end the process)."""

    @staticmethod
    def stop(code: int = 0) -> None:
        raise _Done(code)


def _print_rows(rows: list[dict[str, Any]], output: str) -> bool:
    """The rows as JSON or YAML when ``output`` says so; False for the table forms."""
    if output == "json":
        print(json.dumps(rows, indent=2))
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(rows, sort_keys=False))
    else:
        return False
    return True


def _main(args: argparse.Namespace) -> int:
    namespace = args.namespace or _context_namespace(args.kubeconfig, args.context)
    target: tuple[str, str] | None = None
    if args.command == "explain":
        ns, sep, name = args.pod.rpartition("/")
        target = (ns if sep else namespace, name)
        if not name or (sep and not ns) or "/" in ns:
            print(
                f"error: [NAMESPACE/]POD: invalid value {args.pod!r}: expected <namespace>/<pod>",
                file=sys.stderr,
            )
            return EXIT_INVALID
    view = _read(args, target[0] if target else namespace)
    if isinstance(view, list):
        for problem in view:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID
    _note(view, target[0] if target else namespace)
    return render(
        view,
        args.command,
        args.output,
        namespace,
        all_namespaces=bool(getattr(args, "all_namespaces", False)),
        target=target,
    )


def render(
    view: View,
    command: str,
    output: str,
    namespace: str,
    *,
    all_namespaces: bool = False,
    target: tuple[str, str] | None = None,
) -> int:
    """Print ``command``'s answer from ``view`` in ``output`` (table, wide, json, yaml); the exit code."""
    wide = output == "wide"
    if command == "queues":
        rows = queue_rows(view)
        if _print_rows(rows, output):
            return 0
        if not rows and kinds.QUEUE.kind in view.snap.forbidden:
            print("No queues readable by this user.")
            return 0
        columns = ["QUEUE", "RESOURCE", "USED", "LIMIT", "INQUEUE", "PENDING PODS"]
        columns += ["AVAILABLE", "USED %"] if wide else []
        _table(columns, [_queue_cells(r, wide=wide) for r in rows])
        return 0
    if command == "pending":
        rows = pending_rows(view)
        if not all_namespaces:
            rows = [r for r in rows if r["namespace"] == namespace]
        if _print_rows(rows, output):
            return 0
        columns = ["NAMESPACE", "POD", "QUEUE", "POSITION", "OUTLOOK", "REASON"]
        if wide:
            columns[4:4] = ["PRIORITY", "PODGROUP", "CREATED"]
        _table(columns, [_pending_cells(r, wide=wide) for r in rows])
        return 0
    assert target is not None
    return _explain(view, target, output)


def _queue_cells(row: Mapping[str, Any], *, wide: bool) -> list[str]:
    resource, used, limit = row["resource"], row["used"], row["limit"]
    cells = [
        row["queue"],
        resource,
        amount(resource, used),
        amount(resource, limit),
        amount(resource, row["inqueue"]),
        str(row["pending"]),
    ]
    if wide:
        available = max(limit - used, 0) if isinstance(limit, int | float) else None
        share = f"{100 * used / limit:.0f}%" if isinstance(limit, int | float) and limit else "-"
        cells += [amount(resource, available), share]
    return cells


def _pending_cells(row: Mapping[str, Any], *, wide: bool) -> list[str]:
    cells = [
        row["namespace"],
        row["name"],
        row["queue"],
        "gated" if row["position"] is None else f"{row['position']}/{row['of']}",
        fmt(row["outlook"]),
        fmt(row["reason"]),
    ]
    if wide:
        cells[4:4] = [str(row["priority"]), fmt(row["podGroup"]), fmt(row["created"])]
    return cells


def _explain(view: View, target: tuple[str, str], output: str) -> int:
    key = f"{target[0]}/{target[1]}"
    if view.report is not None:
        match = [p for p in view.report["pods"] if f"{p['namespace']}/{p['name']}" == key]
    else:
        raw = [
            o
            for o in view.snap.objects.get(kinds.POD.kind, ())
            if f"{(o.get('metadata') or {}).get('namespace')}/{(o.get('metadata') or {}).get('name')}" == key
        ]
        match = []
        for obj in raw:
            spec = obj.get("spec") or {}
            node = spec.get("nodeName")
            reason = _recorded_reason(obj)
            phase = "Bound" if node else PENDING
            gates = [g.get("name") for g in spec.get("schedulingGates") or () if isinstance(g, Mapping)]
            if not node and gates:
                phase, reason = GATED, waiting_for([str(g) for g in gates])
            match.append(
                {
                    "namespace": target[0],
                    "name": target[1],
                    "phase": phase,
                    "node": node,
                    "reason": reason,
                    "outlook": outlook_of(reason) if phase == PENDING else None,
                }
            )
    if not match:
        print(f"error: Pod/{key}: not found (or not readable by this user)", file=sys.stderr)
        return EXIT_INVALID
    if output == "json":
        print(json.dumps(match[0], indent=2))
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(match[0], sort_keys=False))
    else:
        # table: each node's verdict and total; wide: every plugin's score as well.
        print_explain(match[0], scores=output == "wide")
    return 0


if __name__ == "__main__":
    sys.exit(main())
