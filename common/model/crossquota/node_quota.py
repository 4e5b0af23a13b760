"""A GPU node's cross quota: how much of each quota resource its CPU pods may use together.

Spec: ``crossquota.md`` "Configuration Priority". Per resource, from the first source that applies:
node annotation ``volcano.sh/crossquota-<res>`` > node annotation
``volcano.sh/crossquota-percentage-<res>`` > argument ``quota.<res>`` > argument
``quota-percentage.<res>`` > the node's allocatable. The annotation key is the prefix followed by the
resource name verbatim, as upstream builds it, so a resource whose name contains ``/`` (an extended
resource) yields a key Kubernetes refuses; such resources can only be set through the arguments.

Where upstream behaviour is kept on purpose (each is pinned by a test):

* A percentage is of the node's allocatable, in (0, 100], and rounds *down* to gpuq's integer unit:
  with integer usage, ``used + req > floor(q)`` is exactly upstream's float test ``used + req > q``.
* The quota is not capped at allocatable (upstream does not cap it; the node's own fit check still
  applies).

Where gpuq deliberately differs (design.md Semantics 3): a malformed node annotation falls through to the
next source and yields a Warning event on the node (upstream sets the resource's quota to 0 and logs).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.annotations import CROSSQUOTA_PERCENTAGE_PREFIX, CROSSQUOTA_PREFIX
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs, parse_amount, parse_percentage
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.events import INVALID_ANNOTATION, EventRecord
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.resources import Resources


class QuotaSource(enum.StrEnum):
    """Which level of "Configuration Priority" set a node's quota for one resource."""

    NODE_ANNOTATION = "node-annotation"
    NODE_ANNOTATION_PERCENTAGE = "node-annotation-percentage"
    ARGUMENT = "argument"
    ARGUMENT_PERCENTAGE = "argument-percentage"
    ALLOCATABLE = "allocatable"


@dataclass(frozen=True, slots=True)
class NodeQuota:
    """A GPU node's cross quota: ``quota`` per quota resource, where each came from, and the Warning
    events for malformed node annotations that were skipped."""

    quota: Resources
    sources: Mapping[str, QuotaSource]
    events: tuple[EventRecord, ...] = ()

    def vector(self, args: CrossQuotaArgs) -> npt.NDArray[np.int64]:
        """int64[R] in ``args.quota_resources`` order."""
        return np.array([self.quota.amount(r) for r in args.quota_resources], dtype=np.int64)


def annotation_keys(resource: str) -> tuple[str, str]:
    """The node annotation keys overriding ``resource``: (absolute, percentage)."""
    return CROSSQUOTA_PREFIX + resource, CROSSQUOTA_PERCENTAGE_PREFIX + resource


def _percent_of(allocatable: int, pct: Fraction) -> int:
    return math.floor(allocatable * pct / 100)


def node_quota(args: CrossQuotaArgs, node: NodeInfo) -> NodeQuota:
    """The node's cross quota per quota resource from the five-level priority.

    Meaningful for GPU nodes only (the caller checks :meth:`CrossQuotaArgs.is_gpu_node`); computing
    it for any node is harmless.
    """
    quota: dict[str, int] = {}
    sources: dict[str, QuotaSource] = {}
    events: list[EventRecord] = []
    annotations = node.annotations
    for resource in args.quota_resources:
        allocatable = node.allocatable.amount(resource)
        absolute_key, percentage_key = annotation_keys(resource)
        value: int | None = None
        raw = annotations.get(absolute_key)
        if raw is not None and raw.strip():
            try:
                value = parse_amount(resource, absolute_key, raw.strip(), InvalidAnnotation)
                sources[resource] = QuotaSource.NODE_ANNOTATION
            except InvalidAnnotation as err:
                events.append(_annotation_warning(node, err))
        if value is None:
            raw = annotations.get(percentage_key)
            if raw is not None and raw.strip():
                try:
                    pct = parse_percentage(percentage_key, raw.strip(), InvalidAnnotation)
                    value = _percent_of(allocatable, pct)
                    sources[resource] = QuotaSource.NODE_ANNOTATION_PERCENTAGE
                except InvalidAnnotation as err:
                    events.append(_annotation_warning(node, err))
        if value is None and resource in args.quotas:
            value = args.quotas[resource]
            sources[resource] = QuotaSource.ARGUMENT
        if value is None and resource in args.quota_percentages:
            value = _percent_of(allocatable, args.quota_percentages[resource])
            sources[resource] = QuotaSource.ARGUMENT_PERCENTAGE
        if value is None:
            value = allocatable
            sources[resource] = QuotaSource.ALLOCATABLE
        quota[resource] = value
    return NodeQuota(Resources(quota), sources, tuple(events))


def _annotation_warning(node: NodeInfo, err: InvalidAnnotation) -> EventRecord:
    return EventRecord(
        obj=node.ref,
        type="Warning",
        reason=INVALID_ANNOTATION,
        message=f"{err.located(node.ref)}; ignored, the cross quota falls through to the next source",
    )
