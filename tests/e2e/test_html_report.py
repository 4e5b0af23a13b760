"""``gpuq simulate -o html`` rendered by a real browser: headless Chromium (Debian's ``chromium``,
installed by .ci/run) loads the self-contained page with the network off, dumps the DOM it built and
takes a screenshot. The test reads the grid, the bars and the pending reasons back from the DOM and
checks them against the JSON report, and decodes the PNG: the expected size, not blank, and the
colours of the bars and the "can never fit" badge are on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.chromium import WINDOW, Elements, browse, png_pixels

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "heterogeneous-cluster"
BAR_BLUE = (0x3B, 0x82, 0xF6)
NEVER_RED = (0xB9, 0x1C, 0x1C)


def simulate(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "gpuq_k8s.cli", "simulate", "-f", str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_html_report_renders_in_a_browser(tmp_path: Path) -> None:
    report: dict[str, Any] = json.loads(simulate("-o", "json"))
    page = tmp_path / "report.html"
    page.write_text(simulate("-o", "html"))
    assert "http://" not in page.read_text() and "https://" not in page.read_text()  # self-contained

    dom = browse(tmp_path, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = Elements()
    parsed.feed(dom.stdout)
    cells = {
        (c["data-node"], c["data-card"]): (c["data-used"], c["data-capacity"])
        for c in parsed.with_attribute("data-card")
    }
    assert cells == {
        (node["name"], card): (str(usage["used"]), str(usage["capacity"]))
        for node in report["nodes"]
        for card, usage in node["cards"].items()
    }
    assert cells[("a100-1", "NVIDIA-A100")] == ("8", "8")
    bars = {
        (b["data-queue"], b["data-resource"]): (b["data-used"], b["data-limit"])
        for b in parsed.with_attribute("data-limit")
    }
    assert bars[("team-b", "NVIDIA-H100")] == ("4", "4")
    assert len(bars) == sum(len(q["capability"]) for q in report["queues"])
    outlooks = {row["data-pod"]: row["data-outlook"] for row in parsed.with_attribute("data-outlook")}
    assert outlooks == {
        f"{p['namespace']}/{p['name']}": p["outlook"] for p in report["pods"] if p["phase"] == "Pending"
    }
    assert outlooks["team-b/big-train-0"] == "never"
    assert "NVIDIA-H100 limit 4 would have to be at least 8" in "".join(parsed.text)

    shot = tmp_path / "report.png"
    taken = browse(tmp_path, page, f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}")
    assert taken.returncode == 0, taken.stderr[-2000:]
    width, height, colours = png_pixels(shot.read_bytes())
    assert (width, height) == WINDOW
    assert len(colours) > 50  # text, shading and bars: not a blank page
    assert BAR_BLUE in colours  # a queue's used bar
    assert NEVER_RED in colours  # the "can never fit" badge
