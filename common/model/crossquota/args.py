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
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, PrivateAttr

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.errors import ConfigError, InvalidValue
from gpuq_k8s.common.model.limits import MAX_DIGITS
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
# Resources that never classify a pod as a GPU pod (upstream only looks at scalar resources).
_CORE_RESOURCES: Final = frozenset({CPU, MEMORY})
_PERCENT_RE: Final = re.compile(r"^[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")


class CrossQuotaArgs(BaseModel):
    """The ``crossquota`` plugin arguments, validated ("Configuration Parser").

    Build with :meth:`from_arguments` (Volcano's flat argument map); amounts are in gpuq's integer
    units. ``quota_resources`` fixes the column order R of every array the crossquota package takes
    or returns.
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
            percentages[resource] = parse_percentage(key, value, ConfigError)
        elif key.startswith(QUOTA_PREFIX):
            resource = _resource_of(key, QUOTA_PREFIX, value, quota_resources)
            quotas[resource] = parse_amount(resource, key, value, ConfigError)
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
            raise ConfigError(
                QUOTA_RESOURCES, value, f"{expected}, each at most once ({quote(item)} repeats)"
            )
        resources.append(item)
    return tuple(resources)


def _resource_of(key: str, prefix: str, value: Any, quota_resources: Sequence[str]) -> str:
    resource = key[len(prefix) :]
    if resource not in quota_resources:
        # Upstream parses and then never uses such a key; say so instead of ignoring it.
        listed = ",".join(quota_resources)
        raise ConfigError(
            key,
            value,
            f"a resource listed in {QUOTA_RESOURCES} ({listed}); add {quote(resource)} there first",
        )
    return resource


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


def _parse_weight(field: str, value: Any) -> int:
    # 0 is allowed (upstream: a zero crossQuotaWeight disables node ordering, a zero resource weight
    # drops the resource from the score); the upper bound keeps float64 scores finite.
    return wire.weight(value, field, ConfigError, minimum=0)
