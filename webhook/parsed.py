"""Cluster objects admission reads, parsed once into model objects (Queue quotas, PodGroups,
GPUResourceQuota single limits) and kept by object identity until the informer replaces the object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from gpuq_k8s.common.model.capacity_card.quota import QueueQuota, queue_quota
from gpuq_k8s.common.model.crd import Queue
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.gpu_quota.quota import GPUResourceQuota
from gpuq_k8s.common.model.gpu_quota.store import GPUQuotaStore
from gpuq_k8s.webhook.view import ClusterView

T = TypeVar("T")


class ParseCache:
    """Parsed forms of the cluster objects admission reads, by object identity.

    Informer caches replace an object (a new dict) on every change and never mutate one in place, so
    identity is a safe key; the entry holds the object itself, so its id cannot be reused while cached.
    Queues and quotas are read by every Pod review and parsing them is most of a review's cost.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._entries: dict[tuple[int, str], tuple[Mapping[str, Any], Any]] = {}

    def get(self, raw: Mapping[str, Any], what: str, parse: Callable[[Mapping[str, Any]], T]) -> T:
        key = (id(raw), what)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is raw:
            value: T = entry[1]
            return value
        value = parse(raw)
        if len(self._entries) >= self.size:
            self._entries.clear()
        self._entries[key] = (raw, value)
        return value


CACHE: Final = ParseCache()


def _queue_quota(raw: Mapping[str, Any]) -> QueueQuota:
    return queue_quota(Queue.from_dict(raw))


def parsed_queue_quota(raw: Mapping[str, Any]) -> QueueQuota:
    """A Queue's card and capability quota, parsed once per Queue object."""
    return CACHE.get(raw, "quota", _queue_quota)


def _gpu_quota_or_none(raw: Mapping[str, Any]) -> GPUResourceQuota | None:
    try:
        return GPUResourceQuota.from_dict(raw)
    except InvalidValue:
        return None  # a quota the webhook would have refused; the scheduler reports it


def namespace_gpu_quota(view: ClusterView, namespace: str) -> GPUResourceQuota | None:
    for raw in view.gpu_resource_quotas(namespace):
        quota = CACHE.get(raw, "gpu", _gpu_quota_or_none)
        if quota is not None:
            return quota  # a quota the webhook would have refused; the scheduler reports it
    return None


def _single_limits_store(raw: Mapping[str, Any]) -> GPUQuotaStore | None:
    quota = CACHE.get(raw, "gpu", _gpu_quota_or_none)
    if quota is None:
        return None
    store = GPUQuotaStore()
    store.set_quota(quota)
    return store


def namespace_gpu_limits(view: ClusterView, namespace: str) -> GPUQuotaStore | None:
    """A store holding only the namespace's GPUResourceQuota (no usage), built once per quota object:
    admission checks per-workload (``single``) limits against it and never charges it, so one store
    serves every review until the quota object changes."""
    for raw in view.gpu_resource_quotas(namespace):
        store = CACHE.get(raw, "gpu-store", _single_limits_store)
        if store is not None:
            return store
    return None
