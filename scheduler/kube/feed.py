"""Informer changes -> :class:`~scheduler.cycle.Scheduler` inputs.

Three rules keep the scheduler's view honest:

1. **Nothing before everything.** Until every informer has listed, changes are not delivered (the
   caches fill up on their own); then :meth:`Feed.replay` feeds the caches in dependency order:
   nodes, then the objects quotas are defined by, then bound pods, then pending pods. A pending pod
   is therefore never tried against a cluster whose usage is half known (restart safety, design.md
   "Data flow": usage is re-derived from bound pods, never persisted).
2. **Our own writes are not news.** A status-only change (the PodScheduled condition we wrote, a
   quota status we patched) neither re-queues a pod nor re-parses a quota object: that would turn
   every write into a retry and spin (kube-scheduler's ``isPodUpdated`` does the same).
3. **Assumed pods stay put.** A pod we bound is counted on its node at once (assumed) and stays so
   until the watch shows it bound (here or elsewhere) or deleted; an older, unbound version of it
   arriving late must not put it back in the queue. Never a timer (Semantics 13): a binding the API
   accepted stands, so forgetting it on a clock would hand its room out twice while the watch
   lags. A bind whose outcome is unknown is settled by reading the pod (:mod:`common.kube.binding`).

The feed also knows how long each pod has waited: ``on_waited`` gets, when its bind succeeds, the
seconds since the pod was created (``gpuq_pod_scheduling_wait_seconds``, per queue): its
``creationTimestamp`` (second resolution) read against the wall clock when the scheduler first saw
it pending, plus the monotonic time since, so a scheduler restarted while pods waited counts their
whole wait, not only the part since it started.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Final

from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.kube.informer import InformerSet
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.errors import GpuqError
from gpuq_k8s.common.model.events import FAILED_SCHEDULING, INVALID_ANNOTATION, EventRecord
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj, object_ref, rfc3339_seconds, section
from gpuq_k8s.scheduler.backend import Result
from gpuq_k8s.scheduler.cluster.objects import stored_kind
from gpuq_k8s.scheduler.cycle import Scheduler
from gpuq_k8s.scheduler.plugins.priority import resolve_priority

log = logging.getLogger(__name__)

# The order of the replay after the initial list: what quota objects and pods refer to comes first.
# (common/model/kinds.py SCHEDULER_WATCHES: the kinds the scheduler's informers list and watch.)
REPLAY_ORDER: Final = kinds.SCHEDULER_WATCHES
# Bookkeeping the apiserver changes on every write; never a reason to reconsider anything.
_VOLATILE_META: Final = ("resourceVersion", "managedFields", "generation")
# Status keys that are inputs rather than gpuq's outputs: a Queue closed by its owner must be seen, and
# so must a claim or volume bound (phase) and a budget's allowance (the placement rules' objects).
_STATUS_INPUTS: Final = {
    kinds.QUEUE.kind: ("state",),
    # the PV controller's bookkeeping the volume rules read (Bound, Lost, Available)
    kinds.PERSISTENT_VOLUME_CLAIM.kind: ("phase",),
    kinds.PERSISTENT_VOLUME.kind: ("phase",),
    # the allocated state DynamicResources keeps (its ledger), and who uses a claim
    kinds.RESOURCE_CLAIM.kind: ("allocation", "reservedFor"),
    kinds.POD_DISRUPTION_BUDGET.kind: (
        "disruptionsAllowed",
        "disruptedPods",
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
    ),
}


# The kinds the scheduler reads only for their pod selector (topology spread's system defaults).
SELECTOR_ONLY: Final = frozenset(
    {kinds.SERVICE, kinds.REPLICATION_CONTROLLER, kinds.REPLICA_SET, kinds.STATEFUL_SET}
)


def selector_only(obj: dict[str, Any]) -> dict[str, Any]:
    """The informer transform of :data:`SELECTOR_ONLY` kinds: identity, labels and ``spec.selector``
    (a ReplicaSet's pod template and every status stay out of the scheduler's memory, and a status
    change of theirs, as each pod starts, is no change at all)."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "labels") if k in meta}
    spec = obj.get("spec") or {}
    out: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept}
    out["spec"] = {"selector": spec["selector"]} if "selector" in spec else {}
    return out


