"""``gpuq simulate -o html``: the report as one self-contained HTML page (inline CSS, no script, no
external fetch), to open in a browser or attach to a ticket.

- a nodes x card types utilisation grid (``used/capacity`` per cell, shaded by the ratio);
- per queue and resource of its capability, a used / limit bar (``allocated`` of ``capability``;
  what Inqueue PodGroups reserved is shown beside it);
- the pending pods, each with its outlook ("can never fit", "waits for room" or "waits for a node") and
  its reason, and the gated ones (``spec.schedulingGates``, never attempted) with the gates they wait for.

Each figure is also in ``data-*`` attributes, so a test (or a script) reads the values, not pixels.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any, Final

from gpuq_k8s.common.model.outlook import NEVER, NODE_TEXT
from gpuq_k8s.common.model.quantity import format_bytes, unit_of

STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2330; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.summary { color: #555; }
table { border-collapse: collapse; }
th, td { border: 1px solid #d0d5dd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f2f4f7; }
td.cell { text-align: center; min-width: 90px; font-variant-numeric: tabular-nums; }
td.none { background: #fafafa; color: #aaa; }
.bars { display: grid; grid-template-columns: max-content 320px max-content; gap: 6px 12px;
  align-items: center; }
.bar { position: relative; height: 16px; background: #eef1f5; border: 1px solid #c5ccd6; }
.fill { position: absolute; left: 0; top: 0; bottom: 0; background: #3b82f6; }
.fill.full { background: #ef4444; }
td.pod { white-space: nowrap; }
.badge { white-space: nowrap; display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px;
  color: #fff; }
.badge.never { background: #b91c1c; } .badge.wait { background: #b45309; }
.badge.none { background: #6b7280; } .badge.gated { background: #1d4ed8; }
"""


def _shade(ratio: float) -> str:
    """White at 0, blue at 1, red when over."""
    if ratio > 1:
        return "#fca5a5"
    light = int(255 - ratio * 150)
    return f"rgb({light}, {min(255, light + 20)}, 255)"


def _number(value: Any) -> str:
    return escape(str(value))


def _shown(resource: str, amount: Any) -> str:
    """An amount as people read it: bytes with a binary suffix (64Gi)."""
    if unit_of(resource) == "bytes" and isinstance(amount, int):
        return escape(format_bytes(amount))
    return _number(amount)


def _grid(nodes: list[Mapping[str, Any]]) -> str:
    cards = sorted({card for node in nodes for card in node["cards"]})
    if not cards:
        return '<p class="summary">No node has GPU cards.</p>'
    head = "".join(f"<th>{escape(card)}</th>" for card in cards)
    rows = []
    for node in nodes:
        cells = []
        for card in cards:
            usage = node["cards"].get(card)
            if usage is None:
                cells.append('<td class="cell none">-</td>')
                continue
            used, capacity = usage["used"], usage["capacity"]
            ratio = used / capacity if capacity else 0.0
            cells.append(
                f'<td class="cell" data-node="{escape(node["name"])}" data-card="{escape(card)}" '
                f'data-used="{_number(used)}" data-capacity="{_number(capacity)}" '
                f'style="background: {_shade(ratio)}">{_number(used)}/{_number(capacity)}</td>'
            )
        rows.append(f"<tr><th>{escape(node['name'])}</th>{''.join(cells)}</tr>")
    return f'<table id="grid"><tr><th>node</th>{head}</tr>{"".join(rows)}</table>'


def _bars(queues: list[Mapping[str, Any]]) -> str:
    if not queues:
        return '<p class="summary">No queues.</p>'
    items = []
    for queue in queues:
        capability: Mapping[str, Any] = queue.get("capability") or {}
        allocated: Mapping[str, Any] = queue.get("allocated") or {}
        inqueue: Mapping[str, Any] = queue.get("inqueue") or {}
        for resource in sorted(capability):
            limit, used = capability[resource], allocated.get(resource, 0)
            width = min(100.0, 100.0 * used / limit) if limit else 100.0
            full = " full" if used >= limit else ""
            extra = f", {_number(inqueue[resource])} inqueue" if inqueue.get(resource) else ""
            items.append(
                f"<span>{escape(queue['name'])} {escape(resource)}</span>"
                f'<div class="bar" data-queue="{escape(queue["name"])}" data-resource="{escape(resource)}" '
                f'data-used="{_number(used)}" data-limit="{_number(limit)}">'
                f'<div class="fill{full}" style="width: {width:.1f}%"></div></div>'
                f"<span>{_shown(resource, used)} / {_shown(resource, limit)}{extra}</span>"
            )
    return f'<div class="bars" id="queues">{"".join(items)}</div>'


