"""Fuzzing the HTTP boundaries (issue 24, design.md Semantics 17): 10,000 generated examples per
boundary on every run, each ending in a clean answer or a clean refusal (:mod:`tests.fuzz.http_boundaries`
says what that means for response bytes through gpuq's client parser and request bytes through the
webhook's server). ``python -m tests.fuzz --boundary http_response --boundary http_request`` is the
long run."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz.boundaries import Boundary
from tests.fuzz.http_boundaries import HTTP_BOUNDARIES

EXAMPLES = 10_000


@pytest.mark.parametrize("boundary", HTTP_BOUNDARIES, ids=lambda b: b.name)
def test_every_http_input_ends_in_a_clean_answer_or_a_clean_refusal(boundary: Boundary) -> None:
    ran = 0

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(boundary.cases)
    def check(case: Any) -> None:
        nonlocal ran
        ran += 1
        boundary.check(case)

    check()
    # Hypothesis stops early only when it has tried every distinct input a strategy can make.
    assert ran >= EXAMPLES, f"{boundary.name}: {ran} examples"
