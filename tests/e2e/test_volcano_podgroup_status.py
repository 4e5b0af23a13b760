"""gpuq on Volcano's own PodGroup CRD, which declares no status subresource (``subresources: {}`` in
volcano-sh/volcano's config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml): a PATCH of
``podgroups/status`` is a 404 there while the PodGroup exists. gpuq then writes the status on the
object itself, as Volcano's scheduler updates the whole PodGroup (common/kube/status.py), so the
enqueue action's phase reaches the API. A control plane of its own: the shared one has gpuq's CRDs.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster_fixtures import SchedulerProcess, scheduler_starter
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.manifests import DEPLOY, documents

pytestmark = pytest.mark.e2e

POD_GROUPS = "podgroups.scheduling.volcano.sh"


def _crds() -> list[dict[str, Any]]:
    """gpuq's CRDs, the PodGroup's made Volcano's: no status subresource."""
    out: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "crds").glob("*_*.yaml")):
        (crd,) = documents(path.read_text())
        if crd["metadata"]["name"] == POD_GROUPS:
            crd = copy.deepcopy(crd)
            for version in crd["spec"]["versions"]:
                version["subresources"] = {}
        out.append(crd)
    return out


@pytest.fixture(scope="module")
def volcano_plane() -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        crds = _crds()
        plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(crds))
        names = [f"crd/{c['metadata']['name']}" for c in crds]
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        yield plane


async def test_podgroup_status_is_written_on_volcanos_crd_without_the_subresource(
    volcano_plane: ControlPlane, tmp_path: Path
) -> None:
    crd = json.loads(volcano_plane.kubectl("get", f"crd/{POD_GROUPS}", "-o", "json").stdout)
    assert all(not v.get("subresources") for v in crd["spec"]["versions"])  # as Volcano ships it
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "default"},
        "spec": {"weight": 1},
    }
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"minMember": 1, "queue": "default"},
    }
    volcano_plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump_all([queue, group]))
    started: list[SchedulerProcess] = []
    start = scheduler_starter(volcano_plane.kubeconfig, tmp_path, started)
    scheduler = start("gpuq-scheduler")
    try:
        await scheduler.wait_ready(60.0)
        phase = ""
        for _ in range(300):
            found = volcano_plane.kubectl("get", "podgroup", "pg", "-n", "default", "-o", "json").stdout
            phase = str((json.loads(found).get("status") or {}).get("phase") or "")
            if phase:
                break
            await asyncio.sleep(0.1)
        assert phase == "Inqueue", scheduler.log()
        assert "PodGroup has no status subresource: status patched on the object" in scheduler.log(400)
    finally:
        for process in started:
            process.terminate()
