"""Resource strategy fit: per-resource MostAllocated / LeastAllocated node scoring with weights.

Spec: ``resource-strategy-fit.md`` (Volcano's ``resource-strategy-fit`` plugin). For each resource the
pod requests that has a configured strategy:

* MostAllocated: ``(used + requested) / allocatable`` (packs);
* LeastAllocated: ``(allocatable - (used + requested)) / allocatable`` (spreads);

node score ``sum(w * s) / sum(w) * 100 * resourceStrategyFitWeight`` (design.md "Units": Volcano's
``MaxNodeScore`` of 100, so weights tuned for Volcano carry over).

Upstream behaviour kept (each pinned by a test):

* ``resourceStrategyFitWeight`` defaults to 10; 0 switches the plugin's scoring off (the scheduler
  does not call it at Score: design.md Semantics 11); ``resources`` absent or empty defaults to cpu
  and memory, LeastAllocated, weight 1; an entry without ``type`` is LeastAllocated, without
  ``weight`` weighs 1.
* A resource the node has 0 of scores 0 but keeps its weight; if any scored resource would go over the
  node's allocatable the whole node scores 0.
* Matching ("Matching Priority"): an exact key first, else the wildcard with the longest prefix.

Where gpuq differs or the spec is silent (decisions):

* Invalid values are :class:`ConfigError` rather than silently replaced (upstream turns an invalid weight
  into the default and an unknown ``type`` into LeastAllocated), and an invalid wildcard pattern is an
  error rather than a filtered-out warning (design.md Semantics 6).
* A wildcard is one trailing ``*`` after a non-empty prefix. ``<prefix>/*`` matches every name that
  starts with ``<prefix>`` (so ``nvidia.com/gpu/*`` covers ``nvidia.com/gpu-a100``, as the spec's Story 2
  and configuration example intend); ``<prefix>*`` matches names starting with ``<prefix>``. Rejected:
  ``*``, ``/*``, ``*x``, ``a*b``, ``a**``, ``vendor.*/gpu``.
* Only resources with a request > 0 are scored (design.md Semantics 8). ``pods`` is never scored (a pod's
  request does not include its pod count).
* Pod override (upstream PR #4641, "per-Pod scoring"): ``volcano.sh/resource-strategy-weight`` is a JSON
  object ``{resource or wildcard: positive integer}``; when present the pod is scored by exactly those
  resources (a GPU pod "scored only by GPU resources"), each with the type the plugin configuration
  gives it, else LeastAllocated. ``volcano.sh/resource-strategy-scoring-type`` (``MostAllocated`` or
  ``LeastAllocated``) forces one type for every resource scored for that pod. A malformed override is
  denied by the webhook (:func:`parse_pod_override`); the scheduler meeting one ignores it, scores with
  the plugin configuration and emits a Warning event on the pod (:func:`pod_strategy`, Semantics 3).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr

from gpuq_k8s.common.model import plugin_names, wire
from gpuq_k8s.common.model.allocation import Term, weighted_ratio_rows, weighted_ratios
from gpuq_k8s.common.model.annotations import RESOURCE_STRATEGY_SCORING_TYPE, RESOURCE_STRATEGY_WEIGHT
from gpuq_k8s.common.model.errors import InvalidAnnotation
from gpuq_k8s.common.model.events import EventRecord, annotation_or_fallback
from gpuq_k8s.common.model.plugin_args import PluginArgs, PositiveWeight, ZeroWeight, refuse
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.quantity import CPU, MEMORY, PODS
from gpuq_k8s.common.model.quoting import quote

PLUGIN_WEIGHT_KEY: Final = "resourceStrategyFitWeight"
RESOURCES_KEY: Final = "resources"
DEFAULT_PLUGIN_WEIGHT: Final = 10
DEFAULT_RESOURCE_WEIGHT: Final = 1
MAX_NODE_SCORE: Final = 100

_EXPECTED_PATTERN: Final = (
    "a resource name, or a suffix wildcard with one trailing '*' after a non-empty prefix "
    "(such as nvidia.com/gpu/*)"
)
_EXPECTED_WEIGHTS: Final = (
    "a JSON object of resource name (or suffix wildcard) to an integer from 1 to "
    f'{wire.MAX_WEIGHT}, e.g. {{"nvidia.com/gpu": 2}}'
)


class ScoringType(enum.StrEnum):
    MOST_ALLOCATED = "MostAllocated"
    LEAST_ALLOCATED = "LeastAllocated"


DEFAULT_SCORING_TYPE: Final = ScoringType.LEAST_ALLOCATED
_EXPECTED_TYPE: Final = f"{ScoringType.MOST_ALLOCATED.value} or {ScoringType.LEAST_ALLOCATED.value}"


@dataclass(frozen=True, slots=True)
class ResourceStrategy:
    """The strategy and weight that apply to one resource."""

    type: ScoringType
    weight: int


def wildcard_prefix(pattern: str) -> str | None:
    """The prefix a wildcard pattern matches, None for an exact name; raises ``ValueError`` if invalid.

    ``nvidia.com/gpu/*`` -> ``nvidia.com/gpu``; ``nvidia.com/gpu-*`` -> ``nvidia.com/gpu-``.
    """
    if "*" not in pattern:
        if not wire.RESOURCE_NAME_RE.match(pattern):
            raise ValueError(pattern)
        return None
    if pattern.count("*") != 1 or not pattern.endswith("*"):
        raise ValueError(pattern)
    prefix = pattern[:-2] if pattern.endswith("/*") else pattern[:-1]
    if not prefix or not wire.RESOURCE_NAME_RE.match(prefix.rstrip("-._/") or "-"):
        raise ValueError(pattern)
    return prefix


class StrategyTable:
    """Resource name -> strategy, by exact key first, else by the longest wildcard prefix (memoised)."""

    __slots__ = ("_exact", "_memo", "_wildcards")

    def __init__(self, entries: Mapping[str, ResourceStrategy]) -> None:
        self._exact: dict[str, ResourceStrategy] = {}
        wildcards: list[tuple[str, ResourceStrategy]] = []
        for pattern, strategy in entries.items():
            prefix = wildcard_prefix(pattern)
            if prefix is None:
                self._exact[pattern] = strategy
            else:
                wildcards.append((prefix, strategy))
        # Longest prefix first, so the first hit is the most specific; ties cannot happen because two
        # patterns with the same prefix would be the same key (or "p/*" vs "p*", then "p/*" wins).
        wildcards.sort(key=lambda item: -len(item[0]))
        self._wildcards = tuple(wildcards)
        self._memo: dict[str, ResourceStrategy | None] = {}

    def match(self, resource: str) -> ResourceStrategy | None:
        if resource in self._memo:
            return self._memo[resource]
        found = self._exact.get(resource)
        if found is None:
            found = next((s for prefix, s in self._wildcards if resource.startswith(prefix)), None)
        self._memo[resource] = found
        return found


def default_resources() -> dict[str, ResourceStrategy]:
    return {
        CPU: ResourceStrategy(ScoringType.LEAST_ALLOCATED, 1),
        MEMORY: ResourceStrategy(ScoringType.LEAST_ALLOCATED, 1),
    }


def _pattern(name: Any) -> Any:
    """A ``resources`` key: a resource name or a valid suffix wildcard (design.md Semantics 6)."""
    if not isinstance(name, str):
        raise refuse(_EXPECTED_PATTERN, name)
    try:
        wildcard_prefix(name)
    except ValueError:
        raise refuse(_EXPECTED_PATTERN, name) from None
    return name


def _scoring_type(value: Any) -> ScoringType:
    try:
        return ScoringType(value)
    except (ValueError, TypeError):  # TypeError: an unhashable value (a list)
        raise refuse(_EXPECTED_TYPE) from None


class _Entry(BaseModel):
    """One ``resources`` entry as written: ``{type: MostAllocated|LeastAllocated, weight: N}``; an
    entry without ``type`` is LeastAllocated, without ``weight`` weighs 1 (upstream's defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    type: Annotated[ScoringType, BeforeValidator(_scoring_type)] = DEFAULT_SCORING_TYPE
    weight: PositiveWeight = DEFAULT_RESOURCE_WEIGHT


def _entry(value: Any) -> Any:
    if isinstance(value, ResourceStrategy):
        return value
    if value is None:  # ``cpu:`` with nothing under it
        value = {}
    if not isinstance(value, Mapping):
        raise refuse("a mapping {type: MostAllocated|LeastAllocated, weight: N}")
    entry = _Entry.model_validate(value)
    return ResourceStrategy(entry.type, entry.weight)


def _resources(value: Any) -> Any:
    """Absent, ``null`` or ``{}``: cpu and memory, LeastAllocated, weight 1 (upstream's default)."""
    if value is None or (isinstance(value, Mapping) and not value):
        return default_resources()
    if not isinstance(value, Mapping):
        raise refuse("a mapping of resource name or wildcard to {type, weight}")
    return value


class ResourceStrategyFitArgs(PluginArgs):
    """The ``resource-strategy-fit`` plugin arguments: the plugin weight (0 switches the plugin's
    scoring off, as Volcano does: design.md Semantics 11) and the strategy per resource or wildcard."""

    PLUGIN: ClassVar[str] = plugin_names.RESOURCE_STRATEGY_FIT

    plugin_weight: ZeroWeight = Field(DEFAULT_PLUGIN_WEIGHT, alias=PLUGIN_WEIGHT_KEY)
    resources: Annotated[
        dict[
            Annotated[str, BeforeValidator(_pattern)],
            Annotated[ResourceStrategy, BeforeValidator(_entry)],
        ],
        BeforeValidator(_resources),
    ] = Field(default_factory=default_resources, alias=RESOURCES_KEY)

    _table: StrategyTable | None = PrivateAttr(default=None)

    @classmethod
    def unknown_key(cls, location: Sequence[str]) -> str:
        if len(location) > 1:  # inside a resources entry
            return "one of the keys type, weight"
        return super().unknown_key(location)

    @property
    def table(self) -> StrategyTable:
        if self._table is None:
            self._table = StrategyTable(self.resources)
        return self._table

    def match(self, resource: str) -> ResourceStrategy | None:
        """The configured strategy for ``resource``: exact key, else longest wildcard prefix."""
        return self.table.match(resource)


# --------------------------------------------------------------------------------------------------
# Pod override


@dataclass(frozen=True, slots=True)
class PodOverride:
    """A pod's ``volcano.sh/resource-strategy-*`` annotations, validated."""

    scoring_type: ScoringType | None = None
    weights: Mapping[str, int] | None = None


def parse_pod_override(annotations: Mapping[str, str], where: str = "") -> PodOverride | None:
    """The pod's override, None without one; raises :class:`InvalidAnnotation` (webhook check)."""
    raw_type = annotations.get(RESOURCE_STRATEGY_SCORING_TYPE)
    raw_weights = annotations.get(RESOURCE_STRATEGY_WEIGHT)
    if raw_type is None and raw_weights is None:
        return None
    scoring_type: ScoringType | None = None
    if raw_type is not None:
        try:
            scoring_type = ScoringType(raw_type.strip())
        except ValueError:
            raise InvalidAnnotation(RESOURCE_STRATEGY_SCORING_TYPE, raw_type, _EXPECTED_TYPE, where) from None
    weights: dict[str, int] | None = None
    if raw_weights is not None:
        expected = _EXPECTED_WEIGHTS
        try:
            decoded = json.loads(raw_weights)
        except (ValueError, RecursionError):
            # RecursionError: a deeply nested array ("[[[[...") fits in an annotation's 256 KiB.
            raise InvalidAnnotation(RESOURCE_STRATEGY_WEIGHT, raw_weights, expected, where) from None
        if not isinstance(decoded, dict) or not decoded:
            raise InvalidAnnotation(RESOURCE_STRATEGY_WEIGHT, raw_weights, expected, where)
        weights = {}
        for name, weight in decoded.items():
            try:
                wildcard_prefix(name)
            except ValueError:
                raise InvalidAnnotation(RESOURCE_STRATEGY_WEIGHT, raw_weights, expected, where) from None
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 < weight <= wire.MAX_WEIGHT:
                raise InvalidAnnotation(
                    RESOURCE_STRATEGY_WEIGHT,
                    raw_weights,
                    f"{expected} ({quote(name)} has weight {quote(weight)})",
                    where,
                )
            weights[name] = weight
    return PodOverride(scoring_type, weights)


@dataclass(frozen=True, slots=True)
class PodStrategy:
    """How one pod is scored: a resolver from resource name to strategy (None = not scored).

    Build with :func:`pod_strategy`; ``events`` holds the Warning for an ignored malformed override.
    """

    args: ResourceStrategyFitArgs
    override: PodOverride | None = None
    events: tuple[EventRecord, ...] = ()
    override_table: StrategyTable | None = None

    def strategy_for(self, resource: str) -> ResourceStrategy | None:
        if resource == PODS:
            return None
        override = self.override
        configured = self.args.match(resource)
        if override is None:
            return configured
        if self.override_table is not None:
            weight = self.override_table.match(resource)
            if weight is None:
                return None
            base_type = configured.type if configured is not None else DEFAULT_SCORING_TYPE
            return ResourceStrategy(override.scoring_type or base_type, weight.weight)
        if configured is None or override.scoring_type is None:
            return configured
        return ResourceStrategy(override.scoring_type, configured.weight)


def pod_strategy(args: ResourceStrategyFitArgs, pod: PodInfo) -> PodStrategy:
    """The pod's scoring rules; a malformed override is ignored with a Warning event on the pod."""
    consequence = "scoring with the plugin configuration"
    override, event = annotation_or_fallback(pod.ref, pod.annotations, parse_pod_override, None, consequence)
    if event is not None:
        return PodStrategy(args, None, (event,))
    table = None
    if override is not None and override.weights is not None:
        table = StrategyTable(
            {k: ResourceStrategy(DEFAULT_SCORING_TYPE, w) for k, w in override.weights.items()}
        )
    return PodStrategy(args, override, (), table)


# --------------------------------------------------------------------------------------------------
# Scores


@dataclass(frozen=True, slots=True)
class ScorePlan:
    """The columns of the scheduler's node arrays that score one pod, with their rules.

    ``missing_weight`` is the weight of requested, scored resources that are not among the columns: no
    node has any of them, so they score 0 but still count in the denominator (as upstream does for a
    resource a node has 0 of).
    """

    columns: npt.NDArray[np.intp]  # [K] indices into the cluster's resource columns
    request: npt.NDArray[np.int64]  # [K]
    most_allocated: npt.NDArray[np.bool_]  # [K]
    weights: npt.NDArray[np.float64]  # [K]
    missing_weight: float
    plugin_weight: int
    _terms: tuple[Term, ...] | None = field(default=None, compare=False, repr=False)

    def terms(self) -> tuple[Term, ...]:
        terms = self._terms
        if terms is None:  # once per plan: the few-rows path asks for every pod of the class
            terms = self._compile_terms()
            object.__setattr__(self, "_terms", terms)
        return terms

    def _compile_terms(self) -> tuple[Term, ...]:
        return tuple(
            Term(c, r, m, w)
            for c, r, m, w in zip(
                self.columns.tolist(),
                self.request.tolist(),
                self.most_allocated.tolist(),
                self.weights.tolist(),
                strict=True,
            )
        )

    def score_nodes_by_column(
        self, allocatable: npt.NDArray[np.int64], requested: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """float64[N] from allocatable[N, R] and requested[N, R] (what is already on each node).

        One resource column at a time: numpy costs many times more on an [N, k] block with a small k
        than on k contiguous vectors (the scheduler keeps its node arrays column-major); the floats are
        those of the [N, k] form (the tests keep it as their reference). Row-wise: scoring ``rows`` of
        the inputs gives the full result's ``rows``.
        """
        n = allocatable.shape[0]
        weight_sum = float(self.weights.sum()) + self.missing_weight
        if weight_sum == 0 or self.columns.size == 0:
            return np.zeros(n, dtype=np.float64)
        total, overflow = weighted_ratios(allocatable, requested, self.terms())
        scores = total / weight_sum * (MAX_NODE_SCORE * self.plugin_weight)
        result: npt.NDArray[np.float64] = np.where(overflow, 0.0, scores)
        return result

    def score_few(
        self, allocatable: npt.NDArray[np.int64], requested: npt.NDArray[np.int64], rows: Sequence[int]
    ) -> list[float]:
        """``score_nodes_by_column(allocatable, requested)[rows]`` for a few rows, with Python floats.

        The same IEEE operations in the same order (each int64 operand turned to float64 before a
        subtraction or division, as numpy's loops do), so the same bits; for the handful of rows bound
        since a pod class was last scored this costs a fraction of numpy's per-call overhead.
        """
        weight_sum = float(self.weights.sum()) + self.missing_weight
        if weight_sum == 0 or self.columns.size == 0:
            return [0.0] * len(rows)
        factor = MAX_NODE_SCORE * self.plugin_weight
        out = [0.0] * len(rows)
        pairs = ((allocatable[row].tolist(), requested[row].tolist()) for row in rows)
        for i, (total, overflow) in enumerate(weighted_ratio_rows(self.terms(), pairs)):
            if not overflow:
                out[i] = total / weight_sum * factor
        return out


def score_plan(strategy: PodStrategy, requests: Mapping[str, int], columns: Sequence[str]) -> ScorePlan:
    """Which of the cluster's resource ``columns`` score this pod, their types, weights and requests."""
    index = {name: i for i, name in enumerate(columns)}
    cols: list[int] = []
    amounts: list[int] = []
    most: list[bool] = []
    weights: list[float] = []
    missing = 0.0
    for resource, request in sorted(requests.items()):
        if request <= 0:
            continue
        rule = strategy.strategy_for(resource)
        if rule is None:
            continue
        if resource not in index:
            missing += rule.weight
            continue
        cols.append(index[resource])
        amounts.append(request)
        most.append(rule.type is ScoringType.MOST_ALLOCATED)
        weights.append(float(rule.weight))
    return ScorePlan(
        columns=np.array(cols, dtype=np.intp),
        request=np.array(amounts, dtype=np.int64),
        most_allocated=np.array(most, dtype=np.bool_),
        weights=np.array(weights, dtype=np.float64),
        missing_weight=missing,
        plugin_weight=strategy.args.plugin_weight,
    )
