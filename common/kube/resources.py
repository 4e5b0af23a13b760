"""The API resources gpuq watches: group, version, plural and scope of each kind.

Listing goes through raw paths (``/api/v1/pods``, ``/apis/<group>/<version>/<plural>``) for every kind,
built-in or custom, because gpuq reads API JSON (``common.model`` parses dicts) and never needs
kubernetes_asyncio's generated model classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpuq_k8s.common.model.wire import object_ref


@dataclass(frozen=True, slots=True)
class ResourceKind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """The collection path across all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{base}/{self.plural}"

    def ref(self, namespace: str, name: str) -> str:
        """``Kind/namespace/name``, or ``Kind/name`` for a cluster-scoped kind, as errors name objects."""
        return object_ref(self.kind, namespace if self.namespaced else "", name)


NODES: Final = ResourceKind("Node", "", "v1", "nodes", namespaced=False)
PODS: Final = ResourceKind("Pod", "", "v1", "pods", namespaced=True)
NAMESPACES: Final = ResourceKind("Namespace", "", "v1", "namespaces", namespaced=False)
PRIORITY_CLASSES: Final = ResourceKind(
    "PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False
)
QUEUES: Final = ResourceKind("Queue", "scheduling.volcano.sh", "v1beta1", "queues", namespaced=False)
POD_GROUPS: Final = ResourceKind("PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", namespaced=True)
ELASTIC_QUOTAS: Final = ResourceKind(
    "ElasticQuota", "scheduling.x-k8s.io", "v1alpha1", "elasticquotas", namespaced=True
)
GPU_RESOURCE_QUOTAS: Final = ResourceKind(
    "GPUResourceQuota", "tensor-fusion.ai", "v1", "gpuresourcequotas", namespaced=True
)
ALL: Final = (
    NODES,
    PODS,
    NAMESPACES,
    PRIORITY_CLASSES,
    QUEUES,
    POD_GROUPS,
    ELASTIC_QUOTAS,
    GPU_RESOURCE_QUOTAS,
)
