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
``deviceNaming`` (gpuq's own): per DRA driver, which device attributes and capacities tell a device's
card type and amounts (docs/design.md "Quota over devices"); a driver not listed is read with NVIDIA's
``gpu.nvidia.com`` names (``productName``, ``type``, ``profile``, capacity ``memory``). It applies to
every quota over devices (the card quotas, GPUResourceQuota) and to the webhook's claim checks.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.plugin_args import PluginArgs, expect


class DeviceAttributeNames(BaseModel):
    """One driver's names (``deviceNaming.<driver>``): attributes ``productName``, ``type``,
    ``migProfile``, the capacity ``memory`` and an optional TFLOPS capacity ``tflops``; ``migTypes``
    are the values of ``type`` that mark a MIG partition."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, validate_by_alias=True)

    product: Annotated[str, Field(min_length=1), expect("an attribute name")] = Field(
        "productName", alias="productName"
    )
    kind: Annotated[str, Field(min_length=1), expect("an attribute name")] = Field("type", alias="type")
    mig_profile: Annotated[str, Field(min_length=1), expect("an attribute name")] = Field(
        "profile", alias="migProfile"
    )
    memory: Annotated[str, Field(min_length=1), expect("a capacity name")] = Field("memory", alias="memory")
    tflops: Annotated[str | None, expect("a capacity name")] = Field(None, alias="tflops")
    mig_types: Annotated[list[str], expect("a list of type values")] = Field(["mig"], alias="migTypes")


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
    device_naming: dict[str, DeviceAttributeNames] = Field(default_factory=dict, alias="deviceNaming")
