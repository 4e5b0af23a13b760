"""deploy/ against the real API server: the kustomize trees and the rendered Helm chart are accepted by a
server-side dry run with zero errors, and the kustomize trees are exactly what the chart renders.

Only the Namespace (and, for the optional trees, minimal copies of the cert-manager and
prometheus-operator CRDs) are created for real: the webhook configurations must never be registered
in the shared control plane, where nothing serves them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.controlplane.harness import ControlPlane, Kubectl
from tests.e2e.manifests import DEPLOY, NAMESPACE, apply_for_real, documents, kustomize, render
from tests.testing.config import scheduler_config

pytestmark = pytest.mark.e2e

CHART = DEPLOY / "helm" / "gpuq"


def helm(*settings: str, include_crds: bool = False) -> str:
    extra = ("--include-crds",) if include_crds else ()
    return str(render.helm_template(render.find_helm(), settings, *extra))


def dry_run(kubectl: Kubectl, *source: str, stdin: str | None = None) -> list[str]:
    """Server-side dry-run apply; fails with the apiserver's message on any error. Returns the objects."""
    result = kubectl(
        "apply", "--server-side", "--dry-run=server", *source, "-o", "name", stdin=stdin, check=False
    )
    assert result.returncode == 0 and not result.stderr.strip(), (
        f"dry run of {source or 'stdin'} failed (exit {result.returncode}):\n{result.stderr}"
    )
    return result.stdout.split()


