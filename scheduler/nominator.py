"""The nominator: which pending pod a preemption made room for, on which node, and that room held for
it in the cycle (kube-scheduler's nominator, ``pkg/scheduler/backend/queue/nominator.go``, and the
nominated pods its framework adds in Filter; the rules are :mod:`common.model.nomination`'s).

A pod is nominated when a preemption for it evicts victims (the cycle writes the node into its
``status.nominatedNodeName``), or when it is seen pending with that field set and this scheduler
has not decided on its nomination itself (a restart, or a standby taking over: the API holds the
nomination, as kube-scheduler's queue reads it back; once this scheduler decided, the API's copy is
only an echo of its own writes, which may arrive late). It stays nominated until it is assumed on a
node, bound, deleted, or a preemption for it finds nothing any more; the nomination of a pod whose
node is removed is dropped.

:meth:`Nominator.reserved_for` is the cycle's part: for the duration of one pod's attempt (queue
checks, PreFilter, Filter, PostFilter) the nominated pods that hold room for it are assumed on their
nominated nodes in the cluster state, so every plugin (node resources, each quota ledger) sees the
room taken; they are taken out again before Score. While assumed they are *counted*: not running,
so no victims (:meth:`Nominator.is_counted`) and no gang members ready.

Extensions of preemption (disruption budgets, placement rules) build on this: a preemption decides
victims and a node, :meth:`Nominator.nominate` records it, the cycle holds the room.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gpuq_k8s.common.model.nomination import holds_room_for
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.cluster.state import ClusterState


@dataclass(frozen=True, slots=True)
class Nomination:
    pod: PodInfo  # the pending pod as last seen (unbound)
    node: str


class Nominator:
    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.nominations: dict[str, Nomination] = {}
        self._counted: set[str] = set()
        self._decided: set[str] = set()  # pods whose nomination this scheduler decided (set or cleared)

    # -- the nominations --------------------------------------------------------------------------
    def nominate(self, pod: PodInfo, node: str) -> None:
        """``pod`` (pending) is nominated to ``node``; replaces an earlier nomination."""
        self.nominations[pod.key] = Nomination(pod.with_node_name(""), node)
        self._decided.add(pod.key)

    def clear(self, key: str) -> None:
        """This scheduler decided ``key`` holds no room any more (written as a null)."""
        self.nominations.pop(key, None)
        self._decided.add(key)

    def update(self, pod: PodInfo) -> None:
        """A pending pod changed (priority, request): its nomination keeps the current version; the
        nomination read from the API (``status.nominatedNodeName``) is taken when it has none and
        this scheduler never decided on it."""
        current = self.nominations.get(pod.key)
        if current is not None:
            self.nominations[pod.key] = Nomination(pod, current.node)
        elif pod.nominated_node_name and pod.key not in self._decided:
            self.nominations[pod.key] = Nomination(pod, pod.nominated_node_name)

    def forget(self, key: str) -> None:
        """The pod is placed, bound or gone: nothing left to hold or remember."""
        self.nominations.pop(key, None)
        self._decided.discard(key)

    def node_of(self, key: str) -> str:
        """The node pod ``key`` is nominated to, or ""."""
        nomination = self.nominations.get(key)
        return nomination.node if nomination is not None else ""

    def node_removed(self, node: str) -> None:
        for key in [k for k, n in self.nominations.items() if n.node == node]:
            self.clear(key)

    def on_node(self, node: str) -> list[PodInfo]:
        """The pods nominated to ``node`` (kube-scheduler's NominatedPodsForNode), by key."""
        return [n.pod for key, n in sorted(self.nominations.items()) if n.node == node]

    # -- the cycle's part -------------------------------------------------------------------------
    def is_counted(self, key: str) -> bool:
        """Whether pod ``key`` is in the cluster state only as a nominated pod holding its room."""
        return key in self._counted

    @contextmanager
    def reserved_for(self, pod: PodInfo) -> Iterator[None]:
        """Within the block, every nominated pod that holds room for ``pod`` counts on its node."""
        if not self.nominations:
            yield
            return
        cluster = self.cluster
        added: list[str] = []
        try:
            for key, nomination in sorted(self.nominations.items()):
                if key in cluster.pods or not holds_room_for(nomination.pod, pod):
                    continue  # assumed already (waiting in Permit, being bound): counted as such
                row = cluster.row_of.get(nomination.node)
                if row is None or not cluster.alive[row]:
                    continue
                self._counted.add(key)
                added.append(key)
                cluster.add_pod(nomination.pod.with_node_name(nomination.node))
            yield
        finally:
            for key in reversed(added):
                cluster.remove_pod(key)
                self._counted.discard(key)
