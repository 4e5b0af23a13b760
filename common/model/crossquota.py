"""Cross quota: how much of a GPU node non-GPU ("CPU") pods may take, and where they should go.

Spec: ``crossquota.md`` (Volcano's ``crossquota`` plugin, PR #4551). A *GPU node* has an allocatable
resource matching one of the ``gpu-resource-names`` patterns; a *CPU pod* requests none. On a GPU
node the CPU pods together may use at most the node's *cross quota* of each ``quota-resources``
resource (predicate), and are steered by a most- or least-allocated score against that quota (node
order). Everything else passes the filter and scores 0.

Where upstream behaviour is kept on purpose (each is pinned by a test):

* ``gpu-resource-names`` are regular expressions searched anywhere in the resource name, like Go's
  ``regexp.MatchString`` (unanchored): ``nvidia.com/gpu`` also matches ``nvidia.com/gpu-a100``.
  Anchor with ``^...$`` for an exact match.
* A pod is classified by its requested *extended* resources only (upstream looks at
  ``Resreq.ScalarResources``): ``cpu`` and ``memory`` never make a pod a GPU pod, whatever the patterns.
  gpuq additionally ignores zero requests (``nvidia.com/gpu: 0`` asks for no GPU; DESIGN Semantics 8).
* Node quota, per resource, from the first source that applies ("Configuration Priority"):
  node annotation ``volcano.sh/crossquota-<res>`` > node annotation
  ``volcano.sh/crossquota-percentage-<res>`` > argument ``quota.<res>`` > argument
  ``quota-percentage.<res>`` > the node's allocatable. The annotation key is the prefix followed by the
  resource name verbatim, as upstream builds it, so a resource whose name contains ``/`` (an extended
  resource) yields a key Kubernetes refuses; such resources can only be set through the arguments.
* A percentage is of the node's allocatable, in (0, 100], and rounds *down* to gpuq's integer unit:
  with integer usage, ``used + req > floor(q)`` is exactly upstream's float test ``used + req > q``.
* The quota is not capped at allocatable (upstream does not cap it; the node's own fit check still
  applies).
* Score: a resource with quota 0 scores 0 but keeps its weight; if any requested resource would go
  over its quota the whole node scores 0 (upstream's ``calculateResourceScore`` error path).

Where gpuq deliberately differs (DESIGN Semantics 3, "Scheduler configuration"):

* Invalid arguments are a :class:`ConfigError` (upstream logs and skips them), including unknown keys,
  ``quota.*``/``weight.*`` for a resource missing from ``quota-resources`` (upstream silently ignores
  those) and a missing ``gpu-resource-names`` (upstream then silently disables the plugin).
* A malformed node annotation falls through to the next source and yields a Warning event on the node
  (upstream sets the resource's quota to 0 and logs).
* A malformed ``volcano.sh/crossquota-scoring-strategy`` on a pod yields a Warning event on the pod and
  the default ``most-allocated`` (upstream defaults silently); the webhook denies it at creation
  through :func:`parse_scoring_strategy`.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, PrivateAttr

from common.model import wire
from common.model.allocation import Term, row_sums, weighted_ratio_rows, weighted_ratios
from common.model.annotations import (
    CROSSQUOTA_PERCENTAGE_PREFIX,
    CROSSQUOTA_PREFIX,
    CROSSQUOTA_SCORING_STRATEGY,
)
from common.model.errors import ConfigError, InvalidAnnotation, InvalidValue
from common.model.events import INVALID_ANNOTATION, EventRecord
from common.model.nodes import NodeInfo
from common.model.pods import PodInfo
from common.model.quantity import CPU, EXPECTED_QUANTITY, MEMORY, format_units, to_units
from common.model.resources import Resources

# Argument keys ("Constants").
GPU_RESOURCE_NAMES: Final = "gpu-resource-names"
QUOTA_RESOURCES: Final = "quota-resources"
QUOTA_PREFIX: Final = "quota."
QUOTA_PERCENTAGE_PREFIX: Final = "quota-percentage."
WEIGHT_PREFIX: Final = "weight."
CROSS_QUOTA_WEIGHT: Final = "crossQuotaWeight"

DEFAULT_QUOTA_RESOURCES: Final = (CPU,)
DEFAULT_CROSS_QUOTA_WEIGHT: Final = 10
# Upstream's defaults; any other quota resource weighs 1 (calculateScore's fallback).
DEFAULT_RESOURCE_WEIGHTS: Final = {CPU: 10, MEMORY: 1}
DEFAULT_OTHER_WEIGHT: Final = 1

EXPECTED_PERCENTAGE: Final = "a percentage in (0, 100], such as 50 or 12.5"
EXPECTED_WEIGHT: Final = f"an integer from 0 to {wire.MAX_WEIGHT}"
# Resources that never classify a pod as a GPU pod (upstream only looks at scalar resources).
_CORE_RESOURCES: Final = frozenset({CPU, MEMORY})
_PERCENT_RE: Final = re.compile(r"^[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")


class ScoringStrategy(enum.StrEnum):
    """The pod's node-order strategy ("Scoring Strategies")."""

    MOST_ALLOCATED = "most-allocated"
    LEAST_ALLOCATED = "least-allocated"


