"""``gpuq simulate -o html`` (scheduler/simulate/html.py) as a page: self-contained, escaped, and
carrying every figure in data attributes (the browser test renders it: tests/e2e/test_html_report.py)."""

from __future__ import annotations

import re
from typing import Any

from gpuq_k8s.scheduler.simulate.html import render

REPORT: dict[str, Any] = {
    "pods": [
        {"namespace": "ml", "name": "a", "phase": "Bound", "reason": None, "outlook": None},
        {"namespace": "ml", "name": "b<x>", "phase": "Pending", "reason": "0/1 <nodes>", "outlook": "never"},
        {"namespace": "ml", "name": "c", "phase": "Pending", "reason": "waits", "outlook": "wait"},
    ],
    "queues": [
        {
            "name": "q",
            "allocated": {"NVIDIA-A100": 4, "memory": 2**31},
            "capability": {"NVIDIA-A100": 4, "memory": 2**32},
            "inqueue": {"NVIDIA-A100": 2},
        }
    ],
    "nodes": [{"name": "n1", "cards": {"NVIDIA-A100": {"capacity": 8, "used": 4}}}],
}


def test_the_page_is_self_contained_and_escaped() -> None:
    page = render(REPORT)
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"(src|href)=|url\(|@import|<script", page)
    assert "b&lt;x&gt;" in page and "0/1 &lt;nodes&gt;" in page and "<nodes>" not in page
    assert '<p class="summary" id="summary">1/3 pods bound, 2 pending</p>' in page


def test_figures_are_in_data_attributes() -> None:
    page = render(REPORT)
    assert 'data-node="n1" data-card="NVIDIA-A100" data-used="4" data-capacity="8"' in page
    assert '<div class="bar" data-queue="q" data-resource="NVIDIA-A100" data-used="4" data-limit="4">' in page
    # A full queue's bar is red and capped at 100%; memory is shown in binary units.
    assert '<div class="fill full" style="width: 100.0%"></div></div><span>4 / 4, 2 inqueue</span>' in page
    assert "<span>2Gi / 4Gi</span>" in page
    assert 'data-pod="ml/b&lt;x&gt;" data-outlook="never"' in page
    assert '<span class="badge never">can never fit</span>' in page
    assert '<span class="badge wait">waits for room</span>' in page


def test_without_the_capacity_card_plugin_the_grid_says_so() -> None:
    page = render({k: v for k, v in REPORT.items() if k != "nodes"})
    assert "The capacity-card plugin is off." in page
    assert "data-card=" not in page


def test_a_pod_waiting_for_a_node_offering_its_card_type_says_so() -> None:
    """design.md Semantics 16: the badge of a pod whose card type no node offers yet."""
    pod = {
        "namespace": "ml",
        "name": "h100",
        "phase": "Pending",
        "outlook": "wait",
        "node": None,
        "reason": "0/1 nodes are available: Queue/q has quota for NVIDIA-H100, which no node offers yet "
        "(waits for a node offering NVIDIA-H100).",
    }
    page = render({**REPORT, "pods": [pod]})
    assert '<span class="badge wait">waits for a node</span>' in page
