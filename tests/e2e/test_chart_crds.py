"""gpuq on a cluster that already runs Volcano (issue 27): the CRDs another project installed stay
exactly as they are, whichever way gpuq is installed.

A control plane of its own holds "Volcano's" Queue and PodGroup CRDs and "scheduler-plugins'"
ElasticQuota CRD, each different from gpuq's copy (another owner's labels and annotations; PodGroup
without the status subresource, as upstream Volcano has it; Queue without gpuq's printer columns), and
no GPUResourceQuota CRD. Then:

- `helm install` of the packaged chart creates only the missing CRD (Helm creates a CRD of crds/ only
  when absent, one file at a time, and skips an existing one whatever its content); the others keep
  their resourceVersion, generation, spec, labels and annotations; the NOTES name them. `helm upgrade`
  and `helm uninstall` leave every CRD alone.
- deploy/: `kubectl apply -k deploy/` carries no CRD at all (it is safe on any cluster), and
  `kubectl create -k deploy/crds`, the documented way to add the missing CRDs, refuses the existing ones
  (AlreadyExists) without touching them.
- On the same cluster, `helm install` of a canary beside the first release succeeds (no object in
  common), and a second release of the same name in another namespace is refused by Helm.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.manifests import DEPLOY, NAMESPACE, documents, render

pytestmark = pytest.mark.e2e

Doc = dict[str, Any]
QUEUES = "queues.scheduling.volcano.sh"
POD_GROUPS = "podgroups.scheduling.volcano.sh"
ELASTIC_QUOTAS = "elasticquotas.scheduling.x-k8s.io"
GPU_RESOURCE_QUOTAS = "gpuresourcequotas.tensor-fusion.ai"
FOREIGN = (QUEUES, POD_GROUPS, ELASTIC_QUOTAS)


def gpuq_crd(name: str) -> Doc:
    group = name.split(".", 1)[1]
    (crd,) = documents((DEPLOY / "crds" / f"{group}_{name.split('.', 1)[0]}.yaml").read_text())
    return crd


def foreign_crd(name: str) -> Doc:
    """gpuq's copy made into another project's: its owner's metadata, and a spec that differs."""
    crd = copy.deepcopy(gpuq_crd(name))
    owner = "volcano" if "volcano" in name else "scheduler-plugins"
    crd["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/name": owner}
    crd["metadata"]["annotations"] = {
        **crd["metadata"].get("annotations", {}),
        "meta.helm.sh/release-name": owner,
        "meta.helm.sh/release-namespace": f"{owner}-system",
        "controller-gen.kubebuilder.io/version": "v0.16.5",
    }
    (version,) = crd["spec"]["versions"]
    if name == POD_GROUPS:
        version.pop("subresources")  # upstream Volcano's PodGroup has no status subresource
    elif name == QUEUES:
        version.pop("additionalPrinterColumns")
    else:
        crd["spec"]["names"]["shortNames"] = ["eq"]
    return crd


def state(plane: ControlPlane) -> dict[str, Doc]:
    """Each CRD that exists: what another owner would notice changing."""
    listed = json.loads(plane.kubectl("get", "crd", "-o", "json").stdout)["items"]
    return {
        crd["metadata"]["name"]: {
            "resourceVersion": crd["metadata"]["resourceVersion"],
            "generation": crd["metadata"]["generation"],
            "labels": crd["metadata"].get("labels", {}),
            "annotations": crd["metadata"].get("annotations", {}),
            "spec": crd["spec"],
        }
        for crd in listed
    }


@pytest.fixture(scope="module")
def volcano_cluster() -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        crds = [foreign_crd(name) for name in FOREIGN]
        plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(crds))
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in FOREIGN))
        yield plane