DEFAULT_SCORING_STRATEGY: Final = ScoringStrategy.MOST_ALLOCATED


class QuotaSource(enum.StrEnum):
    """Which level of "Configuration Priority" set a node's quota for one resource."""

    NODE_ANNOTATION = "node-annotation"
    NODE_ANNOTATION_PERCENTAGE = "node-annotation-percentage"
    ARGUMENT = "argument"
    ARGUMENT_PERCENTAGE = "argument-percentage"
    ALLOCATABLE = "allocatable"


# --------------------------------------------------------------------------------------------------
# Arguments


class CrossQuotaArgs(BaseModel):
    """The ``crossquota`` plugin arguments, validated ("Configuration Parser").

    Build with :meth:`from_arguments` (Volcano's flat argument map); amounts are in gpuq's integer
    units. ``quota_resources`` fixes the column order R of every array this module takes or returns.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    gpu_resource_patterns: tuple[re.Pattern[str], ...]
    quota_resources: tuple[str, ...] = DEFAULT_QUOTA_RESOURCES
    quotas: dict[str, int] = {}
    quota_percentages: dict[str, Fraction] = {}
    plugin_weight: int = DEFAULT_CROSS_QUOTA_WEIGHT
    resource_weights: dict[str, int] = {}

    _gpu_memo: dict[str, bool] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any] | None) -> CrossQuotaArgs:
        """Parse Volcano's argument map; raises :class:`ConfigError` naming the argument key."""
        return parse_arguments(arguments)

    # -- classification ("Node and Pod Detection")

    def is_gpu_resource(self, name: str) -> bool:
        """``name`` matches a ``gpu-resource-names`` pattern (unanchored search, memoised)."""
        known = self._gpu_memo.get(name)
        if known is None:
            known = any(p.search(name) for p in self.gpu_resource_patterns)
            self._gpu_memo[name] = known
        return known

    def is_gpu_node(self, allocatable: Iterable[str]) -> bool:
        """Any allocatable resource name (keys of ``NodeInfo.allocatable``) matches a pattern."""
        return any(self.is_gpu_resource(name) for name in allocatable)

    def is_cpu_pod(self, requests: Mapping[str, int]) -> bool:
        """The pod requests (> 0) no extended resource matching a pattern."""
        return not any(
            amount > 0 and name not in _CORE_RESOURCES and self.is_gpu_resource(name)
            for name, amount in requests.items()
        )

    # -- vectors over the quota resources (R = len(quota_resources))

    def weight_of(self, resource: str) -> int:
        return self.resource_weights.get(resource, DEFAULT_OTHER_WEIGHT)

    def weights(self) -> npt.NDArray[np.float64]:
        """Resource weights, float64[R] in ``quota_resources`` order."""
        return np.array([self.weight_of(r) for r in self.quota_resources], dtype=np.float64)

    def request_vector(self, requests: Mapping[str, int]) -> npt.NDArray[np.int64]:
        """The quota resources of ``requests``, int64[R]."""
        return np.array([requests.get(r, 0) for r in self.quota_resources], dtype=np.int64)

    def usage_vector(self, requests: Mapping[str, int]) -> npt.NDArray[np.int64]:
        """What a pod holding ``requests`` adds to a GPU node's cross-quota usage, int64[R].

        Zero for a GPU pod: only CPU pods count against the cross quota.
        """
        if not self.is_cpu_pod(requests):
            return np.zeros(len(self.quota_resources), dtype=np.int64)
        return self.request_vector(requests)


