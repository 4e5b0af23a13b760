"""Node resource fit (kube-scheduler's NodeResourcesFit filter, v1.36): a pod fits a node when, for every
resource it requests (a non-zero amount; the pod count always), the node's requested total plus the
request is at most its allocatable.

A pod's request is :func:`common.model.pods.pod_requests` (containers, sidecars by KEP-753's formula,
pod-level resources, ``spec.overhead``) plus one pod. The messages are kube-scheduler's:
``Insufficient <resource>`` (``cpu``, ``memory``, ``ephemeral-storage``, ``hugepages-2Mi``, an extended
resource) and ``Too many pods``. A node whose allocatable itself is below the request can never take
the pod, whatever is evicted (kube's ``Unresolvable``); the pod count never is.

The queueing hint of a node change (``isSchedulableAfterNodeChange``): an added node is worth a retry
when the pod fits it empty, an updated one when besides that its allocatable grew for something the pod
asks (or its pod count).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpuq_k8s.common.model.quantity import PODS

TOO_MANY_PODS: Final = "Too many pods"


def insufficient(resource: str) -> str:
    """kube-scheduler's reason for a node short of ``resource``."""
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"


def fits_empty(request: Mapping[str, int], allocatable: Mapping[str, int]) -> bool:
    """Whether a pod asking ``request`` (its pod count included) fits a node with nothing on it."""
    return all(amount <= 0 or amount <= allocatable.get(name, 0) for name, amount in request.items())


def more_room(request: Mapping[str, int], old: Mapping[str, int], new: Mapping[str, int]) -> bool:
    """Whether allocatable ``new`` has more than ``old`` of something ``request`` asks, or more pods
    (``haveAnyRequestedResourcesIncreased``)."""
    if new.get(PODS, 0) > old.get(PODS, 0):
        return True
    return any(amount > 0 and new.get(name, 0) > old.get(name, 0) for name, amount in request.items())
