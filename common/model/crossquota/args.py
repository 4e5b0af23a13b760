"""Cross-quota arguments: the validated ``crossquota`` plugin arguments and the classification of
GPU nodes and CPU pods they drive (crossquota.md "Configuration Parser", "Node and Pod Detection").

Where upstream behaviour is kept on purpose (each is pinned by a test):

* ``gpu-resource-names`` are regular expressions searched anywhere in the resource name, like Go's
  ``regexp.MatchString`` (unanchored): ``nvidia.com/gpu`` also matches ``nvidia.com/gpu-a100``.
  Anchor with ``^...$`` for an exact match.
* A pod is classified by its requested *extended* resources only (upstream looks at
  ``Resreq.ScalarResources``): ``cpu`` and ``memory`` never make a pod a GPU pod, whatever the patterns.
  gpuq additionally ignores zero requests (``nvidia.com/gpu: 0`` asks for no GPU; design.md Semantics 8).

Where gpuq deliberately differs (design.md Semantics 3, "Scheduler configuration"): invalid arguments are
a :class:`ConfigError` (upstream logs and skips them), including unknown keys, ``quota.*``/``weight.*``
for a resource missing from ``quota-resources`` (upstream silently ignores those) and a missing
``gpu-resource-names`` (upstream then silently disables the plugin).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Annotated, Any, ClassVar, Final, Self

import numpy as np
import numpy.typing as npt
from pydantic import AfterValidator, BeforeValidator, Field, PrivateAttr, ValidationInfo, model_validator

from gpuq_k8s.common.model import plugin_names, wire
from gpuq_k8s.common.model.errors import ConfigError, InvalidValue
from gpuq_k8s.common.model.limits import MAX_DIGITS
from gpuq_k8s.common.model.plugin_args import PLACEHOLDER, PluginArgs, ZeroWeight, each, parsed, refuse
from gpuq_k8s.common.model.quantity import CPU, EXPECTED_QUANTITY, MEMORY, to_units
from gpuq_k8s.common.model.quoting import quote

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
_EXPECTED_PATTERNS: Final = (
    "comma-separated regular expressions of GPU resource names, such as nvidia.com/gpu,amd.com/gpu"
)
# Resources that never classify a pod as a GPU pod (upstream only looks at scalar resources).
_CORE_RESOURCES: Final = frozenset({CPU, MEMORY})
_PERCENT_RE: Final = re.compile(r"^[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")


def _split(value: Any, expected: str) -> list[str]:
    if not isinstance(value, str):
        raise refuse(expected)
    # A trailing or doubled comma is harmless punctuation, not a value, so empty items are dropped.
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise refuse(expected)
    return items


def _patterns(value: Any) -> Any:
    """``gpu-resource-names``: comma-separated regular expressions (compiled patterns pass through)."""
    if isinstance(value, tuple):
        return value
    patterns: list[re.Pattern[str]] = []
    for item in _split(value, _EXPECTED_PATTERNS):
        try:
            patterns.append(re.compile(item))
        except re.error as err:
            raise refuse(f"a valid regular expression ({err})", item) from None
    return tuple(patterns)


def _quota_resources(value: Any) -> Any:
    """``quota-resources``: comma-separated resource names, each at most once (``null``: the default)."""
    if value is None:
        return DEFAULT_QUOTA_RESOURCES
    if isinstance(value, tuple):
        return value
    expected = "comma-separated resource names, such as cpu,memory"
    resources: list[str] = []
    for item in _split(value, expected):
        if not wire.RESOURCE_NAME_RE.match(item):
            raise refuse("a Kubernetes resource name such as cpu or memory", item)
        if item in resources:
            raise refuse(f"{expected}, each at most once ({quote(item)} repeats)")
        resources.append(item)
    return tuple(resources)


def _listed(resource: str, info: ValidationInfo) -> str:
    """The resource of a ``quota.``, ``quota-percentage.`` or ``weight.`` key must be a quota resource:
    upstream parses and then never uses such a key; gpuq says so instead of ignoring it."""
    listed = info.data.get("quota_resources")
    if listed is not None and resource not in listed:
        raise refuse(
            f"a resource listed in {QUOTA_RESOURCES} ({','.join(listed)}); add {quote(resource)} there first"
        )
    return resource


QuotaResource = Annotated[str, AfterValidator(_listed)]


def _amounts(value: Any, info: ValidationInfo) -> Any:
    """``quota.<resource>``: each a non-negative quantity, in gpuq's integer units of its resource."""
    if not isinstance(value, Mapping):
        return value

    def amount(resource: str, quantity: Any) -> int:
        _listed(resource, info)
        try:
            return parse_amount(resource, f"{QUOTA_PREFIX}{resource}", quantity, ConfigError)
        except ConfigError as err:
            raise refuse(err.expected) from None

    return each(value, amount)