def parse_arguments(arguments: Mapping[str, Any] | None) -> CrossQuotaArgs:
    """Validate Volcano's flat ``crossquota`` argument map (the scheduler-config entry point).

    Raises :class:`ConfigError` whose ``field`` is the argument key (``quota.cpu``) and whose value is
    the offending value; nothing invalid is skipped or replaced by a default.
    """
    args = dict(arguments or {})
    for key, value in args.items():
        if not isinstance(key, str):
            raise ConfigError(str(key), value, "an argument name (a string)")

    patterns = _parse_patterns(args.get(GPU_RESOURCE_NAMES))
    quota_resources = _parse_quota_resources(args.get(QUOTA_RESOURCES))
    quotas: dict[str, int] = {}
    percentages: dict[str, Fraction] = {}
    weights: dict[str, int] = {r: w for r, w in DEFAULT_RESOURCE_WEIGHTS.items() if r in quota_resources}
    plugin_weight = DEFAULT_CROSS_QUOTA_WEIGHT

    for key, value in args.items():
        if key in (GPU_RESOURCE_NAMES, QUOTA_RESOURCES):
            continue
        if key == CROSS_QUOTA_WEIGHT:
            plugin_weight = _parse_weight(key, value)
        elif key.startswith(QUOTA_PERCENTAGE_PREFIX):
            resource = _resource_of(key, QUOTA_PERCENTAGE_PREFIX, value, quota_resources)
            percentages[resource] = _parse_percentage(key, value, ConfigError)
        elif key.startswith(QUOTA_PREFIX):
            resource = _resource_of(key, QUOTA_PREFIX, value, quota_resources)
            quotas[resource] = _parse_amount(resource, key, value, ConfigError)
        elif key.startswith(WEIGHT_PREFIX):
            resource = _resource_of(key, WEIGHT_PREFIX, value, quota_resources)
            weights[resource] = _parse_weight(key, value)
        else:
            raise ConfigError(
                key,
                value,
                f"one of the crossquota arguments {GPU_RESOURCE_NAMES}, {QUOTA_RESOURCES}, "
                f"{CROSS_QUOTA_WEIGHT}, {QUOTA_PREFIX}<resource>, {QUOTA_PERCENTAGE_PREFIX}<resource>, "
                f"{WEIGHT_PREFIX}<resource>",
            )
    return CrossQuotaArgs(
        gpu_resource_patterns=patterns,
        quota_resources=quota_resources,
        quotas=quotas,
        quota_percentages=percentages,
        plugin_weight=plugin_weight,
        resource_weights=weights,
    )


def _split_list(key: str, value: Any, expected: str) -> list[str]:
    if not isinstance(value, str):
        raise ConfigError(key, value, expected)
    # A trailing or doubled comma is harmless punctuation, not a value, so empty items are dropped.
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise ConfigError(key, value, expected)
    return items


def _parse_patterns(value: Any) -> tuple[re.Pattern[str], ...]:
    expected = "comma-separated regular expressions of GPU resource names, such as nvidia.com/gpu,amd.com/gpu"
    if value is None:
        # Upstream silently disables the plugin without patterns; an enabled plugin that does nothing
        # is a misconfiguration.
        raise ConfigError(GPU_RESOURCE_NAMES, None, f"{expected} (required)")
    patterns: list[re.Pattern[str]] = []
    for item in _split_list(GPU_RESOURCE_NAMES, value, expected):
        try:
            patterns.append(re.compile(item))
        except re.error as err:
            raise ConfigError(GPU_RESOURCE_NAMES, item, f"a valid regular expression ({err})") from None
    return tuple(patterns)


