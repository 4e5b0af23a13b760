"""The live cluster as simulator input: read once, read-only (``gpuq simulate --kubeconfig``,
``gpuq explain``, ``kubectl gpuq``).

Every kind the scheduler watches is listed once with plain GETs (paginated); nothing is written,
watched or patched. The kubeconfig is found as every gpuq process finds it
(:func:`common.kube.client.new_api_client`: ``--kubeconfig``, ``$KUBECONFIG``, in-cluster,
``~/.kube/config``); ``--context`` picks a context.

A user who may not list a kind (a namespace-scoped user listing Nodes or Queues) gets the rest:
:attr:`Snapshot.forbidden` names what could not be read, and the callers say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import aiohttp

from gpuq_k8s.common.kube.client import KubeconfigError, new_api_client
from gpuq_k8s.common.kube.collection_get import get_whole
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.common.kube.errors import (
    Forbidden,
    NotFound,
    TransportError,
    Unauthorized,
    api_error,
    succeeded,
)
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER, PodInfo
from gpuq_k8s.scheduler.kube.feed import REPLAY_ORDER
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.simulate.loader import Manifests, object_reference
from gpuq_k8s.scheduler.simulate.run import Simulation, prepare, run

PAGE: Final = 500


class ReadError(GpuqError):
    """The cluster could not be read (unreachable, bad kubeconfig, an error status)."""


@dataclass(slots=True)
class Snapshot:
    """The objects read, by kind; ``forbidden``: the kinds the user may not list (``Node``, ...)."""

    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    forbidden: list[str] = field(default_factory=list)
    namespace: str = ""  # "" = all namespaces


async def _list(api: Any, kind: Kind, namespace: str) -> list[dict[str, Any]] | None:
    """Every object of ``kind`` (in ``namespace`` when namespaced and given); None if forbidden."""
    items: list[dict[str, Any]] = []
    token = ""
    path = kind.collection(namespace)
    while True:
        params = [("limit", str(PAGE))] + ([("continue", token)] if token else [])
        status, body = await get_whole(api, path, params, aiohttp.ClientTimeout(total=120))
        error = None if succeeded(status) else api_error(status)
        if isinstance(error, Unauthorized):
            raise ReadError(f"GET {path}: HTTP 401 Unauthorized: the kubeconfig's credentials were refused")
        if isinstance(error, Forbidden):
            return None
        if isinstance(error, NotFound) and kind.group:
            return []  # the CRD is not installed: none of its objects exist
        if error is not None:
            text = body[:200].decode("utf-8", "replace").strip()
            raise ReadError(f"GET {path}: HTTP {error.status}: {text}")
        page = json.loads(body)
        for item in page.get("items") or ():
            item.setdefault("kind", kind.kind)
            item.setdefault("apiVersion", kind.api_version)
            items.append(item)
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return items


async def _snapshot(kubeconfig: str | None, context: str | None, namespace: str) -> Snapshot:
    api = await new_api_client(kubeconfig, context)
    try:
        lists = await asyncio.gather(*(_list(api, kind, namespace) for kind in REPLAY_ORDER))
    finally:
        await api.close()
    out = Snapshot(namespace=namespace)
    for kind, items in zip(REPLAY_ORDER, lists, strict=True):
        if items is None:
            out.forbidden.append(kind.kind)
        else:
            out.objects[kind.kind] = items
    return out


def snapshot(kubeconfig: str | None, context: str | None = None, namespace: str = "") -> Snapshot:
    """Read the cluster once (see the module's docstring); raises :class:`ReadError`."""
    try:
        return asyncio.run(_snapshot(kubeconfig, context, namespace))
    except (ReadError, KubeconfigError) as err:
        raise ReadError(f"cannot read the cluster: {err}") from err
    except (TransportError, OSError, ValueError) as err:  # OSError: the kubeconfig's certificate files
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ReadError(f"cannot read the cluster: {text}") from err


def manifests(
    snap: Snapshot, target: tuple[str, str] | None = None, *, acting: str | None = None
) -> Manifests:
    """The snapshot as simulator input (a malformed object is listed as an error).

    With ``target`` (namespace, name), the simulation takes the part of the scheduler that pod names:
    a gpuq instance may run under any ``--scheduler-name``, and its pods are the ones to schedule;
    ``acting`` names that scheduler outright.
    """
    acting = acting or _scheduler_of(snap.objects.get(kinds.POD.kind, ()), target)
    out = Manifests()
    for kind in REPLAY_ORDER:
        for obj in snap.objects.get(kind.kind, ()):
            meta = obj.get("metadata") or {}
            try:
                if kind is kinds.NODE:
                    out.nodes.append(NodeInfo.from_dict(obj))
                elif kind is kinds.POD:
                    pod = PodInfo.from_dict(obj)
                    if pod.deleting and not pod.bound:
                        continue
                    out.pods.append(_as_scheduler(pod, acting))
                else:
                    out.objects.append(obj)
            except GpuqError as err:
                ref = kind.ref(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
                text = str(err)
                out.errors.append(f"live cluster: {text}" if ref in text else f"live cluster: {ref}: {text}")
    # A pod still bound to a deleted node (before the pod GC removes it) holds nothing: the
    # scheduler does not count it either (it waits for the node, see scheduler.kube.feed).
    nodes = {n.name for n in out.nodes}
    out.pods = [p for p in out.pods if not p.bound or p.node_name in nodes]
    return out


def overlay(live: Manifests, extra: Manifests) -> Manifests:
    """``live`` with ``extra`` on top: an object of ``extra`` replaces the live one of the same
    kind, namespace and name (a Queue with a new quota), the rest is added (new pods, new nodes).
    A pod of ``extra`` without a creationTimestamp is created now: it queues behind the live ones,
    also behind one created in this very second (timestamps have a resolution of one second, and an
    equal timestamp would let the name decide)."""
    stamp = datetime.now(UTC).replace(microsecond=0)
    latest = max((p.creation_timestamp for p in live.pods if p.creation_timestamp), default="")
    # An unreadable live timestamp: "now" still queues the new pods behind the rest.
    with contextlib.suppress(ValueError):
        if latest:
            stamp = max(stamp, datetime.fromisoformat(latest.replace("Z", "+00:00")) + timedelta(seconds=1))
    now = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    added = [p if p.creation_timestamp else replace(p, creation_timestamp=now) for p in extra.pods]
    nodes = {n.name for n in extra.nodes}
    pods = {p.key for p in extra.pods}
    objects = {object_reference(o) for o in extra.objects}
    return Manifests(
        nodes=[n for n in live.nodes if n.name not in nodes] + extra.nodes,
        pods=[p for p in live.pods if p.key not in pods] + added,
        objects=[o for o in live.objects if object_reference(o) not in objects] + extra.objects,
        errors=live.errors + extra.errors,
    )


def _scheduler_of(pods: Any, target: tuple[str, str] | None) -> str:
    for obj in pods:
        meta = obj.get("metadata") or {}
        if target is not None and (meta.get("namespace"), meta.get("name")) == target:
            return str((obj.get("spec") or {}).get("schedulerName") or GPUQ_SCHEDULER)
    return GPUQ_SCHEDULER


def _as_scheduler(pod: PodInfo, acting: str) -> PodInfo:
    """Pods of ``acting`` become the simulated scheduler's; pods of gpuq's default name, when another
    name acts, belong to another instance and are left alone (bound ones still count as usage)."""
    if acting == GPUQ_SCHEDULER:
        return pod
    if pod.scheduler_name == acting:
        return replace(pod, scheduler_name=GPUQ_SCHEDULER)
    if pod.scheduler_name == GPUQ_SCHEDULER:
        return replace(pod, scheduler_name=f"{GPUQ_SCHEDULER} (other instance)")
    return pod


def live_simulation(
    kubeconfig: str | None,
    config_path: str | None,
    target: tuple[str, str] | None = None,
    *,
    context: str | None = None,
    extra: Manifests | None = None,
    explain: bool = True,
    scheduler_name: str | None = None,
) -> Simulation | list[str]:
    """Schedule the live cluster's pending pods (plus ``extra``) in memory; a list of problems (one
    line each) instead when the cluster cannot be read or the input or configuration is invalid.
    ``scheduler_name``: the pods to schedule are those of that name (``gpuq simulate
    --scheduler-name``), else those of the scheduler ``target`` names."""
    try:
        settings = read_config(config_path)
    except GpuqError as err:
        return [f"{config_path or 'default config'}: {line}" for line in err.lines()]
    try:
        snap = snapshot(kubeconfig, context)
    except ReadError as err:
        return [str(err)]
    if snap.forbidden:
        return [
            f"cannot read the cluster: listing {', '.join(snap.forbidden)} across all namespaces is "
            "forbidden for this user (a simulation needs every kind the scheduler watches)"
        ]
    live = manifests(snap, target, acting=scheduler_name)
    if extra is not None:
        acting = scheduler_name or GPUQ_SCHEDULER
        extra = replace(extra, pods=[_as_scheduler(pod, acting) for pod in extra.pods])
    sim = prepare(
        overlay(live, extra) if extra is not None else live, settings, default_registry(), explain=explain
    )
    if not isinstance(sim, list):
        run(sim)
    return sim
