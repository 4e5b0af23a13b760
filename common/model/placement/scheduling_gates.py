"""Scheduling gates (``spec.schedulingGates``, KEP-3521; kube-scheduler's SchedulingGates plugin, v1.36).

A pod that carries a gate is never attempted: kube-scheduler keeps it out of its active queue (the
PreEnqueue extension point) and the apiserver refuses to bind it. Gates can only be removed after the
pod is created, never added (API validation), so a pod leaves the gated set on the update that
removes its last gate.
"""

from __future__ import annotations

from collections.abc import Sequence


def waiting_for(gates: Sequence[str]) -> str:
    """kube-scheduler's PreEnqueue message for a gated pod: ``waiting for scheduling gates: [foo bar]``
    (Go's ``%v`` of the names)."""
    return f"waiting for scheduling gates: [{' '.join(gates)}]"
