"""Fuzzing as a habit (design.md Semantics 17): each input boundary of gpuq, 10,000 generated examples
per boundary on every run, must end in a clean answer or a clean refusal, never another exception.

The boundaries, their strategies and what "clean" means are in :mod:`tests.fuzz.boundaries`
(``feed``: objects through ``Feed.apply`` to a real Scheduler, then enqueue, scheduling, status and
deletes; ``review``: AdmissionReview bodies through ``parse_review`` and admission's validate and
mutate; ``quantity``, ``json_text``, ``quote``: the primitive readers). ``python -m tests.fuzz
--examples 1000000`` is the long run of the same checks. What they found is pinned by named tests in
``test_hostile_input.py``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz.boundaries import BOUNDARIES, Boundary

EXAMPLES = 10_000


@pytest.mark.parametrize("boundary", BOUNDARIES, ids=lambda b: b.name)
def test_every_input_ends_in_a_clean_answer_or_a_clean_refusal(
    boundary: Boundary, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)  # malformed objects are logged as warnings, by design
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