@pytest.fixture(scope="module")
def helm_env(volcano_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("helm")
    return {
        **os.environ,
        "KUBECONFIG": str(volcano_cluster.kubeconfig),
        **{f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
    }


def helm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([render.find_helm(), *args], capture_output=True, text=True, check=False, env=env)
    assert result.returncode == 0, result.stderr
    return result


def test_helm_leaves_installed_crds_untouched_and_adds_only_the_missing_one(
    volcano_cluster: ControlPlane, helm_env: dict[str, str], tmp_path: Path
) -> None:
    before = state(volcano_cluster)
    assert set(before) == set(FOREIGN)
    chart = render.package(render.find_helm(), tmp_path)
    # --no-hooks: the certificate Job (a post-install hook) would wait for a kubelet this control plane
    # does not have; what is under test is the CRDs.
    installed = helm(
        helm_env,
        "install",
        "gpuq",
        str(chart),
        "-n",
        NAMESPACE,
        "--create-namespace",
        "--no-hooks",
        "--debug",
    )
    after = state(volcano_cluster)
    for name in FOREIGN:
        assert after[name] == before[name], name
    assert f"CRD {QUEUES} is already present. Skipping." in installed.stderr
    # The missing one is gpuq's copy.
    assert after[GPU_RESOURCE_QUOTAS]["labels"] == {"app.kubernetes.io/part-of": "gpuq"}
    assert after[GPU_RESOURCE_QUOTAS]["spec"]["versions"] == gpuq_crd(GPU_RESOURCE_QUOTAS)["spec"]["versions"]
    # The NOTES name the CRDs that were there before gpuq (by lookup), not the one gpuq added.
    notes = installed.stdout.split("\nNOTES:\n", 1)[1]
    assert "These CRDs were installed before gpuq" in notes, notes
    listed = notes.split("gpuq reads their objects: ", 1)[1].splitlines()[0]
    assert sorted(listed.split(", ")) == sorted(FOREIGN), notes
    # The release is gpuq's objects only: Helm adopted none of the CRDs.
    manifest = helm(helm_env, "get", "manifest", "gpuq", "-n", NAMESPACE).stdout
    assert "kind: CustomResourceDefinition" not in manifest
    assert "kind: Deployment" in manifest

    helm(
        helm_env,
        "upgrade",
        "gpuq",
        str(chart),
        "-n",
        NAMESPACE,
        "--no-hooks",
        "--set",
        "scheduler.replicas=3",
    )
    assert state(volcano_cluster) == after
    helm(helm_env, "uninstall", "gpuq", "-n", NAMESPACE, "--no-hooks")
    assert state(volcano_cluster) == after  # Helm never deletes a CRD, its own copies included


def test_kustomize_applies_no_crd_and_creates_only_missing_ones(volcano_cluster: ControlPlane) -> None:
    """`kubectl apply -k deploy/` is gpuq without CRDs; `kubectl create -k deploy/crds` only creates."""
    kinds = {d["kind"] for d in documents(volcano_cluster.kubectl("kustomize", str(DEPLOY)).stdout)}
    assert "CustomResourceDefinition" not in kinds and {"Deployment", "ClusterRole"} <= kinds
    before = state(volcano_cluster)
    created = volcano_cluster.kubectl("create", "-k", str(DEPLOY / "crds"), check=False)
    for name in FOREIGN:
        assert f'customresourcedefinitions.apiextensions.k8s.io "{name}" already exists' in created.stderr
    after = state(volcano_cluster)
    for name in FOREIGN:
        assert after[name] == before[name], name
    assert GPU_RESOURCE_QUOTAS in after


def test_a_canary_release_installs_beside_the_first_and_a_namesake_is_refused(
    volcano_cluster: ControlPlane, helm_env: dict[str, str], tmp_path: Path
) -> None:
    """Two releases in two namespaces share no name, so Helm installs both (it refuses to take over an
    object another release owns); a second release named like the first, in another namespace, is
    refused by Helm naming the first release's object, as docs/install.md says."""
    chart = str(render.package(render.find_helm(), tmp_path))
    releases = (("gpuq", NAMESPACE), ("gpuq-canary", "gpuq-canary"))
    for release, namespace in releases:
        helm(helm_env, "install", release, chart, "-n", namespace, "--create-namespace", "--no-hooks")
    for release, namespace in releases:
        deployments = volcano_cluster.kubectl(
            "get", "deployment", "-n", namespace, "-o", "name"
        ).stdout.split()
        assert sorted(deployments) == [
            f"deployment.apps/{release}-scheduler",
            f"deployment.apps/{release}-webhook",
        ]
    roles = volcano_cluster.kubectl(
        "get", "clusterrole", "-l", "app.kubernetes.io/part-of=gpuq", "-o", "name"
    )
    assert {
        f"clusterrole.rbac.authorization.k8s.io/{r}-{c}" for r, _ in releases for c in ("scheduler", "certs")
    } <= set(roles.stdout.split())
    namesake = subprocess.run(
        [render.find_helm(), "install", "gpuq", chart, "-n", "elsewhere", "--create-namespace", "--no-hooks"],
        capture_output=True, text=True, check=False, env=helm_env,
    )  # fmt: skip
    assert namesake.returncode != 0
    assert "exists and cannot be imported into the current release" in namesake.stderr, namesake.stderr
    assert (
        '"meta.helm.sh/release-namespace" must equal "elsewhere": current value is "gpuq-system"'
        in namesake.stderr
    )
    for release, namespace in releases:
        helm(helm_env, "uninstall", release, "-n", namespace, "--no-hooks")
