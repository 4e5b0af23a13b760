"""Image locality (kube-scheduler's ImageLocality scorer, v1.36): a node that already holds the images a
pod runs scores higher, the more so the larger the images and the more nodes hold them (an image on
one node of many is less of a reason to go there than one spread over the cluster).

A node's images are its ``status.images`` (every name of each image, with its size); a pod's are the
images of its init containers, its containers and its image volumes, each name normalised with
``:latest`` when it has no tag (``normalizedImageName``). Per image the node holds, the pod's sum grows
by ``int(size * nodes_with_image / all_nodes)`` (``scaledImageScore``; once per container that runs
it); the score is the sum clamped to ``[23 MiB, 1000 MiB x containers]`` and scaled to 0-100
(``calculatePriority``, integer arithmetic as kube's). The size of an image is the one the first node
reporting it gave (kube's image states).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.errors import InvalidValue

Int64Array = npt.NDArray[np.int64]

MB: Final = 1024 * 1024
MIN_THRESHOLD: Final = 23 * MB
MAX_CONTAINER_THRESHOLD: Final = 1000 * MB
MAX_NODE_SCORE: Final = 100


def node_images(status: Mapping[str, Any]) -> dict[str, int]:
    """A node's images by every name they go by, with their sizes (``status.images``); raises
    :class:`InvalidValue` naming the field for a malformed entry."""
    out: dict[str, int] = {}
    for i, image in enumerate(wire.items(status.get("images"), "status.images")):
        size = image.get("sizeBytes") or 0
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidValue(f"status.images[{i}].sizeBytes", size, "a non-negative integer")
        names = image.get("names") or []
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise InvalidValue(f"status.images[{i}].names", names, "a list of image names")
        for name in names:
            out.setdefault(sys.intern(name), size)
    return out


def scaled_image_score(size: int, nodes_with_image: int, all_nodes: int) -> int:
    """``scaledImageScore``: the image's size weighted by its spread (float64 arithmetic, truncated)."""
    spread = float(nodes_with_image) / float(all_nodes)
    return int(float(size) * spread)


def priority(sums: Int64Array, containers: int) -> Int64Array:
    """``calculatePriority`` per row: the sums clamped and scaled to 0-100."""
    top = MAX_CONTAINER_THRESHOLD * containers
    if not containers:  # no container (the API forbids it): kube's clamping then yields 0 or 100
        return np.where(sums < MIN_THRESHOLD, 0, MAX_NODE_SCORE).astype(np.int64)
    clamped = np.clip(sums, MIN_THRESHOLD, top)
    scores: Int64Array = MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (top - MIN_THRESHOLD)
    return scores
