"""How ``gpuq simulate`` and ``gpuq explain`` print their report as tables (``-o table``).

On a terminal, tables fit its width; piped or redirected, nothing is wrapped (a REASON is one line,
whatever its length), so the output can be grepped.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuq_k8s.common.model.events import FAILED_SCHEDULING
from gpuq_k8s.common.model.quantity import format_bytes

# Wide enough that no column ever wraps when the output is not a terminal.
UNWRAPPED_WIDTH: Final = 100_000


def make_console() -> Console:
    """A console for stdout: the terminal's width, or unwrapped when stdout is not a terminal."""
    if sys.stdout.isatty():
        return Console()
    return Console(width=UNWRAPPED_WIDTH, soft_wrap=True)


_BYTES: Final = frozenset({"memory", "ephemeral-storage"})


def amount(resource: str, value: Any) -> str:
    # The JSON carries bytes; people read 64Gi.
    if value is None:
        return "-"
    if resource in _BYTES and isinstance(value, int):
        return format_bytes(value)
    return str(value)


def fmt(value: Any) -> str:
    """A cell's text, as printed: Rich markup in it escaped (a reason such as ``waiting for scheduling
    gates: [a b]`` is text, not a style tag)."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        return escape(", ".join(f"{k}={amount(k, v)}" for k, v in value.items())) or "-"
    return escape(str(value))


def _print_gpu_shares(console: Console, pods: list[dict[str, Any]]) -> None:
    """tensor-fusion pods: the shared GPUs each was given (``tensor-fusion.ai/gpu-ids``)."""
    shared = [p for p in pods if p.get("gpuIds")]
    if not shared:
        return
    table = Table(title="GPU shares", title_justify="left")
    for column in ("NAMESPACE", "NAME", "NODE", "GPUS"):
        table.add_column(column, overflow="fold")
    for pod in shared:
        table.add_row(pod["namespace"], pod["name"], fmt(pod["node"]), fmt(pod["gpuIds"]))
    console.print(table)


def print_report(
    out: dict[str, Any], *, explain: Callable[[Mapping[str, Any]], dict[str, Any] | None] | None = None
) -> None:
    """The report's tables; with ``explain`` (a pod's per-node detail, or None), each explained pod's
    detail after them, made and printed one pod at a time."""
    console = make_console()
    table = Table(title="Pods", title_justify="left")
    for column in ("NAMESPACE", "NAME", "PHASE", "NODE", "CARD TYPE", "OUTLOOK", "REASON"):
        table.add_column(column, overflow="fold")
    styles = {"Bound": "green", "Pending": "yellow", "Gated": "blue", "Preempted": "red", "Rejected": "red"}
    for pod in out["pods"]:
        table.add_row(
            pod["namespace"],
            pod["name"],
            f"[{styles.get(pod['phase'], '')}]{pod['phase']}[/]",
            fmt(pod["node"]),
            fmt(pod.get("cardType")),
            fmt(pod.get("outlook")),
            fmt(pod["reason"]),
        )
    console.print(table)
    bound = sum(1 for p in out["pods"] if p["phase"] == "Bound")
    console.print(f"{bound}/{len(out['pods'])} pods bound")
    for section, title, keys in (
        ("queues", "Queues", ("allocated", "capability", "inqueue")),
        ("elasticQuotas", "ElasticQuotas", ("used",)),
        ("podGroups", "PodGroups", ("phase",)),
        (
            "persistentVolumeClaims",
            "PersistentVolumeClaims",
            ("phase", "volume", "storageClass", "selectedNode"),
        ),
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
            cells = ([row["namespace"]] if named else []) + [row["name"]] + [fmt(row.get(k)) for k in keys]
            t.add_row(*cells)
        console.print(t)
    _print_claims(console, out.get("resourceClaims") or [])
    _print_gpu_shares(console, out["pods"])
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
                t.add_row(fmt(row["object"]), fmt(row["message"]))
            console.print(t)
    if explain is not None:
        for pod in out["pods"]:
            nodes = explain(pod)
            if nodes:
                print_explain({**pod, "nodes": nodes}, console)


def _print_claims(console: Console, rows: list[dict[str, Any]]) -> None:
    """DRA: each ResourceClaim, the devices allocated to it (a share with what it consumes) and the
    pods it is reserved for."""
    if not rows:
        return
    t = Table(title="ResourceClaims", title_justify="left")
    for column in ("NAMESPACE", "NAME", "DEVICES", "RESERVED FOR"):
        t.add_column(column, overflow="fold")
    for row in rows:
        devices = ", ".join(
            d["device"] + (f" ({fmt(d['consumedCapacity'])})" if d.get("consumedCapacity") else "")
            for d in row.get("devices") or ()
        )
        t.add_row(
            row["namespace"],
            row["name"],
            escape(devices) or "-",
            escape(", ".join(row["reservedFor"])) or "-",
        )
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
        available = fmt(status.get("availablePercent"))
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
        t.add_row(fmt(event["object"]), fmt(event["reason"]), fmt(event["message"]))
    console.print(t)


def print_explain(pod: dict[str, Any], console: Console | None = None, *, scores: bool = True) -> None:
    """One pod's verdict and, node by node, the filter that refused it or the plugins' scores (with
    ``scores``; without, only each node's total: ``kubectl gpuq explain`` without ``-o wide``)."""
    console = console or make_console()
    console.print(
        f"Pod {pod['namespace']}/{pod['name']}: {pod['phase']}"
        + (f" on {pod['node']}" if pod["node"] else "")
        + (f", sharing GPU {escape(str(pod['gpuIds']))}" if pod.get("gpuIds") else "")
        + (f" ({escape(pod['reason'])})" if pod["reason"] else "")
    )
    nodes = pod.get("nodes") or {}
    if not nodes:
        return
    plugins = sorted({p for n in nodes.values() for p in n["scores"]}) if scores else []
    table = Table(title_justify="left")
    table.add_column("NODE")
    table.add_column("FILTERED", overflow="fold")
    for plugin in plugins:
        table.add_column(plugin, justify="right")
    table.add_column("TOTAL", justify="right")
    for name, node in nodes.items():
        table.add_row(
            name, fmt(node["filtered"]), *[fmt(node["scores"].get(p)) for p in plugins], fmt(node["total"])
        )
    console.print(table)
