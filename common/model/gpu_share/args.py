"""The ``gpu-quota`` arguments: how tensor-fusion pods are placed on the GPUs of a node (design.md
Semantics 19): ``gpuPlacement``, tensor-fusion's placement mode, ``CompactFirst`` (pack, the default:
it agrees with the default configuration's resource-strategy-fit, MostAllocated on ``nvidia.com/gpu``)
or ``LowLoadFirst`` (spread)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final

from pydantic import BeforeValidator, Field

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.gpu_share.choice import Placement
from gpuq_k8s.common.model.plugin_args import PluginArgs, refuse

_EXPECTED: Final = " or ".join(p.value for p in Placement)


def _placement(value: Any) -> Placement:
    if isinstance(value, Placement):
        return value
    try:
        return Placement(value)
    except ValueError:
        raise refuse(_EXPECTED) from None


class GPUQuotaArgs(PluginArgs):
    """``gpuPlacement``: which of a node's GPUs a tensor-fusion pod shares (:class:`Placement`)."""

    PLUGIN: ClassVar[str] = plugin_names.GPU_QUOTA

    placement: Annotated[Placement, BeforeValidator(_placement)] = Field(
        Placement.COMPACT_FIRST, alias="gpuPlacement"
    )
