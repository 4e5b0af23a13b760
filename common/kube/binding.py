"""Writes to Pods: the Binding subresource, preemption deletes and the PodScheduled condition.

Every write names the pod's UID as a precondition: a pod deleted and re-created under the same name
while a decision was in flight must not receive the decision made for its predecessor.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from common.kube.status import STRATEGIC_MERGE_PATCH, Reply, call

POD_SCHEDULED: Final = "PodScheduled"
DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def binding_body(namespace: str, name: str, uid: str, node: str) -> dict[str, Any]:
    """A v1 Binding; ``metadata.uid`` makes the apiserver refuse it for another pod of that name."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


@dataclass(frozen=True, slots=True)
class BindResult:
    """``ok``; ``conflict`` when the pod was already bound (the apiserver's 409)."""

    ok: bool
    conflict: bool = False
    message: str = ""


async def bind(api_client: Any, namespace: str, name: str, uid: str, node: str) -> BindResult:
    """POST pods/{name}/binding. A 409 is resolved by reading the pod: bound to ``node`` is success
    (an earlier attempt of ours landed, e.g. before a restart), bound elsewhere is a failure."""
    reply = await call(
        api_client, "POST", pod_path(namespace, name) + "/binding", binding_body(namespace, name, uid, node)
    )
    if reply.ok:
        return BindResult(True)
    if reply.status == 409:
        current = await call(api_client, "GET", pod_path(namespace, name))
        spec = current.body.get("spec") or {}
        meta = current.body.get("metadata") or {}
        bound_to = str(spec.get("nodeName") or "")
        if current.ok and bound_to == node and (not uid or meta.get("uid") == uid):
            return BindResult(True, conflict=True)
        where = f"bound to {bound_to}" if bound_to else "changed"
        return BindResult(False, True, f"Pod/{namespace}/{name} is already {where}: {reply.message}")
    return BindResult(False, False, f"binding Pod/{namespace}/{name} to {node} failed: {reply.message}")


def condition_patch(
    reason: str, message: str, nominated_node: str = "", *, type_: str = POD_SCHEDULED, status: str = "False"
) -> dict[str, Any]:
    """The pods/status strategic merge patch kube-scheduler sends for an unschedulable pod."""
    body: dict[str, Any] = {
        "status": {
            "conditions": [
                {
                    "type": type_,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now_rfc3339(),
                    "lastProbeTime": None,
                }
            ]
        }
    }
    if nominated_node:
        body["status"]["nominatedNodeName"] = nominated_node
    return body


async def set_condition(api_client: Any, namespace: str, name: str, uid: str, patch: dict[str, Any]) -> Reply:
    body = dict(patch)
    if uid:
        body["metadata"] = {"uid": uid}
    return await call(
        api_client, "PATCH", pod_path(namespace, name) + "/status", body, content_type=STRATEGIC_MERGE_PATCH
    )


async def preempt(api_client: Any, namespace: str, name: str, uid: str, message: str) -> Reply:
    """Mark the victim DisruptionTarget (as kube-scheduler does) and delete it with grace period 0
    (there may be no kubelet to honour a grace period; the quota must be free now). A 404 is success:
    the victim is gone either way."""
    await set_condition(
        api_client,
        namespace,
        name,
        uid,
        condition_patch(PREEMPTION_BY_SCHEDULER, message, type_=DISRUPTION_TARGET, status="True"),
    )
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    if uid:
        body["preconditions"] = {"uid": uid}
    reply = await call(api_client, "DELETE", pod_path(namespace, name), body)
    if reply.status == 404:
        return Reply(200, reply.body)
    return reply