def _parse_quota_resources(value: Any) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_QUOTA_RESOURCES
    expected = "comma-separated resource names, such as cpu,memory"
    resources: list[str] = []
    for item in _split_list(QUOTA_RESOURCES, value, expected):
        if not wire.RESOURCE_NAME_RE.match(item):
            raise ConfigError(QUOTA_RESOURCES, item, "a Kubernetes resource name such as cpu or memory")
        if item in resources:
            raise ConfigError(QUOTA_RESOURCES, value, f"{expected}, each at most once ({item!r} repeats)")
        resources.append(item)
    return tuple(resources)


def _resource_of(key: str, prefix: str, value: Any, quota_resources: Sequence[str]) -> str:
    resource = key[len(prefix) :]
    if resource not in quota_resources:
        # Upstream parses and then never uses such a key; say so instead of ignoring it.
        listed = ",".join(quota_resources)
        raise ConfigError(
            key, value, f"a resource listed in {QUOTA_RESOURCES} ({listed}); add {resource!r} there first"
        )
    return resource


def _parse_amount(resource: str, field: str, value: Any, error: type[InvalidValue]) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise error(field, value, EXPECTED_QUANTITY)
    try:
        amount = to_units(resource, value, field)
    except InvalidValue:
        raise error(field, value, EXPECTED_QUANTITY) from None
    if amount < 0:
        raise error(field, value, f"a non-negative amount ({EXPECTED_QUANTITY})")
    return amount


def _parse_percentage(field: str, value: Any, error: type[InvalidValue]) -> Fraction:
    if isinstance(value, bool):
        raise error(field, value, EXPECTED_PERCENTAGE)
    if isinstance(value, int):
        pct = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise error(field, value, EXPECTED_PERCENTAGE)
        pct = Fraction(repr(value))
    elif isinstance(value, str) and _PERCENT_RE.match(value.strip()):
        pct = Fraction(value.strip())
    else:
        raise error(field, value, EXPECTED_PERCENTAGE)
    if not 0 < pct <= 100:
        raise error(field, value, EXPECTED_PERCENTAGE)
    return pct


def _parse_weight(field: str, value: Any) -> int:
    # 0 is allowed (upstream: a zero crossQuotaWeight disables node ordering, a zero resource weight
    # drops the resource from the score); the upper bound keeps float64 scores finite.
    return wire.weight(value, field, ConfigError, minimum=0)


# --------------------------------------------------------------------------------------------------
# Node quota ("Configuration Priority")


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
                value = _parse_amount(resource, absolute_key, raw.strip(), InvalidAnnotation)
                sources[resource] = QuotaSource.NODE_ANNOTATION
            except InvalidAnnotation as err:
                events.append(_annotation_warning(node, err))
        if value is None:
            raw = annotations.get(percentage_key)
            if raw is not None and raw.strip():
                try:
                    pct = _parse_percentage(percentage_key, raw.strip(), InvalidAnnotation)
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


def validate_node_annotations(args: CrossQuotaArgs, annotations: Mapping[str, str], where: str = "") -> None:
    """Raise :class:`InvalidAnnotation` for the first malformed cross-quota annotation of a node.

    Only the quota resources' keys are checked: other ``volcano.sh/crossquota-*`` keys are not read.
    """
    for resource in args.quota_resources:
        absolute_key, percentage_key = annotation_keys(resource)
        try:
            if (raw := annotations.get(absolute_key)) is not None and raw.strip():
                _parse_amount(resource, absolute_key, raw.strip(), InvalidAnnotation)
            if (raw := annotations.get(percentage_key)) is not None and raw.strip():
                _parse_percentage(percentage_key, raw.strip(), InvalidAnnotation)
        except InvalidAnnotation as err:
            raise err.located(where) from None


@dataclass(frozen=True, slots=True)
class NodeArrays:
    """Per-node inputs of the vectorised forms, for nodes in a fixed order N."""

    is_gpu_node: npt.NDArray[np.bool_]  # bool[N]
    quota: npt.NDArray[np.int64]  # int64[N, R]; rows of non-GPU nodes are unused
    events: tuple[EventRecord, ...]