def stub_crd(group: str, kind: str, plural: str) -> dict[str, Any]:
    """A schemaless CRD standing in for cert-manager's or prometheus-operator's (not installed here)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "listKind": f"{kind}List", "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


STUB_CRDS = [
    stub_crd("cert-manager.io", "Certificate", "certificates"),
    stub_crd("cert-manager.io", "Issuer", "issuers"),
    stub_crd("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
    stub_crd("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
]


@pytest.fixture(scope="module")
def system_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """gpuq-system, created for real: a dry run cannot create objects in a namespace that does not exist."""
    namespace = [d for d in kustomize(control_plane.kubectl, DEPLOY / "base") if d["kind"] == "Namespace"]
    apply_for_real(control_plane.kubectl, namespace)
    yield NAMESPACE


@pytest.fixture(scope="module")
def stub_crds(control_plane: ControlPlane) -> None:
    apply_for_real(control_plane.kubectl, STUB_CRDS)
    names = [f"crd/{c['metadata']['name']}" for c in STUB_CRDS]
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)


def test_generated_trees_are_what_the_chart_renders() -> None:
    """Single source of truth: deploy/base, deploy/cert-manager and deploy/monitoring are rendered from
    the chart, and the chart's crds/ are copies of deploy/crds."""
    result = subprocess.run(
        [sys.executable, str(DEPLOY / "render.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_kustomize_base_is_accepted_by_a_server_side_dry_run(system_namespace: str, kubectl: Kubectl) -> None:
    """Issue 7, done when: `kubectl apply --server-side --dry-run=server -k deploy/` with zero errors."""
    applied = dry_run(kubectl, "-k", str(DEPLOY))
    # No CRD (issue 27): deploy/ is safe on a cluster with Volcano's; `kubectl create -k deploy/crds` adds
    # the missing ones (tests/e2e/test_chart_crds.py).
    assert not [name for name in applied if name.startswith("customresourcedefinition")], applied
    expected = {
        "deployment.apps/gpuq-scheduler",
        "deployment.apps/gpuq-webhook",
        "configmap/gpuq-scheduler-config",
        "service/gpuq-webhook",
        "poddisruptionbudget.policy/gpuq-webhook",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/gpuq-webhook",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/gpuq-webhook",
        "job.batch/gpuq-certs",
        "clusterrole.rbac.authorization.k8s.io/gpuq-scheduler",
        "role.rbac.authorization.k8s.io/gpuq-scheduler-leader-election",
    }
    assert expected <= set(applied), sorted(expected - set(applied))


def test_base_without_crds_leaves_existing_crds_alone(kubectl: Kubectl) -> None:
    """deploy/ and deploy/base install gpuq on any cluster, one that runs Volcano, scheduler-plugins or
    TensorFusion included; the CRDs are deploy/crds, all four."""
    kinds = {d["kind"] for d in kustomize(kubectl, DEPLOY / "base")}
    assert "CustomResourceDefinition" not in kinds
    assert kustomize(kubectl, DEPLOY) == kustomize(kubectl, DEPLOY / "base")
    crds = kustomize(kubectl, DEPLOY / "crds")
    assert {d["kind"] for d in crds} == {"CustomResourceDefinition"} and len(crds) == 4
    assert {"Deployment", "ClusterRole", "ValidatingWebhookConfiguration", "Job"} <= kinds


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param((), id="defaults"),
        pytest.param(
            (
                "webhook.failurePolicy=Ignore",
                "scheduler.replicas=3",
                "webhook.setSchedulerName=true",
                "webhook.workers=2",
            ),
            id="options",
        ),
    ],
)
def test_helm_chart_is_accepted_by_a_server_side_dry_run(
    system_namespace: str, kubectl: Kubectl, settings: tuple[str, ...]
) -> None:
    """Issue 7, done when: the Helm chart rendered by `helm template` (built by build.sh) is accepted.
    Its CRDs (crds/, which Helm installs only when absent) are identical to the installed ones."""
    manifests = helm(*settings, include_crds=True)
    applied = dry_run(kubectl, "-f", "-", stdin=manifests)
    assert "deployment.apps/gpuq-scheduler" in applied
    assert any(name.startswith("customresourcedefinition") for name in applied)


def test_webhook_workers_reach_the_command_line() -> None:
    """``webhook.workers`` above 1 becomes ``gpuq webhook --workers``; the default passes nothing."""

    def workers_args(*settings: str) -> list[str]:
        (webhook,) = [
            d
            for d in documents(helm(*settings))
            if d["kind"] == "Deployment" and "webhook" in d["metadata"]["name"]
        ]
        (container,) = webhook["spec"]["template"]["spec"]["containers"]
        return [arg for arg in container["args"] if arg.startswith("--workers")]

    assert workers_args() == []
    assert workers_args("webhook.workers=2") == ["--workers=2"]


def test_optional_trees_are_accepted_with_their_crds(
    system_namespace: str, stub_crds: None, kubectl: Kubectl
) -> None:
    """deploy/cert-manager and deploy/monitoring, and the chart with both enabled."""
    cert_manager = dry_run(kubectl, "-k", str(DEPLOY / "cert-manager"))
    assert "certificate.cert-manager.io/gpuq-webhook" in cert_manager
    assert not any(name.startswith("job") for name in cert_manager)
    monitoring = dry_run(kubectl, "-k", str(DEPLOY / "monitoring"))
    assert {
        "servicemonitor.monitoring.coreos.com/gpuq-scheduler",
        "servicemonitor.monitoring.coreos.com/gpuq-webhook",
        "prometheusrule.monitoring.coreos.com/gpuq",
        "configmap/gpuq-grafana-dashboard",
    } <= set(monitoring)
    applied = dry_run(kubectl, "-f", "-", stdin=helm("certManager.enabled=true", "monitoring.enabled=true"))
    assert "prometheusrule.monitoring.coreos.com/gpuq" in applied


GPU_QUOTA_ONLY = scheduler_config("name: gpu-quota")


def test_one_config_map_reaches_both_processes_and_a_change_rolls_both(
    system_namespace: str, kubectl: Kubectl, tmp_path: Path
) -> None:
    """design.md Semantics 10: the chart mounts the one ConfigMap into the scheduler and the webhook, passes
    --config to both, and a changed scheduler.config changes the checksum on both pod templates."""
    config = tmp_path / "config.yaml"
    config.write_text(GPU_QUOTA_ONLY)

    def deployments(*extra: str) -> dict[str, dict[str, Any]]:
        docs = documents(render.helm_template(render.find_helm(), (), *extra))
        return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}

    default, changed = deployments(), deployments("--set-file", f"scheduler.config={config}")
    for name in ("gpuq-scheduler", "gpuq-webhook"):
        template = changed[name]["spec"]["template"]
        (container,) = template["spec"]["containers"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert f"--config={mounts['config']}/config.yaml" in container["args"], name
        assert {"name": "config", "configMap": {"name": "gpuq-scheduler-config"}} in template["spec"][
            "volumes"
        ]
        before = default[name]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        after = template["metadata"]["annotations"]["checksum/config"]
        assert before != after, name
    checksums = {
        d["spec"]["template"]["metadata"]["annotations"]["checksum/config"] for d in changed.values()
    }
    assert len(checksums) == 1
    manifests = render.helm_template(render.find_helm(), (), "--set-file", f"scheduler.config={config}")
    config_map = next(d for d in documents(manifests) if d["kind"] == "ConfigMap")
    assert config_map["data"]["config.yaml"].strip() == GPU_QUOTA_ONLY.strip()
    applied = dry_run(kubectl, "-f", "-", stdin=manifests)
    assert {"deployment.apps/gpuq-webhook", "configmap/gpuq-scheduler-config"} <= set(applied)
