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

import functools
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


def normalized_image_name(name: str) -> str:
    """``name`` with ``:latest`` when it names no tag (a ``:`` after the last ``/``) nor a digest."""
    return name + ":latest" if name.rfind(":") <= name.rfind("/") else name


@functools.lru_cache(maxsize=4096)
def _normalized(name: str) -> str:
    # A cluster's pods run a few images: each is normalised (and its string shared) once.
    return sys.intern(normalized_image_name(name))


def pod_images(spec: Mapping[str, Any]) -> tuple[tuple[str, ...], int]:
    """The normalised images a pod runs (init containers, containers, image volumes; once per
    container, in that order) and its number of containers (init and regular)."""
    plain = spec.get("containers")
    if type(plain) is list and not spec.get("initContainers") and _no_image_volume(spec.get("volumes")):
        # Most pods: containers, no image volume (the general path below reads the rest).
        fast: list[str] = []
        for container in plain:
            if type(container) is not dict:
                break
            image = container.get("image")
            if image and type(image) is str:
                fast.append(_normalized(image))
        else:
            return tuple(fast), len(plain)
    images: list[str] = []
    containers = 0
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if not items:
            continue
        for container in wire.items(items, f"spec.{field}"):
            containers += 1
            image = container.get("image")
            if image and type(image) is str:
                images.append(_normalized(image))
    volumes = spec.get("volumes")
    if volumes:
        for i, volume in enumerate(wire.items(volumes, "spec.volumes")):
            source = volume.get("image")
            if source is None:
                continue
            reference = wire.mapping(source, f"spec.volumes[{i}].image").get("reference")
            if reference and type(reference) is str:
                images.append(_normalized(reference))
    return tuple(images), containers


def _no_image_volume(volumes: Any) -> bool:
    """Whether ``volumes`` (a pod's) is absent or a plain list of volumes none of which is an image."""
    if not volumes:
        return True
    if type(volumes) is not list:
        return False
    return all(type(volume) is dict and "image" not in volume for volume in volumes)


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
