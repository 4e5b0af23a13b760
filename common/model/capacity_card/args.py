"""The ``capacity-card`` plugin arguments (capacity-card.md "Plugin Configuration").

``cardUnlimitedCpuMemory``: a pod (job) that uses cards is neither checked against nor charged to the
queue's cpu and memory (Story 3: "GPU tasks only consume GPU quotas"). Upstream skips the check but
still charges, so card pods would exhaust the cpu quota of the queue's cpu-only pods.
``nodeOrderWeight`` multiplies the "Node Ordering" score (:mod:`.ordering`).
``autoscaledCardTypes`` (gpuq's own, default true): a card type that no node offers right now may come
with a node a node autoscaler (cluster autoscaler, Karpenter) adds for the pending pod, so a pod asking
for it is not refused while its queue has quota for it: it waits for a node offering it
(design.md Semantics 16). False restores the strict rule for clusters without autoscaling: such a card
type is unknown, and a pod asking only for unknown ones can never fit (refused by the webhook).
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.plugin_args import PluginArgs, expect


class CapacityCardArgs(PluginArgs):
    """The ``capacity-card`` plugin arguments (capacity-card.md "Plugin Configuration"). Unknown keys
    are refused (a misspelt ``nodeOrderWieght`` must not silently mean 1.0), and so are values of the
    wrong type: ``"true"`` or ``1`` is not a boolean, ``"2"`` not a number."""

    PLUGIN: ClassVar[str] = plugin_names.CAPACITY_CARD

    card_unlimited_cpu_memory: Annotated[bool, expect("true or false")] = Field(
        False, alias="cardUnlimitedCpuMemory"
    )
    node_order_weight: Annotated[
        float, Field(gt=0, allow_inf_nan=False), expect("a positive number such as 1.0")
    ] = Field(1.0, alias="nodeOrderWeight")
    autoscaled_card_types: Annotated[bool, expect("true or false")] = Field(True, alias="autoscaledCardTypes")
