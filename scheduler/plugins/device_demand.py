"""Which pending pods' device demand is out of date (issue 26; docs/design.md "Quota over devices").

A pending pod's device demand, what its claims still to allocate (and its implicit claim for the
extended resources a DeviceClass serves) ask of a quota before any device is chosen, depends on
objects other than the pod: the DeviceClasses (a request's class, the classes serving an extended
resource), the ResourceSlices (the card types of the devices a request could take) and the claims
the pod names. kube-scheduler requeues a pod on those objects' events (DynamicResources'
EventsToRegister) and computes it anew in the next attempt; the quota plugins that keep a pending
pod's demand between attempts (capacity-card's card demand for the job-mode enqueue check,
proportion's Queue request) keep a :class:`StaleDemand` and recompute the pods it names:

* a DeviceClass or ResourceSlice added, changed or deleted: every tracked pod;
* a ResourceClaim the pod names (its own, a template's generated one, its implicit claim) created,
  deleted, its spec changed, or its allocation or ``reservedFor`` changed: the pods naming it, except
  those the claim is now reserved for (their binding is under way: the claim is theirs);
* any change of the kinds the owner names (``also``: capacity-card's Queues, which decide whether a
  pod's demand counts): every tracked pod.

A template claim the resource-claim-controller makes is written into the pod's
``status.resourceClaimStatuses``: a pod update, which recomputes the demand anyway.

Nothing is computed on the event: the owner calls :meth:`StaleDemand.take` before it reads the demand,
so a driver publishing a thousand slices costs one recomputation per pod, and a burst of bindings (each
writes its own claim, reserved for its pod) none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.framework.interfaces import Handle
from gpuq_k8s.scheduler.plugins.dra_extended import device_claim_keys


def may_use_devices(pod: PodInfo) -> bool:
    """Whether ``pod``'s device demand can ever be other than none: it has claims, or asks an
    extended resource (a DeviceClass may come to serve it)."""
    return bool(pod.claim_sources) or bool(pod.extended_spec)


class StaleDemand:
    def __init__(
        self,
        handle: Handle,
        on_stale: Callable[[], None] | None = None,
        also: frozenset[Kind] = frozenset(),
    ) -> None:
        self._handle = handle
        self._every = frozenset({kinds.DEVICE_CLASS, kinds.RESOURCE_SLICE, *also})
        self._on_stale = on_stale
        self._pods: dict[str, tuple[str, tuple[str, ...]]] = {}  # pod key -> (uid, claim keys)
        self._claims: dict[str, set[str]] = {}  # claim key -> the tracked pods naming it
        self._stale: set[str] = set()
        self._all = False
        handle.objects.watch(self._changed)

    # -- the owner's pods ---------------------------------------------------------------------------
    def track(self, pod: PodInfo) -> None:
        """``pod`` is pending and its demand was just computed: recompute it on the events above."""
        self.forget(pod.key)
        if not may_use_devices(pod):
            return
        keys = tuple(device_claim_keys(pod))
        self._pods[pod.key] = (pod.uid, keys)
        for key in keys:
            self._claims.setdefault(key, set()).add(pod.key)

    def forget(self, pod_key: str) -> None:
        """The pod is bound or gone: no demand of its own to keep."""
        tracked = self._pods.pop(pod_key, None)
        self._stale.discard(pod_key)
        if tracked is None:
            return
        for key in tracked[1]:
            naming = self._claims.get(key)
            if naming is not None:
                naming.discard(pod_key)
                if not naming:
                    del self._claims[key]

    def mark_all(self) -> None:
        if self._pods:
            self._all = True
            if self._on_stale is not None:
                self._on_stale()

    def take(self) -> list[PodInfo]:
        """The pending pods whose demand is out of date, in key order (then current until the next
        event); a pod no longer pending is forgotten."""
        if not self._all and not self._stale:
            return []
        keys = sorted(self._pods) if self._all else sorted(self._stale)
        self._all = False
        self._stale.clear()
        out: list[PodInfo] = []
        for key in keys:
            pod = self._handle.pending_pod(key)
            if pod is None:
                self.forget(key)
            else:
                out.append(pod)
        return out

    # -- the store's changes ------------------------------------------------------------------------
    def _changed(self, kind: Kind, namespace: str, name: str, old: Obj | None, new: Obj | None) -> None:
        if kind in self._every:
            self.mark_all()
            return
        if kind is not kinds.RESOURCE_CLAIM:
            return
        naming = self._claims.get(f"{namespace}/{name}")
        if not naming or not _demand_may_change(old, new):
            return
        reserved = _reserved_uids(new)
        stale = [key for key in naming if self._pods[key][0] not in reserved]
        if stale:
            self._stale.update(stale)
            if self._on_stale is not None:
                self._on_stale()


def _status(obj: Obj | None) -> Mapping[str, object]:
    status = obj.get("status") if obj is not None else None
    return status if isinstance(status, Mapping) else {}


def _demand_may_change(old: Obj | None, new: Obj | None) -> bool:
    """Created, deleted, its requests, allocation or reservations changed (not a finalizer or a
    label)."""
    if old is None or new is None:
        return True
    before, after = _status(old), _status(new)
    return (
        old.get("spec") != new.get("spec")
        or before.get("allocation") != after.get("allocation")
        or before.get("reservedFor") != after.get("reservedFor")
    )


def _reserved_uids(claim: Obj | None) -> frozenset[str]:
    entries = _status(claim).get("reservedFor")
    if not isinstance(entries, list):
        return frozenset()
    return frozenset(str(e.get("uid")) for e in entries if isinstance(e, Mapping))
