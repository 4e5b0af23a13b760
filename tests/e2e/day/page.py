"""The day as one self-contained HTML page (inline CSS and SVG, no script, nothing fetched), drawn
from :meth:`tests.e2e.day.run.Figures.data`: the figures, GPU utilisation over the day, and the
pods waiting per queue over the day. Every chart carries its numbers in ``data-*`` attributes and
the data itself is embedded as JSON (``<script type="application/json" id="day-data">``), so a
browser's DOM can be checked against the run (``tests/e2e/test_day_short.py``)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

WIDTH: Final = 900
HEIGHT: Final = 220
PAD: Final = 40
COLOURS: Final = ("#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2")
UTILISATION_COLOUR: Final = "#2563eb"

STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #111827; background: #ffffff; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
table { border-collapse: collapse; font-size: 13px; } td, th { border: 1px solid #d1d5db; padding: 4px 8px; }
th { background: #f3f4f6; text-align: left; } .ok { color: #15803d; font-weight: 600; }
.bad { color: #b91c1c; font-weight: 600; } svg { background: #f9fafb; border: 1px solid #e5e7eb; }
.legend span { display: inline-block; margin-right: 16px; font-size: 13px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
"""


def _points(hours: Sequence[float], values: Sequence[float], top: float) -> str:
    plot_w, plot_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    top = top or 1.0
    return " ".join(
        f"{PAD + plot_w * h / 24.0:.1f},{PAD + plot_h * (1 - v / top):.1f}"
        for h, v in zip(hours, values, strict=True)
    )


def _axes(top: float, unit: str) -> str:
    plot_w, plot_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    parts = [
        f'<line x1="{PAD}" y1="{PAD + plot_h}" x2="{PAD + plot_w}" y2="{PAD + plot_h}" stroke="#6b7280"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{PAD + plot_h}" stroke="#6b7280"/>',
    ]
    for hour in range(0, 25, 3):
        x = PAD + plot_w * hour / 24.0
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - 12}" font-size="11" text-anchor="middle">{hour:02d}:00</text>'
        )
    label = f"{top:.0%}" if unit == "%" else f"{top:g}"
    parts.append(f'<text x="{PAD - 4}" y="{PAD + 4}" font-size="11" text-anchor="end">{label}</text>')
    parts.append(f'<text x="{PAD - 4}" y="{PAD + plot_h + 4}" font-size="11" text-anchor="end">0</text>')
    return "".join(parts)


def _chart(
    name: str, hours: Sequence[float], lines: Mapping[str, Sequence[float]], top: float, unit: str
) -> str:
    body = [_axes(top, unit)]
    for i, (label, values) in enumerate(lines.items()):
        colour = UTILISATION_COLOUR if name == "utilisation" else COLOURS[i % len(COLOURS)]
        body.append(
            f'<polyline class="series" data-series="{html.escape(label)}" data-samples="{len(values)}" '
            f'data-max="{max(values, default=0):g}" fill="none" stroke="{colour}" stroke-width="2" '
            f'points="{_points(hours, values, top)}"/>'
        )
    return (
        f'<svg id="{name}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img">{"".join(body)}</svg>'
    )


def _legend(labels: Sequence[str]) -> str:
    items = "".join(
        f'<span><i class="swatch" style="background:{COLOURS[i % len(COLOURS)]}"></i>'
        f"{html.escape(label)}</span>"
        for i, label in enumerate(labels)
    )
    return f'<div class="legend">{items}</div>'


def _row(*cells: Any, header: bool = False) -> str:
    tag = "th" if header else "td"
    return "<tr>" + "".join(f"<{tag}>{html.escape(str(c))}</{tag}>" for c in cells) + "</tr>"


def render(data: Mapping[str, Any]) -> str:
    series = data["series"]
    hours = series["hour"]
    depth: Mapping[str, Sequence[float]] = series["depth"]
    deepest = max((max(v, default=0) for v in depth.values()), default=0)
    violations = data["violations"]
    verdict = (
        '<span class="ok" id="verdict">0 violations</span>'
        if not violations
        else f'<span class="bad" id="verdict">{len(violations)} violations</span>'
    )
    figures = [
        _row("figure", "value", header=True),
        _row("nodes / GPUs", f"{data['nodes']} / {data['gpus']}"),
        _row("jobs completed", data["jobsCompletedTotal"]),
        *(
            _row(f"  {kind}", f"{done} of {data['jobsSubmitted'].get(kind, 0)} submitted")
            for kind, done in data["jobsCompleted"].items()
        ),
        _row("GPU utilisation, mean", f"{data['gpuUtilisation']['mean']:.1%}"),
        _row("GPU utilisation, peak", f"{data['gpuUtilisation']['peak']:.1%}"),
        _row("preemptions", data["preemptions"]),
        _row("faults", ", ".join(f"{k} {v}" for k, v in data["faults"].items())),
        _row("invariant checks", data["checks"]),
        _row("leader state compared with its caches", data.get("cacheChecks", 0)),
        _row("violations", len(violations)),
        _row("wall time", f"{data['wallSeconds']:.0f} s"),
    ]
    waits = [_row("queue", "pods bound", "p50 wait", "p99 wait", header=True)] + [
        f'<tr data-queue="{html.escape(q)}" data-p50="{w["p50"]:g}" data-p99="{w["p99"]:g}">'
        f"<td>{html.escape(q)}</td><td>{w['pods']}</td>"
        f"<td>{w['p50']:.0f} s</td><td>{w['p99']:.0f} s</td></tr>"
        for q, w in data["waits"].items()
    ]
    utilisation = _chart("utilisation", hours, {"GPUs allocated / total": series["utilisation"]}, 1.0, "%")
    queues = _chart("depth", hours, depth, float(max(deepest, 1)), "pods")
    embedded = json.dumps(data, sort_keys=True).replace("</", "<\\/")
    listed = "".join(f"<li>{html.escape(v)}</li>" for v in violations) or "<li>none</li>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gpuq: a day in the life (seed {data["seed"]})</title>
<style>{STYLE}</style></head><body>
<h1>gpuq: a day in the life</h1>
<p>seed {data["seed"]} &middot; {data["nodes"]} kwok nodes, {data["gpus"]} GPUs &middot; {verdict}</p>
<h2>Figures</h2><table id="figures">{"".join(figures)}</table>
<h2>Waits from creation to bind, per queue</h2><table id="waits">{"".join(waits)}</table>
<h2>GPU utilisation (allocated / total) over the day</h2>{utilisation}
<h2>Pods waiting per queue over the day</h2>{_legend(list(depth))}{queues}
<h2>Violations</h2><ul id="violations">{listed}</ul>
<script type="application/json" id="day-data">{embedded}</script>
</body></html>
"""
