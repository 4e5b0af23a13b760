"""What a DRA device, or a share of one, is worth to the quota engines (the hooks the capacity-card,
GPUResourceQuota, ElasticQuota and crossquota integrations call; issue 26 "Quota over devices").

* **Card type** (capacity-card's queue card quotas and the job-mode enqueue check): from the
  device's attributes, named as card discovery names device-plugin cards so one Queue quota covers
  both: the product name with spaces as dashes (``NVIDIA A100-SXM4-40GB`` ->
  ``NVIDIA-A100-SXM4-40GB``, the ``nvidia.com/gpu.product`` label's form) for a whole GPU, and
  ``<product>/mig-<profile>-mixed`` for a MIG partition. A device without a product attribute has
  no card type (``None``): the integration decides (it is still a device of its class).
* **Cards, TFLOPS and VRAM** (GPUResourceQuota; card counts in milli-cards as every card amount): a
  dedicated device is one card, the TFLOPS of its product (:mod:`~common.model.gpu_specs`; a MIG
  partition its compute share, :func:`~common.model.gpu_quota.card_share.card_share`) and the VRAM of
  its memory capacity. A share of a device that allows multiple allocations is charged exactly what
  it consumes: its consumed memory as VRAM, and that fraction of the device as cards and TFLOPS (or
  the consumed TFLOPS capacity when the driver publishes one). ``adminAccess`` results are never
  charged. ``None`` marks an amount gpuq cannot tell (an unknown product): never guessed.

* **DeviceClass mappings** (ElasticQuota and Queue capability, as Kueue's ``deviceClassMappings``):
  :func:`devices_per_class` and :func:`mapped_resources` count an allocation's devices per class and
  then per mapped resource name.

Attribute names are configurable per driver (:class:`DeviceNaming`); the defaults are NVIDIA's
``gpu.nvidia.com`` driver's (k8s-dra-driver-gpu ``deviceinfo.go``): ``productName``, ``type``
(``gpu``, ``mig``, ``vfio``), ``profile`` (MIG), capacity ``memory``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from gpuq_k8s.common.model.cards.card_type import CARD_UNIT, CardType
from gpuq_k8s.common.model.devices.amounts import NANO
from gpuq_k8s.common.model.devices.claims import ResourceClaim
from gpuq_k8s.common.model.devices.device import Device
from gpuq_k8s.common.model.devices.pools import Inventory
from gpuq_k8s.common.model.devices.results import ClaimAllocation
from gpuq_k8s.common.model.gpu_quota.card_share import card_share
from gpuq_k8s.common.model.gpu_specs import card_tflops

NVIDIA_DRIVER: Final = "gpu.nvidia.com"


@dataclass(frozen=True, slots=True)
class DeviceNaming:
    """Which attributes and capacities of a driver's devices say what they are."""

    product: str = "productName"
    kind: str = "type"
    mig_profile: str = "profile"
    memory: str = "memory"
    tflops: str | None = None  # a capacity in TFLOPS, when the driver publishes one
    mig_kinds: frozenset[str] = field(default_factory=lambda: frozenset({"mig"}))


DEFAULT_NAMING: Final[Mapping[str, DeviceNaming]] = {NVIDIA_DRIVER: DeviceNaming()}


@dataclass(frozen=True, slots=True)
class DeviceCharge:
    card_type: str | None
    cards: int  # milli-cards
    tflops: int | None  # milli-TFLOPS
    vram: int | None  # bytes


def _naming(device: Device, naming: Mapping[str, DeviceNaming]) -> DeviceNaming:
    return naming.get(device.driver, DeviceNaming())


def _text(device: Device, name: str) -> str | None:
    value = device.attribute(name if "/" in name else f"{device.driver}/{name}")
    return value if isinstance(value, str) and not isinstance(value, bool) else None


def _card(device: Device, names: DeviceNaming) -> CardType | None:
    product = _text(device, names.product)
    if not product:
        return None
    product = "-".join(product.split())
    kind = _text(device, names.kind)
    profile = _text(device, names.mig_profile)
    memory = device.capacity.get(names.memory)
    memory_mib = memory.value // NANO // 2**20 if memory is not None else None
    if kind in names.mig_kinds and profile:
        return CardType(
            f"{product}/mig-{profile}-mixed", "mig", product, "", 1, memory_mib, mig_profile=profile
        )
    return CardType(product, "whole", product, "", 1, memory_mib)


