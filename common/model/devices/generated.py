"""The claims kube-controller-manager's resource-claim-controller makes from ResourceClaimTemplates,
for ``gpuq simulate`` (a live cluster has the controller itself).

For each ``spec.resourceClaims`` entry of a pod that names a template and has no claim yet, a
ResourceClaim with the template's spec, labels and annotations, owned by the pod (its controller
owner, as the controller writes it), named ``<pod>-<entry>`` (the controller adds a random suffix;
a simulation keeps names reproducible); the pod then names it, as ``status.resourceClaimStatuses``
does. An entry whose template does not exist stays without a claim: the pod waits for it, as in a
cluster (``pod "ns/p": ResourceClaim not created yet``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.pods import PodClaim, PodInfo
from gpuq_k8s.common.model.wire import Obj


def generate_claims(pod: PodInfo, template: Callable[[str, str], Obj | None]) -> tuple[PodInfo, list[Obj]]:
    """``pod`` with its template claims generated (see the module doc), and the claims made.
    ``template(namespace, name)`` finds a ResourceClaimTemplate."""
    made: list[Obj] = []
    sources: list[PodClaim] = []
    for source in pod.claim_sources:
        if source.claim is not None or source.template is None or not source.needed:
            sources.append(source)
            continue
        found = template(pod.namespace, source.template)
        spec = found.get("spec") if found is not None else None
        if not isinstance(spec, Mapping):
            sources.append(source)
            continue
        name = f"{pod.name}-{source.name}"
        meta: dict[str, Any] = {
            "name": name,
            "namespace": pod.namespace,
            "uid": f"simulated-{pod.namespace}-{name}",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod.name,
                    "uid": pod.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "annotations": {"resource.kubernetes.io/pod-claim-name": source.name},
        }
        template_meta = spec.get("metadata")
        if isinstance(template_meta, Mapping):
            for key in ("labels", "annotations"):
                if isinstance(template_meta.get(key), Mapping):
                    meta[key] = {**meta.get(key, {}), **template_meta[key]}
        made.append(
            {
                "apiVersion": kinds.RESOURCE_CLAIM.api_version,
                "kind": kinds.RESOURCE_CLAIM.kind,
                "metadata": meta,
                "spec": dict(spec.get("spec") or {}),
            }
        )
        sources.append(replace(source, claim=name))
    if not made:
        return pod, []
    return replace(pod, claim_sources=tuple(sources)), made
