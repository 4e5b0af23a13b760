"""A day in the life (issue 28), short: the code of ``python -m tests.e2e.day`` (tests/e2e/day/) with
the day compressed into 90 s: 100 kwok GPU nodes (800 GPUs), two training teams with ElasticQuotas,
inference Deployments scaled with the daylight, notebooks under a GPUResourceQuota, ETL pods on the
GPU nodes, about 400 jobs in bursts, every fault kind of the day at least once (kill -9, leader
switch, watch stall), the invariants checked after every step; it must end with no violation. Its
page is then opened in headless Chromium, and the DOM it built is checked against the run's data.
The long run (2,000 jobs and more) and its figures are in the README ("A day in the life")."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.e2e.chromium import WINDOW, Elements, browse, png_pixels
from tests.e2e.day.page import UTILISATION_COLOUR, render
from tests.e2e.day.run import FAULTS, Day, Options

pytestmark = pytest.mark.e2e


class Script(HTMLParser):
    """The text of the ``<script id="day-data">`` element."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = False
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.inside = tag == "script" and ("id", "day-data") in attrs

    def handle_endtag(self, tag: str) -> None:
        self.inside = False

    def handle_data(self, data: str) -> None:
        if self.inside:
            self.text += data


async def test_a_short_day_keeps_every_invariant_and_its_page_renders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines: list[str] = []
    options = Options(
        seed=28, jobs=400, minutes=1.5, nodes=100, fault_every=20.0, shortest=10.0, progress=lines.append
    )
    figures = await Day(options, workdir=tmp_path / "day").run()
    with capsys.disabled():
        print("\n" + "\n".join(f"  {line}" for line in figures.lines()))
    report = "\n".join([*lines, *figures.lines()])
    assert figures.violations == [], report
    assert all(figures.faults[kind] >= 1 for kind in FAULTS), figures.faults
    assert figures.checks >= 30, report  # a check every 3 s at worst, on a loaded machine
    assert figures.cache_checks >= 1, report  # the leader's state compared with its caches, no mismatch
    data = figures.data()
    # The day did something: jobs of every kind finished, pods of every queue waited and were bound.
    assert all(data["jobsCompleted"].get(kind, 0) >= 10 for kind in ("training", "etl", "notebook")), report
    assert {"training", "inference", "interactive", "(none)"} <= set(data["waits"]), report
    assert data["gpuUtilisation"]["peak"] > 0.2, report

    page = tmp_path / "day.html"
    page.write_text(render(data))
    text = page.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    dom = browse(tmp_path, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = Elements()
    parsed.feed(dom.stdout)
    series = {e["data-series"]: e for e in parsed.with_attribute("data-series")}
    samples = len(data["series"]["hour"])
    assert series["GPUs allocated / total"]["data-samples"] == str(samples)
    for queue, depth in data["series"]["depth"].items():
        assert series[queue]["data-samples"] == str(samples)
        assert float(series[queue]["data-max"]) == max(depth)
    rows = {
        r["data-queue"]: (float(r["data-p50"]), float(r["data-p99"]))
        for r in parsed.with_attribute("data-p50")
    }
    assert rows == {q: (w["p50"], w["p99"]) for q, w in data["waits"].items()}
    assert "0 violations" in "".join(parsed.text)
    embedded = Script()
    embedded.feed(dom.stdout)
    assert json.loads(embedded.text) == json.loads(json.dumps(data))  # the page's data is the run's

    shot = tmp_path / "day.png"
    taken = browse(tmp_path, page, f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}")
    assert taken.returncode == 0, taken.stderr[-2000:]
    width, height, colours = png_pixels(shot.read_bytes())
    assert (width, height) == WINDOW and len(colours) > 50
    blue = tuple(int(UTILISATION_COLOUR[i : i + 2], 16) for i in (1, 3, 5))
    assert blue in colours  # the utilisation line is drawn