def _meta_without_volatile(obj: Obj) -> dict[str, Any]:
    meta = dict(section(obj, "metadata"))
    for key in _VOLATILE_META:
        meta.pop(key, None)
    return meta


def pod_update_matters(old: Obj, new: Obj) -> bool:
    """Whether an unbound pod's update can change a scheduling decision: anything but its status
    and the apiserver's bookkeeping (kube-scheduler's ``isPodUpdated``), except the claims
    kube-controller-manager generated for it (``status.resourceClaimStatuses``, which DynamicResources
    waits for: kube-scheduler's ``UpdatePodGeneratedResourceClaim`` event)."""
    return (
        _meta_without_volatile(old) != _meta_without_volatile(new)
        or old.get("spec") != new.get("spec")
        or section(old, "status").get("resourceClaimStatuses")
        != section(new, "status").get("resourceClaimStatuses")
    )


def object_update_matters(kind: str, old: Obj, new: Obj) -> bool:
    """Whether a quota object's update is more than a status gpuq itself writes."""
    if _meta_without_volatile(old) != _meta_without_volatile(new) or old.get("spec") != new.get("spec"):
        return True
    for key in _STATUS_INPUTS.get(kind, ()):
        if section(old, "status").get(key) != section(new, "status").get(key):
            return True
    # Anything else at the top level (a PriorityClass's value, a Namespace's labels live in meta).
    rest_old = {k: v for k, v in old.items() if k not in ("metadata", "spec", "status")}
    rest_new = {k: v for k, v in new.items() if k not in ("metadata", "spec", "status")}
    return rest_old != rest_new