class CrossQuotaArgs(PluginArgs):
    """The ``crossquota`` plugin arguments ("Configuration Parser"), read from Volcano's flat argument
    map by :meth:`parse`; amounts are in gpuq's integer units. ``quota_resources`` fixes the column
    order R of every array the crossquota package takes or returns. ``resource_weights`` holds every
    quota resource's weight that is not the default of 1 (upstream's cpu 10 and memory 1 included)."""

    PLUGIN: ClassVar[str] = plugin_names.CROSSQUOTA
    GROUPED: ClassVar[tuple[str, ...]] = (QUOTA_PERCENTAGE_PREFIX, QUOTA_PREFIX, WEIGHT_PREFIX)

    gpu_resource_patterns: Annotated[tuple[re.Pattern[str], ...], BeforeValidator(_patterns)] = Field(
        alias=GPU_RESOURCE_NAMES
    )
    quota_resources: Annotated[tuple[str, ...], BeforeValidator(_quota_resources)] = Field(
        DEFAULT_QUOTA_RESOURCES, alias=QUOTA_RESOURCES
    )
    plugin_weight: ZeroWeight = Field(DEFAULT_CROSS_QUOTA_WEIGHT, alias=CROSS_QUOTA_WEIGHT)
    quotas: Annotated[dict[str, int], BeforeValidator(_amounts)] = Field(
        default_factory=dict, alias=QUOTA_PREFIX + PLACEHOLDER
    )
    quota_percentages: dict[
        QuotaResource, Annotated[Fraction, parsed(lambda v: parse_percentage("", v, ConfigError))]
    ] = Field(default_factory=dict, alias=QUOTA_PERCENTAGE_PREFIX + PLACEHOLDER)
    resource_weights: dict[QuotaResource, ZeroWeight] = Field(
        default_factory=dict, alias=WEIGHT_PREFIX + PLACEHOLDER
    )

    _gpu_memo: dict[str, bool] = PrivateAttr(default_factory=dict)

    @classmethod
    def missing(cls, key: str) -> str:
        # Upstream silently disables the plugin without patterns: an enabled plugin that does nothing
        # is a misconfiguration.
        return f"{_EXPECTED_PATTERNS} (required)"

    @model_validator(mode="after")
    def _default_weights(self) -> Self:
        """Upstream's weights (cpu 10, memory 1) for the quota resources no ``weight.`` key sets."""
        defaults = {r: w for r, w in DEFAULT_RESOURCE_WEIGHTS.items() if r in self.quota_resources}
        if any(r not in self.resource_weights for r in defaults):
            object.__setattr__(self, "resource_weights", {**defaults, **self.resource_weights})
        return self

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
        memo = self._gpu_memo  # a private attribute: read once (pydantic's __getattr__, 3 us a read)
        for name in allocatable:
            known = memo.get(name)
            if known if known is not None else self.is_gpu_resource(name):
                return True
        return False

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


def parse_amount(resource: str, field: str, value: Any, error: type[InvalidValue]) -> int:
    """A non-negative quantity of ``resource`` in gpuq's units, as an argument (``error`` is
    :class:`ConfigError`) or a node annotation (:class:`InvalidAnnotation`) gives it."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise error(field, value, EXPECTED_QUANTITY)
    try:
        amount = to_units(resource, value, field)
    except InvalidValue:
        raise error(field, value, EXPECTED_QUANTITY) from None
    if amount < 0:
        raise error(field, value, f"a non-negative amount ({EXPECTED_QUANTITY})")
    return amount


def parse_percentage(field: str, value: Any, error: type[InvalidValue]) -> Fraction:
    """A percentage in (0, 100], exactly (a :class:`Fraction`), from an argument or a node annotation."""
    if isinstance(value, bool):
        raise error(field, value, EXPECTED_PERCENTAGE)
    if isinstance(value, int):
        pct = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise error(field, value, EXPECTED_PERCENTAGE)
        pct = Fraction(repr(value))
    elif isinstance(value, str) and _PERCENT_RE.match(value.strip()) and len(value.strip()) <= MAX_DIGITS:
        pct = Fraction(value.strip())
    else:
        raise error(field, value, EXPECTED_PERCENTAGE)
    if not 0 < pct <= 100:
        raise error(field, value, EXPECTED_PERCENTAGE)
    return pct
