"""A card type: what one node offers under one name (capacity-card "Node Card Discovery"), and the
naming constants every card rule shares: the milli-unit card amounts, the NVIDIA resource and label
names, and the shape of a card type name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

CardKind = Literal["whole", "mps", "mig"]


@dataclass(frozen=True, slots=True)
class CardType:
    """One card type found on a node (design.md Semantics 2).

    ``name`` is the canonical card type name queues use in ``volcano.sh/card.quota``:
    ``NVIDIA-A100`` (whole), ``NVIDIA-A100/mps-80g*1/8`` (MPS), ``NVIDIA-A100/mig-1g.5gb-mixed`` (MIG).
    ``resource`` is the Kubernetes resource pods request for it. ``count`` is the node's allocatable
    amount of that resource in whole units (MPS replicas and MIG instances count one each).
    ``memory_mib`` is the *physical* card's memory from the ``<prefix>.memory`` label (MiB, Semantics 9).
    """

    name: str
    kind: CardKind
    product: str
    resource: str
    count: int
    memory_mib: int | None = None
    replicas: int | None = None
    mig_profile: str | None = None


MULTI_CARD_SEPARATOR: Final = "|"
# Card amounts are kept in milli-units like every extended resource (capacity-card.md "Card Resource
# Quantification": 2 cards -> 2000), so a quota and a pod request compare without conversion.
CARD_UNIT: Final = 1000
# A quota or request above this many cards is a typo, not a cluster; refusing it keeps milli-unit
# amounts far inside int64 for the scheduler's numpy arrays.
MAX_CARD_COUNT: Final = 1_000_000_000

NVIDIA_GPU: Final = "nvidia.com/gpu"
NVIDIA_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
NVIDIA_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
NVIDIA_REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
MPS_RESOURCE: Final = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"

# The spec's `^((.+?)/(\w+))\.product$`, with `-` also allowed in the type: resource names may contain
# it (`huawei.com/ascend-910`, spec "Single-Instance Multi-Card Request"), and a product label whose
# resource can never match would silently hide a card type. Group 1 is the whole-card resource.
PRODUCT_LABEL_RE: Final = re.compile(r"^((.+?)/([\w-]+))\.product$")
# A card type name: printable ASCII without spaces and without the alternative separator. Product
# label values are Kubernetes label values, and MPS/MIG names add `/`, `*` and `.` to them.
CARD_NAME_RE: Final = re.compile(r"^[!-{}~]+$")

EXPECTED_CARD_NAMES: Final = (
    "a card type name or alternatives separated by '|' such as NVIDIA-A100|NVIDIA-H100 "
    "(no spaces, no empty or repeated alternative)"
)
EXPECTED_CARD_COUNT: Final = f"a non-negative integer number of cards (at most {MAX_CARD_COUNT})"
