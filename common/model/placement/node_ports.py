"""Host ports (kube-scheduler's NodePorts plugin and ``HostPortInfo``, v1.36).

A pod's host ports are the ``ports`` with a ``hostPort`` of its containers and of its sidecars (init
containers with ``restartPolicy: Always``, which run for the pod's whole life); a classic init container
has finished before the pod runs, so its ports are not counted (``schedutil.GetHostPorts``). An empty
``hostIP`` is ``0.0.0.0`` and an empty ``protocol`` is TCP. Two ports conflict when protocol and port
are equal and either IP is ``0.0.0.0`` or the IPs are equal (``HostPortInfo.CheckConflict``): a pod
asking ``0.0.0.0:80`` fits no node where port 80 of that protocol is bound on any IP, and a pod asking
``127.0.0.1:80`` no node where it is bound on ``0.0.0.0`` or ``127.0.0.1``.

:class:`PortIndex` keeps the ports in use of every node row at once (bound and assumed pods), so the
filter is a few vector operations per port asked, whatever the node count. It counts each
``(ip, protocol, port)`` per pod holding it: a port two pods hold (bound by another hand) stays in use
until both are gone, where kube's set forgets it with the first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.pod_spec import WILDCARD_IP, HostPort

BoolArray = npt.NDArray[np.bool_]
Int32Array = npt.NDArray[np.int32]

# kube-scheduler's ErrReason.
NO_FREE_PORTS: Final = "node(s) didn't have free ports for the requested pod ports"


def conflicts(want: HostPort, used: Collection[HostPort]) -> bool:
    """Whether ``want`` conflicts with the ports ``used`` on a node (``HostPortInfo.CheckConflict``)."""
    return any(
        held.protocol == want.protocol
        and held.port == want.port
        and (WILDCARD_IP in (want.ip, held.ip) or held.ip == want.ip)
        for held in used
    )


def fits(wants: Iterable[HostPort], used: Collection[HostPort]) -> bool:
    """Whether a pod asking ``wants`` fits a node whose pods hold ``used`` (NodePorts' ``fitsPorts``)."""
    return not any(conflicts(want, used) for want in wants)


class PortIndex:
    """The host ports held on every node row (kube's ``NodeInfo.UsedPorts`` of all nodes at once).

    Per ``(protocol, port)`` a count per row of the pods holding it on any IP, and per
    ``(protocol, port, ip)`` a count per row: :meth:`conflicts` reads one or two of those vectors per
    port a pod asks for."""

    def __init__(self) -> None:
        self._rows = 0
        self._any: dict[tuple[str, int], Int32Array] = {}
        self._by_ip: dict[tuple[str, int, str], Int32Array] = {}
        self._held: dict[int, Counter[HostPort]] = {}

    def grow(self, rows: int) -> None:
        """Room for node rows ``[:rows]`` (a new row holds no port)."""
        if rows <= self._rows:
            return
        capacity = max(rows, 2 * self._rows, 16)
        self._any = {key: _grown(counts, capacity) for key, counts in self._any.items()}
        self._by_ip = {key: _grown(counts, capacity) for key, counts in self._by_ip.items()}
        self._rows = capacity

    def _counts(self, table: dict[Any, Int32Array], key: Any) -> Int32Array:
        counts = table.get(key)
        if counts is None:
            counts = table[key] = np.zeros(self._rows, dtype=np.int32)
        return counts

    def add(self, row: int, ports: Iterable[HostPort]) -> None:
        """A pod holding ``ports`` counts on ``row``."""
        self._change(row, ports, 1)

    def remove(self, row: int, ports: Iterable[HostPort]) -> None:
        """A pod holding ``ports`` no longer counts on ``row`` (each was added before)."""
        self._change(row, ports, -1)

    def _change(self, row: int, ports: Iterable[HostPort], step: int) -> None:
        self.grow(row + 1)
        held = self._held.setdefault(row, Counter())
        for port in ports:
            self._counts(self._any, (port.protocol, port.port))[row] += step
            self._counts(self._by_ip, (port.protocol, port.port, port.ip))[row] += step
            held[port] += step
            if held[port] <= 0:
                del held[port]
        if not held:
            del self._held[row]

    def used(self, row: int) -> frozenset[HostPort]:
        """The ports held on ``row``."""
        return frozenset(self._held.get(row, ()))

    def conflicts(self, wants: Iterable[HostPort], n: int) -> BoolArray:
        """Rows ``[:n]`` where a port of ``wants`` conflicts with one held there."""
        self.grow(n)
        out = np.zeros(n, dtype=np.bool_)
        for want in wants:
            if want.ip == WILDCARD_IP:
                vectors = [self._any.get((want.protocol, want.port))]
            else:
                vectors = [
                    self._by_ip.get((want.protocol, want.port, WILDCARD_IP)),
                    self._by_ip.get((want.protocol, want.port, want.ip)),
                ]
            for counts in vectors:
                if counts is not None:
                    out |= counts[:n] > 0
        return out


def _grown(counts: Int32Array, capacity: int) -> Int32Array:
    grown = np.zeros(capacity, dtype=np.int32)
    grown[: counts.shape[0]] = counts
    return grown