@dataclass(eq=False)
class Feed:
    """Delivers informer changes to ``scheduler``; ``wake()`` is called after every delivered change."""

    scheduler: Scheduler
    _: KW_ONLY
    wake: Callable[[], None] = lambda: None
    on_waited: Callable[[str, float], None] = lambda queue, seconds: None  # queue, seconds
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    ready: bool = field(default=False, init=False)
    informers: InformerSet | None = field(default=None, init=False)
    # pods we bound that the watch has not shown bound yet
    assumed: set[str] = field(default_factory=set, init=False)
    _nodes: dict[str, NodeInfo] = field(default_factory=dict, init=False)
    _uids: dict[str, str] = field(default_factory=dict, init=False)  # pod key -> uid we know it by
    handled: int = field(default=0, init=False)
    # pending pod -> (monotonic time first seen, seconds it had waited since its creation by then)
    _seen: dict[str, tuple[float, float]] = field(default_factory=dict, init=False)
    # The streamed start (:meth:`load`): kinds fed already and live; the first pod list's pages that
    # came before the other kinds were in; the bound pods fed from its pages (key -> the object
    # fed, the informer cache's own, brought to the cache's present at the end: _bring_to_present).
    _live: set[str] = field(default_factory=set, init=False)
    _others_in: bool = field(default=False, init=False)
    _early_pages: list[tuple[int, list[Obj]]] = field(default_factory=list, init=False)
    _streamed: dict[tuple[str, str], Obj] = field(default_factory=dict, init=False)

    # -- wiring -----------------------------------------------------------------------------------
    def handler(self, change: Change) -> None:
        """The informer handler (every kind): ignored until :meth:`replay`, then applied.

        A pod's delete is logged (DEBUG) as it is observed: the informer's cache already lacks the
        pod, so from this line on :meth:`settled` answers GONE and no bind of it is sent."""
        if change.type == "delete" and change.obj.get("kind") == kinds.POD.kind:
            log.debug("observed delete of pod %s/%s", *change.key)
        if not (self.ready or change.obj.get("kind") in self._live):
            return
        self.apply(change)
        self.wake()

    async def load(self, informers: InformerSet) -> None:
        """The replay of :meth:`replay`, streamed: the same objects in the same order, but the bound
        pods of the first pod list are fed page by page as the pages arrive (the pod informer's
        ``on_page`` is :meth:`page`), while the apiserver encodes the next one, instead of after the
        whole list. Every other kind is fed first, once all of them have listed (from then on their
        changes are applied as they come); pending pods last, once the pod list is complete: a
        pending pod is still never tried against a cluster whose usage is half known. Each page is
        one step of the event loop: the Lease is renewed and the probes answer meanwhile; its bound
        pods new to the feed are counted together (:meth:`_feed_page`).
        """
        self.informers = informers
        pods = informers.informers.get(kinds.POD.kind)
        others = [i for i in informers.informers.values() if i is not pods]
        await asyncio.gather(*(i.synced.wait() for i in others))
        for kind in REPLAY_ORDER:
            if kind is kinds.POD or kind.kind not in informers.informers:
                continue
            for obj in list(informers[kind.kind].items().values()):
                self.apply(Change("add", _key(obj, kind.namespaced), obj))
            self._live.add(kind.kind)
        while self._early_pages:  # pages arriving meanwhile join the end of the queue: order kept
            number, objs = self._early_pages.pop(0)
            self._feed_page(number, objs)
            await asyncio.sleep(0)
        self._others_in = True
        if pods is not None:
            await pods.synced.wait()
            self._bring_to_present(pods.items())
        self._streamed.clear()
        self.ready = True
        self.wake()

    def _bring_to_present(self, cached: Mapping[tuple[str, str], Obj]) -> None:
        """The pods as the informer's cache holds them now, once the pod list is complete: the pages
        fed the pods as they were listed, and the pod watch's changes since (a pod bound, finished,
        deleted while other kinds still listed) were not delivered (pods are not live before the
        end of :meth:`load`). A pod fed from a page whose object (or resourceVersion) the cache
        still holds is left as fed; any other is applied as cached: what only a failed first list
        had is deleted, pods bound now are fed before pending ones."""
        for key in [k for k in self._streamed if k not in cached]:
            self.apply(Change("delete", key, {"kind": kinds.POD.kind}))
        pending: list[tuple[tuple[str, str], Obj]] = []
        for key, obj in cached.items():
            fed = self._streamed.get(key)
            if fed is obj or (fed is not None and _resource_version(fed) == _resource_version(obj)):
                continue  # the very object fed (nearly every pod: no resourceVersion read)
            if _node_name(obj):
                self.apply(Change("add", key, obj))
            else:
                pending.append((key, obj))
        for key, obj in pending:
            self.apply(Change("add", key, obj))

    def page(self, number: int, objs: Sequence[Obj]) -> None:
        """A page of the pod informer's list ``number`` before its first list completed (the
        informer's ``on_page``): fed now if every other kind is in, else kept for :meth:`load`."""
        if self.ready:
            return
        if not self._others_in:
            self._early_pages.append((number, list(objs)))
            return
        self._feed_page(number, objs)

    def _feed_page(self, number: int, objs: Sequence[Obj]) -> None:
        """The page's bound pods (pending pods wait for the end of the list: _bring_to_present), those
        new to the feed counted together (:meth:`Scheduler.add_bound_pods`: the same state as one
        :meth:`apply` each), any other applied in its turn."""
        fresh: list[PodInfo] = []
        streamed, uids = self._streamed, self._uids
        for obj in objs:
            meta, spec = obj.get("metadata"), obj.get("spec")
            if type(meta) is dict and type(spec) is dict:  # as decoded: the checks below inline
                if not spec.get("nodeName"):
                    continue
                key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
                streamed[key] = obj
            else:
                if not _node_name(obj):
                    continue
                key = _key(obj, True)
                streamed[key] = obj
            pod_key = f"{key[0]}/{key[1]}"
            if pod_key in uids:
                self._add_bound(fresh)
                self.apply(Change("add", key, obj))
                continue
            self.handled += 1
            try:
                pod = self._with_priority(PodInfo.from_dict(obj))
            except Exception as err:  # what apply says of it, and nothing counted
                self.handled -= 1
                self._add_bound(fresh)
                self.apply(Change("add", key, obj))
                if not isinstance(err, GpuqError):
                    log.debug("pod %s/%s applied alone after %r", *key, err)
                continue
            if not pod.bound or pod.key != pod_key:
                self.handled -= 1
                self._add_bound(fresh)
                self.apply(Change("add", key, obj))
                continue
            self._uids[pod_key] = pod.uid
            self.assumed.discard(pod_key)
            self._seen.pop(pod_key, None)
            fresh.append(pod)
        self._add_bound(fresh)

    def _add_bound(self, pods: list[PodInfo]) -> None:
        """Count ``pods`` (bound, new to the feed) at once. An error of gpuq's own is contained to the
        pod it met, as :meth:`apply` contains it; the pods after it are applied one by one."""
        if not pods:
            return
        try:
            self.scheduler.add_bound_pods(pods)
        except Exception as err:
            counted = self.scheduler.cluster.pods
            met = max((i for i, pod in enumerate(pods) if pod.key in counted), default=0)
            ref = object_ref(kinds.POD.kind, pods[met].namespace, pods[met].name)
            consequence = "this change is skipped; the object's next change is applied afresh"
            self.scheduler.contain(ref, "apply the add of", err, consequence)
            for pod in pods[met + 1 :]:
                try:
                    self.scheduler.add_pod(pod)
                except Exception as one:
                    ref = object_ref(kinds.POD.kind, pod.namespace, pod.name)
                    self.scheduler.contain(ref, "apply the add of", one, consequence)
        pods.clear()

    def replay(self, informers: InformerSet) -> None:
        """Feed the synced caches in dependency order, then go live. Synchronous: nothing can
        interleave between the last cached object and the first live change."""
        self.informers = informers
        for kind in REPLAY_ORDER:
            if kind.kind not in informers.informers:
                continue
            items = informers[kind.kind].items()
            if kind is kinds.POD:
                ordered = sorted(items.values(), key=lambda o: not _node_name(o))
            else:
                ordered = list(items.values())
            for obj in ordered:
                self.apply(Change("add", _key(obj, kind.namespaced), obj))
        self.ready = True
        self.wake()

    def adopt_admitted(self) -> list[str]:
        """On taking the Lease, once the caches hold the previous leader's writes: the PodGroups it
        admitted (``status.phase`` Inqueue in the cache) are admitted here too
        (:meth:`scheduler.groups.GroupTracker.adopt_admitted`); returns their keys."""
        informers = self.informers
        if informers is None or kinds.POD_GROUP.kind not in informers.informers:
            return []
        phases: dict[str, str] = {}
        for (namespace, name), obj in informers[kinds.POD_GROUP.kind].items().items():
            phase = section(obj, "status").get("phase")
            if isinstance(phase, str):
                phases[f"{namespace}/{name}"] = phase
        adopted = self.scheduler.podgroups.adopt_admitted(phases)
        if adopted:
            self.wake()
        return adopted

    # -- dispatch ---------------------------------------------------------------------------------
    def apply(self, change: Change) -> None:
        """Apply one change. Whatever it holds, only this object is affected: a malformed one gets
        its Warning (Semantics 3); an error of gpuq's own is contained to it (logged with its
        traceback, counted, a Warning on it: :mod:`scheduler.containment`) and the change skipped;
        ``replay`` and the watch go on with the next object either way."""
        kind = str(change.obj.get("kind") or "")
        self.handled += 1
        try:
            if kind == kinds.POD.kind:
                self._pod(change)
            elif kind == kinds.NODE.kind:
                self._node(change)
            elif (stored := stored_kind(kind)) is not None:
                self._object(stored, change)
        except GpuqError as err:
            # A malformed object that predates the webhook (Semantics 3): say so on the object.
            ref = object_ref(kind, change.key[0], change.key[1])
            log.warning("%s", err)
            reason = FAILED_SCHEDULING if kind == kinds.POD.kind else INVALID_ANNOTATION
            self.scheduler.framework.record(EventRecord(ref, "Warning", reason, str(err)))
        except Exception as err:
            ref = object_ref(kind or "Object", change.key[0], change.key[1])
            consequence = "this change is skipped; the object's next change is applied afresh"
            self.scheduler.contain(ref, f"apply the {change.type} of", err, consequence)

    def _node(self, change: Change) -> None:
        name = change.key[1]
        if change.type == "delete":
            self._nodes.pop(name, None)
            self.scheduler.remove_node(name)
            return
        node = NodeInfo.from_dict(change.obj)
        if self._nodes.get(name) == node:
            return  # a heartbeat: nothing the scheduler reads changed
        self._nodes[name] = node
        self.scheduler.set_node(node)

    def _object(self, kind: Kind, change: Change) -> None:
        namespace, name = change.key
        if change.type == "delete":
            self.scheduler.objects.delete(kind, namespace, name)
            return
        if change.old is not None and not object_update_matters(kind.kind, change.old, change.obj):
            # Keep the stored copy current (status readers, resourceVersion-conditional writes)
            # without waking anything.
            self.scheduler.objects.refresh(change.obj)
            return
        self.scheduler.put_object(change.obj)

    def _pod(self, change: Change) -> None:
        namespace, name = change.key
        key = f"{namespace}/{name}"
        if change.type == "delete":
            self._forget_pod(key)
            return
        pod = PodInfo.from_dict(change.obj)
        known_uid = self._uids.get(key)
        if known_uid is not None and pod.uid and known_uid != pod.uid:
            # Deleted and re-created under the same name while we were not looking.
            self._forget_pod(key)
        self._uids[key] = pod.uid
        if pod.bound:
            # Counted even on a node not known (deleted, or not seen yet): scheduler.cluster.state.
            self.assumed.discard(key)
            ours = self.scheduler.cluster.pods.get(key)  # assumed by our cycle before its bind
            if ours is None or ours.node_name != pod.node_name:
                self._seen.pop(key, None)  # bound by another hand: no wait of ours to report
            self.scheduler.add_pod(self._with_priority(pod))
            return
        if not pod.deleting and (
            key in self.assumed or (key in self.scheduler.cluster.pods and known_uid == pod.uid)
        ):
            return  # ours, bound or being bound; the watch has not caught up yet
        if change.old is not None and known_uid == pod.uid and not pod_update_matters(change.old, change.obj):
            if pod.nominated_node_name and key in self.scheduler.pending:
                # Our own condition write, or the leader's nomination seen by a standby: keep it.
                self.scheduler.nominator.update(self._with_priority(pod))
            return
        self.scheduler.add_pod(self._with_priority(pod))
        if key in self.scheduler.pending and key not in self._seen:
            created = rfc3339_seconds(pod.creation_timestamp)
            waited = max(0.0, self.wall_clock() - created) if created is not None else 0.0
            self._seen[key] = (self.clock(), waited)

    def _with_priority(self, pod: PodInfo) -> PodInfo:
        if pod.priority is not None:
            return pod
        return replace(pod, priority=resolve_priority(pod, self.scheduler.objects))

    def _forget_pod(self, key: str) -> None:
        self.scheduler.preempted.pop(key, None)  # gone for good: nothing left to shield, no leak
        self._uids.pop(key, None)
        self.assumed.discard(key)
        self._seen.pop(key, None)
        self.scheduler.delete_pod(key)

    # -- assumed pods ------------------------------------------------------------------------------
    def assume(self, key: str) -> None:
        """A bind of ``key`` succeeded: keep it counted until the watch shows it bound or deleted.
        Not if its deletion was observed while the bind was in flight (nothing left to confirm)."""
        seen = self._seen.pop(key, None)
        pod = self.scheduler.cluster.pods.get(key)
        if seen is not None and pod is not None:
            first_seen, waited = seen
            self.on_waited(self.scheduler.podgroups.queue_of(pod), waited + self.clock() - first_seen)
        if key in self.scheduler.cluster.pods:
            self.assumed.add(key)

    def settled(self, pod: PodInfo, node: str) -> Result | None:
        """What the watch already says of a bind of ``pod`` to ``node`` about to be sent: None when
        it may go; GONE when the pod is deleted, deleting or re-created under another UID (a pod
        whose delete was observed is never bound); DONE / ELSEWHERE when it is bound already."""
        if self.informers is None or kinds.POD.kind not in self.informers.informers:
            return None
        cached = self.informers[kinds.POD.kind].get(pod.namespace, pod.name)
        if cached is None:
            return Result.GONE
        meta = cached.get("metadata") or {}
        if meta.get("deletionTimestamp") or (pod.uid and meta.get("uid") != pod.uid):
            return Result.GONE
        bound_to = (cached.get("spec") or {}).get("nodeName")
        if not bound_to:
            return None
        return Result.DONE if bound_to == node else Result.ELSEWHERE


def _key(obj: Obj, namespaced: bool) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return (str(meta.get("namespace") or "") if namespaced else "", str(meta.get("name") or ""))


def _resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _node_name(pod: Obj) -> object:
    """A cached pod's ``spec.nodeName`` for the replay's order (None when the spec is not a map:
    the pod's own apply then says what is wrong with it)."""
    spec = pod.get("spec")
    return spec.get("nodeName") if isinstance(spec, Mapping) else None
