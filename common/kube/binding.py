"""Writes to Pods: the Binding subresource, preemption deletes and the PodScheduled condition.

Every write names the pod's UID as a precondition: a pod deleted and re-created under the same name
while a decision was in flight must not receive the decision made for its predecessor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from gpuq_k8s.common.kube.errors import (
    ApiError,
    Conflict,
    NotFound,
    ServerError,
    TransportError,
    WriteRefused,
)
from gpuq_k8s.common.kube.status import STRATEGIC_MERGE_PATCH, Reply, call
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.pods import DISRUPTION_TARGET, PREEMPTION_BY_SCHEDULER

POD_SCHEDULED: Final = "PodScheduled"


def pod_path(namespace: str, name: str) -> str:
    return kinds.POD.object_path(namespace, name)


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
        "target": {"apiVersion": kinds.NODE.api_version, "kind": kinds.NODE.kind, "name": node},
    }


@dataclass(frozen=True, slots=True)
class BindResult:
    """What the API says became of a bind: ``bound_to`` is the pod's node afterwards ("" unbound);
    ``gone`` when the pod (that UID) does not exist; ``unknown`` when neither the bind nor a read of
    the pod answered (the bind may stand: the caller keeps the pod charged and reads again);
    ``conflict`` when the binding got a 409."""

    bound_to: str = ""
    gone: bool = False
    unknown: bool = False
    conflict: bool = False
    message: str = ""


async def bind(api_client: Any, namespace: str, name: str, uid: str, node: str) -> BindResult:
    """POST pods/{name}/binding. NotFound is a pod gone; any other client error but a Conflict is a
    bind that certainly did not happen. A Conflict, a ServerError or a TransportError (a timeout: the
    outcome is unknown) is resolved by reading the pod: where it is bound, if it is, says what
    happened."""
    ref = f"Pod/{namespace}/{name}"
    path = pod_path(namespace, name) + "/binding"
    try:
        reply = await call(api_client, "POST", path, binding_body(namespace, name, uid, node))
        reply.raise_for_status()
    except WriteRefused as err:
        return BindResult(message=f"binding {ref} to {node}: {err}")  # never sent: certainly unbound
    except NotFound as err:
        return BindResult(gone=True, message=f"binding {ref} to {node}: the pod is gone ({err})")
    except (TransportError, Conflict, ServerError) as err:
        found = await read_binding(api_client, namespace, name, uid)
        conflict = isinstance(err, Conflict)
        return replace(found, conflict=conflict, message=f"binding {ref} to {node}: {err}; {found.message}")
    except ApiError as err:
        return BindResult(message=f"binding {ref} to {node} failed: {err}")
    return BindResult(node)


async def read_binding(api_client: Any, namespace: str, name: str, uid: str) -> BindResult:
    """GET the pod: where it is bound, or that it is gone (404, or another pod of that name)."""
    try:
        current = await call(api_client, "GET", pod_path(namespace, name))
        current.raise_for_status()
    except NotFound:
        return BindResult(gone=True, message="the pod is gone")
    except (TransportError, ApiError) as err:
        return BindResult(unknown=True, message=f"reading the pod failed: {err}")
    meta = current.body.get("metadata") or {}
    if uid and meta.get("uid") != uid:
        return BindResult(gone=True, message="the pod was re-created")
    bound_to = str((current.body.get("spec") or {}).get("nodeName") or "")
    if meta.get("deletionTimestamp") and not bound_to:
        return BindResult(gone=True, message="the pod is being deleted")  # never to be bound
    return BindResult(bound_to, message=f"bound to {bound_to}" if bound_to else "the pod is not bound")


def condition_patch(
    reason: str,
    message: str,
    nominated_node: str | None = None,
    *,
    type_: str = POD_SCHEDULED,
    status: str = "False",
) -> dict[str, Any]:
    """The pods/status strategic merge patch kube-scheduler sends for an unschedulable pod.

    ``nominated_node``: a node name sets ``status.nominatedNodeName``, "" clears it (a preemption
    that found no room any more), None leaves it as it is."""
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
    if nominated_node is not None:
        body["status"]["nominatedNodeName"] = nominated_node or None
    return body


async def set_condition(api_client: Any, namespace: str, name: str, uid: str, patch: dict[str, Any]) -> Reply:
    body = dict(patch)
    if uid:
        body["metadata"] = {"uid": uid}
    return await call(
        api_client, "PATCH", pod_path(namespace, name) + "/status", body, content_type=STRATEGIC_MERGE_PATCH
    )


async def preempt(api_client: Any, namespace: str, name: str, uid: str, message: str) -> Reply:
    """Mark the victim DisruptionTarget (as kube-scheduler does) and delete it with its own grace
    period (kube-scheduler's DeleteOptions{}): it goes on holding its node's room and its quota while
    it terminates, until the delete shows on the watch (design.md Semantics 18). A 404 is success:
    the victim is gone either way."""
    await set_condition(
        api_client,
        namespace,
        name,
        uid,
        condition_patch(PREEMPTION_BY_SCHEDULER, message, type_=DISRUPTION_TARGET, status="True"),
    )
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if uid:
        body["preconditions"] = {"uid": uid}
    reply = await call(api_client, "DELETE", pod_path(namespace, name), body)
    if isinstance(reply.error, NotFound):
        return Reply(200, reply.body)
    return reply
