"""binpack: Volcano's best-fit node score with per-resource weights (volcano-sh/volcano
``pkg/scheduler/plugins/binpack``).

For each resource the pod requests (``pods`` included: Volcano's task request counts one pod) that
has a weight (cpu, memory, and the resources listed in ``binpack.resources``)::

    resource score = (used + request) * weight / allocatable     (0 if allocatable or weight is 0)
    node score     = sum(resource scores) / sum(weights) * 100 * binpack.weight

A resource the node has none of scores 0 but keeps its weight; a resource that would go over the
node's allocatable makes the whole node score 0. These are upstream's rules and upstream's float
operations in upstream's order (``binpack_test.go`` expects 173.076923076 to 1e-8).

Where gpuq differs (design.md "Scheduler configuration": nothing is silently replaced): a negative
weight is a configuration error (upstream turns a negative cpu, memory or resource weight into 1 and
accepts a negative ``binpack.weight``); so is a fractional one, an unknown key, a
``binpack.resources.<name>`` weight for a resource not listed in ``binpack.resources`` (upstream
ignores it), and cpu or memory listed there (upstream overwrites their weight with ``binpack.cpu`` /
``binpack.memory``). ``binpack.weight: 0`` switches the score off, as upstream then registers no
node-order function (design.md Semantics 11).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Final, NamedTuple

import numpy as np
import numpy.typing as npt
from pydantic import AfterValidator, BeforeValidator, Field, PrivateAttr, ValidationInfo

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.plugin_args import PLACEHOLDER, PluginArgs, ZeroWeight, refuse
from gpuq_k8s.common.model.quantity import CPU, MEMORY

WEIGHT_KEY: Final = "binpack.weight"
CPU_KEY: Final = "binpack.cpu"
MEMORY_KEY: Final = "binpack.memory"
RESOURCES_KEY: Final = "binpack.resources"
RESOURCE_PREFIX: Final = "binpack.resources."
MAX_NODE_SCORE: Final = 100
DEFAULT_WEIGHT: Final = 1


def _listed(value: Any) -> Any:
    """``binpack.resources``: comma-separated extended resource names (cpu and memory have their own
    keys: upstream silently overwrites their weight with ``binpack.cpu`` / ``binpack.memory``). A tuple
    of names (code building the model) passes as it is."""
    if isinstance(value, tuple):
        return value
    if not isinstance(value, str):
        raise refuse("a comma-separated list of resource names")
    listed = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    for name in listed:
        if name in (CPU, MEMORY):
            raise refuse(f"extended resources only ({name}: use binpack.{name})")
    return listed


def _weighted(name: str, info: ValidationInfo) -> str:
    """A ``binpack.resources.<name>`` weight needs ``<name>`` listed in ``binpack.resources`` (upstream
    ignores it)."""
    if name not in info.data.get("resources", (name,)):
        raise refuse(f"a weight for a resource listed in {RESOURCES_KEY}")
    return name


class BinpackArgs(PluginArgs):
    """The ``binpack`` arguments: the plugin weight and each weighted resource's weight.

    ``resource_weights`` is every weighted resource's weight: cpu, memory and the resources of
    ``binpack.resources``, in that order (unlisted weights 1).
    """

    PLUGIN: ClassVar[str] = plugin_names.BINPACK
    GROUPED: ClassVar[tuple[str, ...]] = (RESOURCE_PREFIX,)

    weight: ZeroWeight = Field(DEFAULT_WEIGHT, alias=WEIGHT_KEY)
    cpu: ZeroWeight = Field(DEFAULT_WEIGHT, alias=CPU_KEY)
    memory: ZeroWeight = Field(DEFAULT_WEIGHT, alias=MEMORY_KEY)
    resources: Annotated[tuple[str, ...], BeforeValidator(_listed)] = Field((), alias=RESOURCES_KEY)
    listed_weights: dict[Annotated[str, AfterValidator(_weighted)], ZeroWeight] = Field(
        default_factory=dict, alias=RESOURCE_PREFIX + PLACEHOLDER
    )

    _resource_weights: dict[str, int] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        weights = {CPU: self.cpu, MEMORY: self.memory}
        weights.update({name: self.listed_weights.get(name, DEFAULT_WEIGHT) for name in self.resources})
        self._resource_weights = weights

    @property
    def resource_weights(self) -> Mapping[str, int]:
        return self._resource_weights


class BinpackTerm(NamedTuple):
    """One weighted resource the pod requests: its column in the node arrays (None: no node has it)."""

    column: int | None
    request: int
    weight: int


def terms_for(
    args: BinpackArgs, requests: Mapping[str, int], columns: Mapping[str, int]
) -> tuple[BinpackTerm, ...]:
    """The pod's scored resources, in upstream's order (cpu, memory, then the others by name).

    ``requests`` is what the pod counts against a node (its pod count included).
    """
    names = [r for r in (CPU, MEMORY) if requests.get(r, 0) > 0]
    names += sorted(r for r, v in requests.items() if v > 0 and r not in (CPU, MEMORY))
    weights = args.resource_weights
    return tuple(BinpackTerm(columns.get(r), requests[r], weights[r]) for r in names if r in weights)


def score_nodes(
    args: BinpackArgs,
    terms: Sequence[BinpackTerm],
    allocatable: npt.NDArray[np.int64],
    used: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """Binpack score of every row of ``allocatable``/``used`` ([rows, R]) for a pod with ``terms``."""
    rows = allocatable.shape[0]
    score = np.zeros(rows, dtype=np.float64)
    weight_sum = 0
    overflow = np.zeros(rows, dtype=np.bool_)
    for column, request, weight in terms:
        weight_sum += weight
        if column is None or weight == 0:
            continue  # capacity 0 everywhere (or no weight): scores 0, keeps its weight
        cap = allocatable[:, column].astype(np.float64)
        after = used[:, column].astype(np.float64) + float(request)
        zero = cap == 0
        overflow |= (after > cap) & ~zero
        with np.errstate(divide="ignore", invalid="ignore"):
            part = after * float(weight) / cap
        part[zero] = 0.0
        score += part
    if weight_sum > 0:
        score /= float(weight_sum)
    score *= float(MAX_NODE_SCORE * args.weight)
    score[overflow] = 0.0
    return score


def score_rows(
    args: BinpackArgs, terms: Sequence[BinpackTerm], rows: Iterable[tuple[Sequence[int], Sequence[int]]]
) -> list[float]:
    """:func:`score_nodes` for a few nodes given as ``(allocatable row, used row)`` of Python ints: the
    same IEEE operations in the same order, so the same bits (the row cache mixes both forms)."""
    weight_sum = sum(t.weight for t in terms)
    out: list[float] = []
    for cap_row, used_row in rows:
        score = 0.0
        overflow = False
        for column, request, weight in terms:
            if column is None or weight == 0 or cap_row[column] == 0:
                continue
            cap = float(cap_row[column])
            after = float(used_row[column]) + float(request)
            overflow = overflow or after > cap
            score += after * float(weight) / cap
        if weight_sum > 0:
            score /= float(weight_sum)
        score *= float(MAX_NODE_SCORE * args.weight)
        out.append(0.0 if overflow else score)
    return out