def card_type(device: Device, naming: Mapping[str, DeviceNaming] = DEFAULT_NAMING) -> str | None:
    """The card type a queue's ``volcano.sh/card.quota`` counts this device under (module doc)."""
    card = _card(device, _naming(device, naming))
    return card.name if card is not None else None


def device_charge(
    device: Device,
    consumed: Mapping[str, int] | None = None,
    naming: Mapping[str, DeviceNaming] = DEFAULT_NAMING,
) -> DeviceCharge:
    """What one allocation of ``device`` costs: the whole device, or (``consumed``, its
    ``consumedCapacity`` in nano-units) a share of it."""
    names = _naming(device, naming)
    card = _card(device, names)
    memory = device.capacity.get(names.memory)
    if card is not None and card.kind == "mig":
        share = card_share(card)
        tflops = share.tflops
    else:
        table = card_tflops(card.product) if card is not None else None
        tflops = round(table * 1000) if table is not None else None
    vram = math.ceil(memory.value / NANO) if memory is not None else None
    if consumed is None:
        return DeviceCharge(card.name if card else None, CARD_UNIT, tflops, vram)
    fraction = None
    if memory is not None and memory.value and names.memory in consumed:
        fraction = consumed[names.memory] / memory.value
        vram = math.ceil(consumed[names.memory] / NANO)
    if names.tflops and names.tflops in consumed:
        tflops = math.ceil(consumed[names.tflops] * 1000 / NANO)
    elif tflops is not None:
        tflops = math.ceil(tflops * fraction) if fraction is not None else tflops
    cards = math.ceil(CARD_UNIT * fraction) if fraction is not None else CARD_UNIT
    return DeviceCharge(card.name if card else None, cards, tflops, vram)


def allocation_charges(
    allocation: ClaimAllocation, inventory: Inventory, naming: Mapping[str, DeviceNaming] = DEFAULT_NAMING
) -> list[DeviceCharge]:
    """The charges of every device result of ``allocation`` but admin access (never charged);
    devices no longer published are left out (their slice is gone)."""
    charges = []
    for result in allocation.results:
        if result.admin_access:
            continue
        found = inventory.device(result.driver, result.pool, result.device)
        if found is None:
            continue
        share = dict(result.consumed_capacity or {}) if result.share_id is not None else None
        charges.append(device_charge(found[1], share, naming))
    return charges


def devices_per_class(claim: ResourceClaim, allocation: ClaimAllocation) -> dict[str, int]:
    """How many devices of each DeviceClass ``allocation`` gives ``claim`` (admin access left out):
    what a DeviceClass-to-resource mapping (Kueue's ``deviceClassMappings``) turns into an
    ElasticQuota or Queue capability amount with :func:`mapped_resources`."""
    class_of = {alt.name: alt.class_name for request in claim.spec.requests for alt in request.alternatives}
    counts: dict[str, int] = {}
    for result in allocation.results:
        name = class_of.get(result.request)
        if name is not None and not result.admin_access:
            counts[name] = counts.get(name, 0) + 1
    return counts


def mapped_resources(per_class: Mapping[str, int], mapping: Mapping[str, str]) -> dict[str, int]:
    """Device counts per resource name through ``mapping`` (DeviceClass name -> resource name);
    classes the mapping does not name are not counted."""
    out: dict[str, int] = {}
    for class_name, count in per_class.items():
        resource = mapping.get(class_name)
        if resource is not None:
            out[resource] = out.get(resource, 0) + count
    return out


def total(charges: Iterable[DeviceCharge]) -> dict[str, int]:
    """Cards per card type (milli-cards), for queue card quotas; devices without a type are skipped."""
    cards: dict[str, int] = {}
    for charge in charges:
        if charge.card_type is not None:
            cards[charge.card_type] = cards.get(charge.card_type, 0) + charge.cards
    return cards
