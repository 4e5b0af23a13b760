"""Headless Chromium (Debian's ``chromium``) as the HTML report's tests and the README's picture use
it: no sandbox (root in CI), no GPU, no network of its own, a throw-away profile.

    python -m tests.e2e.chromium docs/simulate-report.png

renders ``gpuq simulate -f examples/heterogeneous-cluster -o html`` and takes the README's screenshot
with exactly the flags the browser test uses.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
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