def _pending(pods: list[Mapping[str, Any]]) -> str:
    waiting = [p for p in pods if p["phase"] in ("Pending", "Gated")]
    if not waiting:
        return '<p class="summary">Every pod is placed.</p>'
    rows = []
    for pod in waiting:
        outlook = pod.get("outlook")
        label = {NEVER: "can never fit"}.get(outlook or "", "waits for room" if outlook else "pending")
        if outlook and NODE_TEXT in (pod.get("reason") or ""):
            label = "waits for a node"  # a card type no node offers yet (design.md Semantics 16)
        kind = outlook or "none"
        if pod["phase"] == "Gated":  # spec.schedulingGates: never attempted until they are removed
            label = kind = "gated"
        rows.append(
            f'<tr data-pod="{escape(pod["namespace"])}/{escape(pod["name"])}" data-outlook="{escape(kind)}">'
            f'<td class="pod">{escape(pod["namespace"])}/{escape(pod["name"])}</td>'
            f'<td><span class="badge {escape(kind)}">{label}</span></td>'
            f"<td>{escape(pod.get('reason') or '')}</td></tr>"
        )
    return f'<table id="pending"><tr><th>pod</th><th>outlook</th><th>reason</th></tr>{"".join(rows)}</table>'


def _claims(rows: list[Mapping[str, Any]]) -> str:
    """DRA: each ResourceClaim with its devices (a share with what it consumes) and its pods."""
    if not rows:
        return ""
    cells = []
    for row in rows:
        devices = ", ".join(
            str(d["device"])
            + (
                " (" + ", ".join(f"{k} {v}" for k, v in d["consumedCapacity"].items()) + ")"
                if d.get("consumedCapacity")
                else ""
            )
            for d in row.get("devices") or ()
        )
        cells.append(
            f'<tr data-claim="{escape(row["namespace"])}/{escape(row["name"])}">'
            f'<td class="pod">{escape(row["namespace"])}/{escape(row["name"])}</td>'
            f"<td>{escape(devices) or 'not allocated'}</td>"
            f"<td>{escape(', '.join(row.get('reservedFor') or ()))}</td></tr>"
        )
    return (
        '<h2>ResourceClaims: devices allocated</h2><table id="claims"><tr><th>claim</th><th>devices</th>'
        f"<th>reserved for</th></tr>{''.join(cells)}</table>"
    )


def _gpu_shares(pods: list[Mapping[str, Any]]) -> str:
    """tensor-fusion pods: the shared GPUs each was given (design.md Semantics 19)."""
    cells = [
        f'<tr data-pod="{escape(p["namespace"])}/{escape(p["name"])}">'
        f'<td class="pod">{escape(p["namespace"])}/{escape(p["name"])}</td>'
        f"<td>{escape(str(p['gpuIds']))}</td></tr>"
        for p in pods
        if p.get("gpuIds")
    ]
    if not cells:
        return ""
    return (
        '<h2>GPU shares: devices given</h2><table id="gpu-shares"><tr><th>pod</th><th>GPUs</th></tr>'
        f"{''.join(cells)}</table>"
    )


def render(out: Mapping[str, Any], title: str = "gpuq simulate") -> str:
    """The page for a report of :func:`scheduler.simulate.run.report`."""
    pods: list[Mapping[str, Any]] = out.get("pods") or []
    bound = sum(1 for p in pods if p["phase"] == "Bound")
    pending = sum(1 for p in pods if p["phase"] == "Pending")
    gated = sum(1 for p in pods if p["phase"] == "Gated")
    cards = (
        _grid(out["nodes"]) if "nodes" in out else '<p class="summary">The capacity-card plugin is off.</p>'
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        f'<p class="summary" id="summary">{bound}/{len(pods)} pods bound, {pending} pending'
        + (f", {gated} gated" if gated else "")
        + "</p>"
        f"<h2>Cards: used / capacity per node</h2>{cards}"
        f"<h2>Queues: allocated / capability</h2>{_bars(out.get('queues') or [])}"
        f"<h2>Pending pods</h2>{_pending(pods)}"
        f"{_claims(out.get('resourceClaims') or [])}"
        f"{_gpu_shares(pods)}"
        "</body></html>\n"
    )
