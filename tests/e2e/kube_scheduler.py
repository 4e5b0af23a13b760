"""The reference kube-scheduler as the differential test and the side-by-side bench run it: the v1.36
binary the harness built (tests/e2e/controlplane/build.sh), one profile named after the pods'
scheduler, no secure port, client qps/burst 5000 (its default 50/100 would be the ceiling)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.controlplane.harness import ControlPlane


def kube_scheduler_argv(
    plane: ControlPlane,
    workdir: Path,
    scheduler_name: str,
    *,
    verbosity: int = 2,
    leader_election: dict[str, Any] | None = None,
) -> list[str]:
    """The command line of kube-scheduler serving ``scheduler_name`` on ``plane``; its configuration
    is written to ``workdir/kube-scheduler.yaml``. ``leader_election`` replaces the configuration's
    ``leaderElection`` (default: off)."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(plane.kubeconfig), "qps": 5000, "burst": 5000},
        "leaderElection": leader_election if leader_election is not None else {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}],
    }
    path = workdir / "kube-scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    return [str(plane.binaries.kube_scheduler), f"--config={path}", "--secure-port=0", f"-v={verbosity}"]