def node_arrays(args: CrossQuotaArgs, nodes: Sequence[NodeInfo]) -> NodeArrays:
    """Classify and compute the quota of every node (the scheduler refreshes a row on node update)."""
    r = len(args.quota_resources)
    is_gpu = np.zeros(len(nodes), dtype=np.bool_)
    quota = np.zeros((len(nodes), r), dtype=np.int64)
    events: list[EventRecord] = []
    for i, node in enumerate(nodes):
        if args.is_gpu_node(node.allocatable):
            is_gpu[i] = True
            nq = node_quota(args, node)
            quota[i] = nq.vector(args)
            events.extend(nq.events)
    return NodeArrays(is_gpu, quota, tuple(events))


def cpu_pod_usage(args: CrossQuotaArgs, pods: Iterable[PodInfo]) -> Resources:
    """Usage of a node's cross quota: the quota resources requested by its CPU pods that hold
    resources (bound and not finished)."""
    total: dict[str, int] = dict.fromkeys(args.quota_resources, 0)
    for pod in pods:
        if pod.holds_resources and args.is_cpu_pod(pod.requests):
            for r in args.quota_resources:
                total[r] += pod.requests.amount(r)
    return Resources(total)


# --------------------------------------------------------------------------------------------------
# Pod-level strategy


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
    strategy = DEFAULT_SCORING_STRATEGY
    events: tuple[EventRecord, ...] = ()
    value = pod.annotations.get(CROSSQUOTA_SCORING_STRATEGY)
    if value is not None:
        try:
            strategy = parse_scoring_strategy(value, pod.ref)
        except InvalidAnnotation as err:
            message = f"{err}; scoring with {DEFAULT_SCORING_STRATEGY.value}"
            events = (EventRecord(pod.ref, "Warning", INVALID_ANNOTATION, message),)
    return CrossQuotaPod(args.is_cpu_pod(pod.requests), args.request_vector(pod.requests), strategy, events)


# --------------------------------------------------------------------------------------------------
# Predicate


@dataclass(frozen=True, slots=True)
class QuotaViolation:
    """The first quota resource a CPU pod would take over a GPU node's cross quota."""

    resource: str
    required: int
    used: int
    quota: int

    @property
    def message(self) -> str:
        """``<res> quota exceeded: required=<q> used=<q> quota=<q>`` (DESIGN), canonical quantities."""
        r = self.resource
        return (
            f"{r} quota exceeded: required={format_units(r, self.required)} "
            f"used={format_units(r, self.used)} quota={format_units(r, self.quota)}"
        )


def check_node(
    args: CrossQuotaArgs,
    requests: Mapping[str, int],
    *,
    node_is_gpu: bool,
    quota: Mapping[str, int],
    used: Mapping[str, int],
) -> QuotaViolation | None:
    """Scalar predicate ("Predicate Function"): None if the pod fits, else the first violation in
    ``quota-resources`` order. ``used`` is the node's CPU-pod usage (:func:`cpu_pod_usage`)."""
    if not node_is_gpu or not args.is_cpu_pod(requests):
        return None
    for r in args.quota_resources:
        required, in_use, limit = requests.get(r, 0), used.get(r, 0), quota.get(r, 0)
        if in_use + required > limit:
            return QuotaViolation(r, required, in_use, limit)
    return None


@dataclass(frozen=True, slots=True)
class FilterResult:
    """Vectorised predicate result: ``fits[N]``, and the reason for a rejected node on demand."""

    fits: npt.NDArray[np.bool_]
    _resources: tuple[str, ...]
    _request: npt.NDArray[np.int64]
    _used: npt.NDArray[np.int64]
    _quota: npt.NDArray[np.int64]

    def violation(self, node_index: int) -> QuotaViolation | None:
        if self.fits[node_index]:
            return None
        after = self._used[node_index] + self._request
        over = np.flatnonzero(after > self._quota[node_index])
        j = int(over[0])
        return QuotaViolation(
            self._resources[j],
            int(self._request[j]),
            int(self._used[node_index, j]),
            int(self._quota[node_index, j]),
        )

    def reason(self, node_index: int) -> str | None:
        """The failure message for one node (None if it fits); computed only when asked."""
        v = self.violation(node_index)
        return None if v is None else v.message


