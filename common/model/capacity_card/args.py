"""The ``capacity-card`` plugin arguments (capacity-card.md "Plugin Configuration").

``cardUnlimitedCpuMemory``: a pod (job) that uses cards is neither checked against nor charged to the
queue's cpu and memory (Story 3: "GPU tasks only consume GPU quotas"). Upstream skips the check but
still charges, so card pods would exhaust the cpu quota of the queue's cpu-only pods.
``nodeOrderWeight`` multiplies the "Node Ordering" score (:mod:`.ordering`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuq_k8s.common.model.errors import ConfigError


class CapacityCardArgs(BaseModel):
    """The ``capacity-card`` plugin arguments (capacity-card.md "Plugin Configuration")."""

    model_config = ConfigDict(frozen=True)

    card_unlimited_cpu_memory: bool = False
    node_order_weight: float = 1.0

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any] | None) -> CapacityCardArgs:
        """Parse Volcano's argument map; raises :class:`ConfigError` naming the key and value.

        Unknown keys are refused (a misspelt ``nodeOrderWieght`` must not silently mean 1.0), and so
        are values of the wrong type: ``"true"`` or ``1`` is not a boolean.
        """
        arguments = arguments or {}
        if not isinstance(arguments, Mapping):
            raise ConfigError("capacity-card.arguments", arguments, "a mapping of argument name to value")
        unlimited = False
        weight = 1.0
        for key, value in arguments.items():
            if key == "cardUnlimitedCpuMemory":
                if not isinstance(value, bool):
                    raise ConfigError(key, value, "true or false")
                unlimited = value
            elif key == "nodeOrderWeight":
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not math.isfinite(value)
                    or value <= 0
                ):
                    raise ConfigError(key, value, "a positive number such as 1.0")
                weight = float(value)
            else:
                raise ConfigError(
                    str(key),
                    value,
                    "one of the capacity-card arguments cardUnlimitedCpuMemory, nodeOrderWeight",
                )
        return cls(card_unlimited_cpu_memory=unlimited, node_order_weight=weight)
