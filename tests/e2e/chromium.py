"""Headless Chromium (Debian's ``chromium``) as the HTML report's tests and the README's picture use
it: no sandbox (root in CI), no GPU, no network of its own, a throw-away profile.

    python -m tests.e2e.chromium docs/simulate-report.png

renders ``gpuq simulate -f examples/heterogeneous-cluster -o html`` and takes the README's screenshot
with exactly the flags the browser test uses.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Final

CHROMIUM_FLAGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
WINDOW: Final = (1100, 1000)
ROOT: Final = Path(__file__).resolve().parents[2]


def screenshot(page: Path, out: Path, profile: Path) -> None:
    binary = shutil.which("chromium")
    if binary is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    subprocess.run(
        [
            binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={out.resolve()}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            page.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )


def chromium() -> str:
    found = shutil.which("chromium")
    assert found, "Debian's chromium is not installed (.ci/run installs it: apt-get install -y chromium)"
    return found


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


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "docs/simulate-report.png")
    html = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuq_k8s.cli",
            "simulate",
            "-f",
            str(ROOT / "examples" / "heterogeneous-cluster"),
            "-o",
            "html",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    with tempfile.TemporaryDirectory() as work:
        page = Path(work) / "report.html"
        page.write_text(html)
        screenshot(page, out, Path(work) / "profile")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
