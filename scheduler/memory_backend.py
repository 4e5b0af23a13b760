"""An in-memory :class:`~scheduler.backend.ClusterBackend`: ``gpuq simulate`` and the tests.

Every call completes before it returns and is recorded, so a run can be replayed as a report.

PreBind plans are carried out on the scheduler's object store: each write is applied as the
apiserver would (a merge patch, or a strategic one, refused when it names a resourceVersion or a UID
the object no longer has; each write gives the object a new one), then the in-memory controllers act
as a cluster's would (:attr:`MemoryBackend.controllers`; by default the PersistentVolume controller
and a provisioner, ``common/model/placement/volumes/controller.py``), then the plan's condition is
asked once: nothing else will happen later, so a condition not met by then is the plan's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.events import EventRecord
from gpuq_k8s.common.model.kinds import Kind
from gpuq_k8s.common.model.placement.volumes.controller import reconcile
from gpuq_k8s.common.model.placement.volumes.csi_nodes import parse_csi_node
from gpuq_k8s.common.model.placement.volumes.storage import Catalog
from gpuq_k8s.common.model.placement.volumes.storage_classes import parse_storage_class
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.prebind import (
    ApiWrite,
    PreBindPlan,
    State,
    apply_merge_patch,
    apply_strategic_patch,
    resource_version,
)
from gpuq_k8s.common.model.wire import Obj
from gpuq_k8s.scheduler.backend import SUCCESS, Done, Outcome, Result
from gpuq_k8s.scheduler.cluster.objects import ObjectStore
from gpuq_k8s.scheduler.cluster.state import ClusterState

# An in-memory controller: what it writes, given the store and the nodes' labels by name.
Controller = Callable[[ObjectStore, Mapping[str, Mapping[str, str]]], list[Obj]]
_CONTROLLER_ROUNDS: Final = 8


def volume_controller(objects: ObjectStore, nodes: Mapping[str, Mapping[str, str]]) -> list[Obj]:
    """The PersistentVolume controller and a provisioner (``controller.reconcile``) over the store."""
    claims = [obj for _, _, obj in objects.list(kinds.PERSISTENT_VOLUME_CLAIM)]
    if not claims:
        return []
    catalog = Catalog.of(
        classes=(parse_storage_class(obj) for _, _, obj in objects.list(kinds.STORAGE_CLASS)),
        csi_nodes=(parse_csi_node(obj) for _, _, obj in objects.list(kinds.CSI_NODE)),
    )
    volumes = [obj for _, _, obj in objects.list(kinds.PERSISTENT_VOLUME)]
    return reconcile(claims, volumes, catalog, nodes)


class _NodeLabels(Mapping[str, Mapping[str, str]]):
    """The nodes' labels by name, gathered only if a controller reads them (most rounds have nothing
    to do: a DRA PreBind at 5,000 nodes must not copy every node's labels)."""

    def __init__(self, cluster: ClusterState) -> None:
        self._cluster = cluster
        self._labels: dict[str, Mapping[str, str]] | None = None

    def _all(self) -> dict[str, Mapping[str, str]]:
        if self._labels is None:
            self._labels = {node.name: node.labels for node in self._cluster.nodes if node is not None}
        return self._labels

    def __getitem__(self, name: str) -> Mapping[str, str]:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


@dataclass(frozen=True, slots=True)
class PodCondition:
    reason: str
    message: str
    nominated_node: str = ""


