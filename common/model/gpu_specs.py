"""Built-in TFLOPS of common GPU products, keyed by the names GPU feature discovery writes.

design.md Semantics 5: a pod without tensor-fusion annotations is charged the TFLOPS of the card it
lands on, taken from a ``<prefix>.tflops`` node label or, failing that, from this table.

The metric is tensor-fusion's ``fp16TFlops`` (NexusGPU/tensor-fusion,
``charts/tensor-fusion/templates/gpu-public-gpu-info.yaml``): peak FP16 on Tensor Cores, *dense*
(no 2:4 sparsity), per physical card. The numbers are that file's, so a namespace quota written for
tensor-fusion means the same here. The A30 is not in that file; its entry is NVIDIA's datasheet
figure for the same metric (FP16 Tensor Core, dense: 165).

Lookup (:func:`card_tflops`) works on the ``nvidia.com/gpu.product`` label value (the NVML device
name with spaces turned into dashes: ``NVIDIA-A100-SXM4-80GB``, ``Tesla-T4``,
``NVIDIA-H100-80GB-HBM3``, ``NVIDIA-GeForce-RTX-4090``):

1. normalise: upper case; spaces and underscores become ``-``; GFD's ``-SHARED`` suffix (renamed
   time-sliced resources) and ``-MIG-<profile>`` suffix (``single`` MIG strategy) are dropped; the
   vendor and brand words ``NVIDIA-``, ``TESLA-``, ``GEFORCE-`` are dropped from the front;
2. an exact entry wins;
3. otherwise the longest *family* entry that is a prefix ending at a ``-`` boundary answers
   (``A100`` covers ``A100-SXM4-80GB`` and ``A100-PCIE-40GB``, which have the same TFLOPS; ``A10``
   does not cover ``A100``, ``L4`` does not cover ``L40S``);
4. otherwise the product is unknown and the answer is ``None``: the caller decides (the GPU quota
   engine reports it naming the node and asks for a ``.tflops`` label). A product family whose
   variants differ (H100 SXM 989 vs PCIe 835) has no family entry, and known variants that would
   otherwise inherit a wrong number through a family prefix (RTX 4090 D, H200 NVL) are listed as
   explicitly unknown. No guessed number is ever returned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """``fp16_tflops`` is dense FP16 Tensor Core TFLOPS per card; ``None`` marks a known-unknown."""

    fp16_tflops: float | None
    family: bool = False


# Normalised product name -> spec. `family=True` entries also answer for names they prefix.
GPU_SPECS: Final[dict[str, GpuSpec]] = {
    # Volta / Turing
    "V100": GpuSpec(125, family=True),
    "V100S": GpuSpec(130, family=True),
    "T4": GpuSpec(65, family=True),
    # Ampere
    "A100": GpuSpec(312, family=True),
    "A800": GpuSpec(312, family=True),
    "A10": GpuSpec(125),
    "A10G": GpuSpec(125),
    "A30": GpuSpec(165, family=True),
    "A40": GpuSpec(149.7, family=True),
    "RTX-3090": GpuSpec(71.2),
    "RTX-3090-TI": GpuSpec(80.0),
    # Ada Lovelace
    "L4": GpuSpec(121),
    "L40": GpuSpec(181),
    "L40S": GpuSpec(365),
    "RTX-6000-ADA-GENERATION": GpuSpec(323),
    "RTX-4090": GpuSpec(165.16, family=True),
    # Not in tensor-fusion's table; a cut-down 4090 that must not inherit the 4090's number.
    "RTX-4090-D": GpuSpec(None),
    "RTX-4090D": GpuSpec(None),
    # Hopper: SXM and PCIe differ, so only exact names.
    "H100-80GB-HBM3": GpuSpec(989),
    "H100-SXM5-80GB": GpuSpec(989),
    "H100-PCIE": GpuSpec(835),
    "H100-NVL": GpuSpec(989),
    "H800": GpuSpec(989),
    "H800-80GB-HBM3": GpuSpec(989),
    "H800-PCIE": GpuSpec(835),
    "H800-NVL": GpuSpec(835),
    "H200": GpuSpec(989),
    "H200-80GB-HBM3": GpuSpec(989),
    "H200-NVL": GpuSpec(None),
    "H20": GpuSpec(148),
    # Blackwell
    "B200": GpuSpec(2250, family=True),
    "RTX-5090": GpuSpec(419.2),
    "RTX-5090-D": GpuSpec(380),
    "RTX-5090D": GpuSpec(380),
    "RTX-5080": GpuSpec(225),
}

_STRIP_PREFIXES: Final = ("NVIDIA-", "TESLA-", "GEFORCE-")
_MIG_SUFFIX: Final = re.compile(r"-MIG-.*$")


def normalise_product(product: str) -> str:
    """The table key form of a product name (see the module doc, step 1)."""
    name = re.sub(r"[\s_]+", "-", product.strip().upper())
    name = _MIG_SUFFIX.sub("", name)
    name = name.removesuffix("-SHARED")
    for prefix in _STRIP_PREFIXES:
        name = name.removeprefix(prefix)
    return name


def lookup(product: str) -> GpuSpec | None:
    """The table entry answering for ``product`` (exact, else longest family prefix), or ``None``."""
    name = normalise_product(product)
    exact = GPU_SPECS.get(name)
    if exact is not None:
        return exact
    best: tuple[int, GpuSpec] | None = None
    for key, spec in GPU_SPECS.items():
        if spec.family and name.startswith(key + "-") and (best is None or len(key) > best[0]):
            best = (len(key), spec)
    return best[1] if best else None


# A cluster has a handful of products and every node of one asks the same (the answer is pure).
@lru_cache(maxsize=256)
def card_tflops(product: str) -> float | None:
    """Dense FP16 Tensor Core TFLOPS of one ``product`` card, or ``None`` when gpuq does not know it."""
    spec = lookup(product)
    return spec.fp16_tflops if spec else None