def filter_nodes(
    args: CrossQuotaArgs,
    pod: CrossQuotaPod,
    is_gpu_node: npt.NDArray[np.bool_],
    quota: npt.NDArray[np.int64],
    used: npt.NDArray[np.int64],
) -> FilterResult:
    """Vectorised predicate over N nodes: ``quota`` and ``used`` (CPU-pod usage) are int64[N, R]."""
    if not pod.is_cpu_pod:
        fits = np.ones(is_gpu_node.shape[0], dtype=np.bool_)
    else:
        over = ((used + pod.request) > quota).any(axis=1)
        fits = ~(is_gpu_node & over)
    return FilterResult(fits, args.quota_resources, pod.request, used, quota)


def fits_few(
    pod: CrossQuotaPod,
    is_gpu_node: Sequence[bool] | npt.NDArray[np.bool_],
    quota: Sequence[Sequence[int]] | npt.NDArray[np.int64],
    used: Sequence[Sequence[int]] | npt.NDArray[np.int64],
    rows: Sequence[int],
) -> list[bool]:
    """``filter_nodes(args, pod, is_gpu_node, quota, used).fits[rows]`` for a few rows, with Python
    ints (exact, as the int64 arithmetic is): cheaper than numpy's per-call cost for a handful. The
    inputs are indexed by row: numpy arrays, or the Python lists the scheduler mirrors them in."""
    if not pod.is_cpu_pod:
        return [True] * len(rows)
    request = pod.request.tolist()
    return [
        not is_gpu_node[row]
        or all(u + r <= q for u, r, q in zip(used[row], request, quota[row], strict=True))
        for row in rows
    ]


# --------------------------------------------------------------------------------------------------
# Node order ("Node Ordering Function")


def score_node(
    args: CrossQuotaArgs,
    requests: Mapping[str, int],
    *,
    strategy: ScoringStrategy,
    node_is_gpu: bool,
    quota: Mapping[str, int],
    used: Mapping[str, int],
) -> float:
    """Scalar score: ``sum(score*w)/sum(w) * crossQuotaWeight`` over the requested quota resources."""
    if not node_is_gpu or not args.is_cpu_pod(requests) or args.plugin_weight == 0:
        return 0.0
    total = 0.0
    weight_sum = 0
    for r in args.quota_resources:
        request = requests.get(r, 0)
        if request <= 0:  # Semantics 8
            continue
        limit = quota.get(r, 0)
        after = used.get(r, 0) + request
        if limit == 0:
            score = 0.0
        elif after > limit:
            return 0.0
        elif strategy is ScoringStrategy.MOST_ALLOCATED:
            score = after / limit
        else:
            score = (limit - after) / limit
        weight = args.weight_of(r)
        total += score * weight
        weight_sum += weight
    if weight_sum == 0:
        return 0.0
    return total / weight_sum * args.plugin_weight


