"""The pod being scheduled, as crossquota sees it: whether it is a CPU pod, its request of the quota
resources, and its node-order strategy (crossquota.md "Scoring Strategies", "Strategy Selection").

A pod with DRA claims (``spec.resourceClaims``) is a GPU pod whatever its requests (issue 26): its
accelerators come as devices, not as an extended resource the patterns could match, and crossquota
limits only the CPU pods of a GPU node (design.md "DRA devices", "Quota over devices").

Where gpuq deliberately differs (design.md Semantics 3): a malformed
``volcano.sh/crossquota-scoring-strategy`` on a pod yields a Warning event on the pod and the default
``most-allocated`` (upstream defaults silently); the webhook denies it at creation through
:func:`parse_scoring_strategy`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.annotations import CROSSQUOTA_SCORING_STRATEGY
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.events import EventRecord, annotation_or_fallback
from gpuq_k8s.common.model.pods import PodInfo


class ScoringStrategy(enum.StrEnum):
    """The pod's node-order strategy ("Scoring Strategies")."""

    MOST_ALLOCATED = "most-allocated"
    LEAST_ALLOCATED = "least-allocated"


DEFAULT_SCORING_STRATEGY: Final = ScoringStrategy.MOST_ALLOCATED


def parse_scoring_strategy(value: str, where: str = "") -> ScoringStrategy:
    """The value of ``volcano.sh/crossquota-scoring-strategy``; raises :class:`InvalidAnnotation`."""
    try:
        return ScoringStrategy(value)
    except ValueError:
        expected = f"{ScoringStrategy.MOST_ALLOCATED.value} or {ScoringStrategy.LEAST_ALLOCATED.value}"
        raise InvalidAnnotation(CROSSQUOTA_SCORING_STRATEGY, value, expected, where) from None


def validate_pod_annotations(annotations: Mapping[str, str], where: str = "") -> None:
    """Webhook check: raise :class:`InvalidAnnotation` if the pod's scoring strategy is malformed."""
    value = annotations.get(CROSSQUOTA_SCORING_STRATEGY)
    if value is not None:
        parse_scoring_strategy(value, where)


@dataclass(frozen=True, slots=True)
class CrossQuotaPod:
    """What crossquota needs of the pod being scheduled, prepared once per scheduling attempt."""

    is_cpu_pod: bool
    request: npt.NDArray[np.int64]  # int64[R]
    strategy: ScoringStrategy
    events: tuple[EventRecord, ...] = ()


def prepare_pod(args: CrossQuotaArgs, pod: PodInfo) -> CrossQuotaPod:
    """Classify the pod and read its strategy; a malformed strategy annotation gives a Warning event
    on the pod and the default ``most-allocated``."""
    value = pod.annotations.get(CROSSQUOTA_SCORING_STRATEGY)
    default, consequence = DEFAULT_SCORING_STRATEGY, f"scoring with {DEFAULT_SCORING_STRATEGY.value}"
    strategy, event = annotation_or_fallback(pod.ref, value, parse_scoring_strategy, default, consequence)
    events = () if event is None else (event,)
    is_cpu_pod = args.is_cpu_pod(pod.requests) and not pod.resource_claims
    return CrossQuotaPod(is_cpu_pod, args.request_vector(pod.requests), strategy, events)
