"""Scheduling gates (``spec.schedulingGates``, KEP-3521; kube-scheduler's SchedulingGates plugin, v1.36).

A pod that carries a gate is never attempted: kube-scheduler keeps it out of its active queue (the
PreEnqueue extension point) and the apiserver refuses to bind it. Gates can only be removed after the
pod is created, never added (API validation), so a pod leaves the gated set on the update that
removes its last gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuq_k8s.common.model import wire
from gpuq_k8s.common.model.errors import InvalidValue


def scheduling_gates(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of a pod spec's ``schedulingGates``, in order; raises :class:`InvalidValue` naming the
    field for a malformed entry (a gate without a name, a name that is no string)."""
    gates = spec.get("schedulingGates")
    if not gates:
        return ()
    names: list[str] = []
    for i, gate in enumerate(wire.items(gates, "spec.schedulingGates")):
        name = gate.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidValue(f"spec.schedulingGates[{i}].name", name, "a non-empty gate name")
        names.append(name)
    return tuple(names)


def waiting_for(gates: Sequence[str]) -> str:
    """kube-scheduler's PreEnqueue message for a gated pod: ``waiting for scheduling gates: [foo bar]``
    (Go's ``%v`` of the names)."""
    return f"waiting for scheduling gates: [{' '.join(gates)}]"
