"""``gpuq simulate -o html`` rendered by a real browser: headless Chromium (Debian's ``chromium``,
installed by .ci/run) loads the self-contained page with the network off, dumps the DOM it built and
takes a screenshot. The test reads the grid, the bars and the pending reasons back from the DOM and
checks them against the JSON report, and decodes the PNG: the expected size, not blank, and the
colours of the bars and the "can never fit" badge are on it."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.chromium import CHROMIUM_FLAGS, WINDOW

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "heterogeneous-cluster"
BAR_BLUE = (0x3B, 0x82, 0xF6)
NEVER_RED = (0xB9, 0x1C, 0x1C)


def chromium() -> str:
    found = shutil.which("chromium")
    assert found, "Debian's chromium is not installed (.ci/run installs it: apt-get install -y chromium)"
    return found


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


def browse(tmp_path: Path, page: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *mode, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


class Elements(HTMLParser):
    """Every element's attributes, by tag, and the text of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def with_attribute(self, name: str) -> list[dict[str, str]]:
        return [attrs for _, attrs in self.found if name in attrs]


def png_pixels(data: bytes) -> tuple[int, int, set[tuple[int, int, int]]]:
    """Width, height and the set of colours of an 8-bit RGB/RGBA PNG (filters undone)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    colours: set[tuple[int, int, int]] = set()
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            upper_left = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - upper_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - upper_left)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else upper_left
                line[x] = (line[x] + predictor) & 0xFF
        colours.update(tuple(line[i : i + 3]) for i in range(0, stride, channels))  # type: ignore[misc]
        previous = line
    return width, height, colours


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
