"""``gpuq explain NAMESPACE/POD --kubeconfig P``: explain a pod from live cluster state.

The cluster is read once (every kind the scheduler watches) and scheduled in memory by the same code
as ``gpuq simulate``, so the explanation is what the scheduler would decide now, node by node, with
the scores. Nothing is written to the cluster.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import aiohttp
from kubernetes_asyncio.config import ConfigException

from common.kube.client import new_api_client
from common.kube.config_file import read_config
from common.kube.informer import Informer
from common.model.errors import GpuqError
from common.model.nodes import NodeInfo
from common.model.pods import GPUQ_SCHEDULER, PodInfo
from scheduler.kube.feed import REPLAY_ORDER
from scheduler.plugins import default_registry
from scheduler.simulate.loader import Manifests
from scheduler.simulate.run import Simulation, prepare, run


async def _snapshot(kubeconfig: str | None) -> dict[str, list[Any]]:
    api = await new_api_client(kubeconfig)
    try:
        informers = [Informer(api, kind) for kind in REPLAY_ORDER]
        # One paginated list per kind (the informer's own list, without a watch).
        await asyncio.gather(*(informer._list() for informer in informers))
        return {i.kind.kind: list(i.items().values()) for i in informers}
    finally:
        await api.close()


def live_manifests(kubeconfig: str | None, target: tuple[str, str] | None = None) -> Manifests:
    """The cluster's current objects as simulator input (a malformed object is listed as an error).

    With ``target`` (namespace, name), the simulation takes the part of the scheduler that pod names:
    a gpuq instance may run under any ``--scheduler-name``, and its pods are the ones to schedule.
    """
    snapshot = asyncio.run(_snapshot(kubeconfig))
    acting = _scheduler_of(snapshot.get("Pod", ()), target)
    out = Manifests()
    for kind in REPLAY_ORDER:
        for obj in snapshot.get(kind.kind, ()):
            meta = obj.get("metadata") or {}
            try:
                if kind.kind == "Node":
                    out.nodes.append(NodeInfo.from_dict(obj))
                elif kind.kind == "Pod":
                    pod = PodInfo.from_dict(obj)
                    if pod.deleting and not pod.bound:
                        continue
                    out.pods.append(_as_scheduler(pod, acting))
                else:
                    out.objects.append(obj)
            except GpuqError as err:
                out.errors.append(f"{kind.kind}/{meta.get('namespace') or ''}/{meta.get('name')}: {err}")
    # A pod still bound to a deleted node (before the pod GC removes it) holds nothing: the
    # scheduler does not count it either (it waits for the node, see scheduler.kube.feed).
    nodes = {n.name for n in out.nodes}
    out.pods = [p for p in out.pods if not p.bound or p.node_name in nodes]
    return out


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
    kubeconfig: str | None, config_path: str | None, target: tuple[str, str] | None = None
) -> Simulation | list[str]:
    """Schedule the live cluster's pending pods in memory, keeping every attempt for ``--explain``;
    a list of problems (one line each) instead when the input or configuration is invalid."""
    try:
        config = read_config(config_path)
    except GpuqError as err:
        return [f"{config_path or 'default config'}: {err}"]
    try:
        manifests = live_manifests(kubeconfig, target)
    except (OSError, aiohttp.ClientError, ConfigException) as err:
        return [f"cannot read the cluster: {err}"]
    sim = prepare(manifests, config, default_registry(), explain=True)
    if not isinstance(sim, list):
        run(sim)
    return sim