@dataclass(slots=True)
class MemoryBackend:
    objects: ObjectStore | None = None
    bindings: dict[str, str] = field(default_factory=dict)
    evictions: dict[str, str] = field(default_factory=dict)
    events: list[EventRecord] = field(default_factory=list)
    conditions: dict[str, PodCondition] = field(default_factory=dict)
    statuses: dict[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)
    # Pod keys whose bind should fail (tests of the Unreserve path).
    fail_binds: set[str] = field(default_factory=set)
    # Pod key -> the result its bind reports instead of DONE (tests of each bind outcome).
    bind_results: dict[str, Result] = field(default_factory=dict)
    # Pod key -> binds held back: ``done`` is called by :meth:`complete` (a bind in flight).
    held: set[str] = field(default_factory=set)
    in_flight: dict[str, tuple[str, Done]] = field(default_factory=dict)
    # PreBind: the cluster's nodes (their labels, for the controllers), the controllers, every write
    # carried out (pod key, object ref, patch) and the rollbacks, in order.
    cluster: ClusterState | None = None
    controllers: tuple[Controller, ...] = (volume_controller,)
    writes: list[tuple[str, str, Mapping[str, Any]]] = field(default_factory=list)
    rolled_back: list[tuple[str, str]] = field(default_factory=list)
    _version: int = 0
    _uids: int = 0
    # How evictions end: GONE (deleted at once, ``gpuq simulate``) or DONE (accepted, the victim
    # terminating with a grace period until the test delivers its delete, as in a cluster).
    evict_result: Result = Result.GONE

    def bind(self, pod: PodInfo, node: str, done: Done) -> None:
        if pod.key in self.held:
            self.in_flight[pod.key] = (node, done)
            return
        self._answer(pod.key, node, done)

    def complete(self, key: str, result: Result = Result.DONE) -> None:
        """Answer the held bind of ``key`` with ``result``."""
        node, done = self.in_flight.pop(key)
        self.held.discard(key)
        self.bind_results.setdefault(key, result)
        self._answer(key, node, done)

    def _answer(self, key: str, node: str, done: Done) -> None:
        result = Result.NOT_BOUND if key in self.fail_binds else self.bind_results.get(key, Result.DONE)
        if result is not Result.DONE:
            done(Outcome(result, f"binding Pod/{key} to {node}: {result.value}"))
            return
        self.bindings[key] = node
        self.conditions.pop(key, None)
        done(SUCCESS)

    # -- PreBind ---------------------------------------------------------------------------------------
    def pre_bind(self, pod: PodInfo, node: str, plans: Sequence[PreBindPlan], done: Done) -> None:
        carried: list[PreBindPlan] = []
        for plan in plans:
            carried.append(plan)
            failure = ""
            for write in plan.writes:
                error = self._write(write)
                if error:
                    failure = plan.failure(f"{write.ref}: {error}")
                    break
                self.writes.append((pod.key, write.ref, write.patch))
            if not failure:
                self.run_controllers()
                progress = plan.ready(self._lookup)
                if progress.state is State.FAILED:
                    failure = plan.failure(progress.message)
                elif progress.state is State.WAIT:
                    failure = plan.timed_out()
            if failure:
                self.roll_back(pod, carried)
                done(Outcome(Result.NOT_BOUND, failure))
                return
        done(SUCCESS)

    def roll_back(self, pod: PodInfo, plans: Sequence[PreBindPlan]) -> None:
        for plan in reversed(plans):
            for write in plan.rollback:
                if not self._write(write):
                    self.rolled_back.append((pod.key, write.ref))

    def run_controllers(self) -> int:
        """Let the in-memory controllers act until they have nothing left to write; returns how many
        objects they wrote."""
        if self.objects is None:
            return 0
        nodes: Mapping[str, Mapping[str, str]] = {} if self.cluster is None else _NodeLabels(self.cluster)
        written = 0
        for _ in range(_CONTROLLER_ROUNDS):
            changed = [obj for controller in self.controllers for obj in controller(self.objects, nodes)]
            if not changed:
                break
            for obj in changed:
                self._store(obj)
            written += len(changed)
        return written

    def _lookup(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        return None if self.objects is None else self.objects.get(kind, namespace, name)

    def _write(self, write: ApiWrite) -> str:
        """Apply ``write`` as the apiserver would; the error message, or "" when it was applied."""
        if write.kind == kinds.POD:
            # The in-memory pods are the cluster state's, not objects: a pod's annotation (GPUShare's
            # tensor-fusion.ai/gpu-ids) is recorded in ``writes``; the plugin reports what it holds.
            return ""
        current = self._lookup(write.kind, write.namespace, write.name)
        if write.verb == "POST":
            if current is not None:
                return f'{write.kind.plural} "{write.name}" already exists'
            self._uids += 1
            self._store(apply_merge_patch(write.patch, {"metadata": {"uid": f"memory-uid-{self._uids}"}}))
            return ""
        if current is None:
            return f'{write.kind.plural} "{write.name}" not found'
        if write.verb == "DELETE":
            assert self.objects is not None
            self.objects.delete(write.kind, write.namespace, write.name)
            return ""
        wanted = str((write.patch.get("metadata") or {}).get("resourceVersion") or "")
        if wanted and wanted != resource_version(current):
            return (
                f'Operation cannot be fulfilled on {write.kind.plural} "{write.name}": the object has '
                "been modified; please apply your changes to the latest version and try again"
            )
        meta = write.patch.get("metadata") or {}
        wanted_uid = str(meta.get("uid") or "")
        current_uid = str((current.get("metadata") or {}).get("uid") or "")
        if wanted_uid and wanted_uid != current_uid:
            return (
                f"Precondition failed: UID in precondition: {wanted_uid}, UID in object meta: {current_uid}"
            )
        if write.merge_keys is not None:
            self._store(apply_strategic_patch(current, write.patch, write.merge_keys))
        else:
            self._store(apply_merge_patch(current, write.patch))
        return ""

    def _store(self, obj: Obj) -> None:
        assert self.objects is not None
        self._version += 1
        stamped = apply_merge_patch(obj, {"metadata": {"resourceVersion": str(self._version)}})
        self.objects.put(stamped)

    def evict(self, pod: PodInfo, reason: str, done: Done) -> None:
        """Deleted at once by default (no grace period to wait out in memory): GONE, the scheduler
        forgets it; with ``evict_result`` DONE it terminates until its delete is fed."""
        self.evictions[pod.key] = reason
        if self.evict_result is Result.GONE:
            self.bindings.pop(pod.key, None)
        done(Outcome(self.evict_result, f"Pod/{pod.key} evicted"))

    def record_event(self, event: EventRecord) -> None:
        self.events.append(event)

    def set_pod_condition(
        self, pod: PodInfo, reason: str, message: str, nominated_node: str | None = None
    ) -> None:
        previous = self.conditions.get(pod.key)
        if nominated_node is None:
            nominated_node = previous.nominated_node if previous is not None else ""
        self.conditions[pod.key] = PodCondition(reason, message, nominated_node)

    def patch_status(self, kind: Kind, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.statuses[(kind.kind, namespace, name)] = status
        if self.objects is not None:
            self.objects.set_status(kind, namespace, name, status)