def score_nodes(
    args: CrossQuotaArgs,
    pod: CrossQuotaPod,
    is_gpu_node: npt.NDArray[np.bool_],
    quota: npt.NDArray[np.int64],
    used: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """Vectorised score over N nodes (same inputs as :func:`filter_nodes`); float64[N]."""
    n = is_gpu_node.shape[0]
    active = pod.request > 0
    if not pod.is_cpu_pod or args.plugin_weight == 0 or not active.any():
        return np.zeros(n, dtype=np.float64)
    request = pod.request[active]
    q = quota[:, active]
    after = used[:, active] + request
    weights = args.weights()[active]
    weight_sum = weights.sum()
    if weight_sum == 0:
        return np.zeros(n, dtype=np.float64)
    safe_q = np.where(q == 0, 1, q).astype(np.float64)
    after_f = after.astype(np.float64)
    if pod.strategy is ScoringStrategy.MOST_ALLOCATED:
        ratio = after_f / safe_q
    else:
        ratio = (q.astype(np.float64) - after_f) / safe_q
    ratio = np.where(q == 0, 0.0, ratio)
    overflow = ((after > q) & (q != 0)).any(axis=1)
    scores: npt.NDArray[np.float64] = row_sums(ratio * weights) / weight_sum * args.plugin_weight
    return np.where(is_gpu_node & ~overflow, scores, 0.0)


@dataclass(frozen=True, slots=True)
class NodeScorer:
    """:func:`score_nodes` for one prepared pod, with the per-pod parts worked out once.

    The same arithmetic element by element (so the same floats, including ties), but one resource
    column at a time: numpy costs many times more on an [N, k] block with a small k than on k
    contiguous vectors, and the scheduler keeps its node arrays column-major. Row-wise: scoring
    ``rows`` of the inputs gives the full result's ``rows``. Build with :func:`node_scorer`.
    """

    args: CrossQuotaArgs
    pod: CrossQuotaPod
    columns: tuple[int, ...]  # the quota resources the pod requests (Semantics 8)
    requests: tuple[int, ...]
    weights: tuple[np.float64, ...]
    weight_sum: np.float64
    scores_nothing: bool
    scored: tuple[Term, ...]  # (column, request, strategy, weight) per requested quota resource

    def terms(self) -> tuple[Term, ...]:
        return self.scored

    def score_nodes(
        self,
        is_gpu_node: npt.NDArray[np.bool_],
        quota: npt.NDArray[np.int64],
        used: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.float64]:
        """float64[N], equal to ``score_nodes(args, pod, is_gpu_node, quota, used)``."""
        n = is_gpu_node.shape[0]
        if self.scores_nothing:
            return np.zeros(n, dtype=np.float64)
        total, overflow = weighted_ratios(quota, used, self.terms())
        scores = total / self.weight_sum * self.args.plugin_weight
        result: npt.NDArray[np.float64] = np.where(np.greater(is_gpu_node, overflow), scores, 0.0)
        return result

    def score_few(
        self,
        is_gpu_node: Sequence[bool] | npt.NDArray[np.bool_],
        quota: Sequence[Sequence[int]] | npt.NDArray[np.int64],
        used: Sequence[Sequence[int]] | npt.NDArray[np.int64],
        rows: Sequence[int],
    ) -> list[float]:
        """``score_nodes(is_gpu_node, quota, used)[rows]`` for a few rows, with Python floats.

        The inputs are indexed by row (``quota[row][column]``): numpy arrays, or the Python lists
        the scheduler mirrors them in. The same IEEE operations in the same order as
        :meth:`score_nodes` (int64 operands turned to float64 before each subtraction or division,
        as numpy's float loops do), so the same bits; for a handful of rows this costs a fraction
        of numpy's per-call overhead.
        """
        if self.scores_nothing:
            return [0.0] * len(rows)
        weight_sum = float(self.weight_sum)
        plugin_weight = float(self.args.plugin_weight)
        out = [0.0] * len(rows)
        gpu = [i for i, row in enumerate(rows) if is_gpu_node[row]]
        sums = weighted_ratio_rows(self.scored, ((quota[rows[i]], used[rows[i]]) for i in gpu))
        for i, (total, overflow) in zip(gpu, sums, strict=True):
            if not overflow:
                out[i] = total / weight_sum * plugin_weight
        return out


def node_scorer(args: CrossQuotaArgs, pod: CrossQuotaPod) -> NodeScorer:
    """Compile :func:`score_nodes` for ``pod`` (reusable for every pod with the same request and strategy)."""
    active = pod.request > 0
    weights = args.weights()[active]
    weight_sum = weights.sum()
    nothing = not pod.is_cpu_pod or args.plugin_weight == 0 or not active.any() or weight_sum == 0
    columns = tuple(int(c) for c in np.flatnonzero(active))
    requests = tuple(int(r) for r in pod.request[active])
    most = pod.strategy is ScoringStrategy.MOST_ALLOCATED
    return NodeScorer(
        args,
        pod,
        columns,
        requests,
        tuple(weights),
        weight_sum,
        bool(nothing),
        tuple(Term(c, r, most, float(w)) for c, r, w in zip(columns, requests, weights, strict=True)),
    )
