"""The Helm chart as a user meets it (issue 16): values.schema.json refuses bad values at `helm template`
/ `helm install`, the packaged chart (``python deploy/render.py --package``) is reproducible and renders
what the chart directory renders, and a `helm install` of the package (a server-side dry run on the
real apiserver: nothing is left behind) succeeds and prints the NOTES.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.manifests import NAMESPACE, render

pytestmark = pytest.mark.e2e


def template(*settings: str) -> subprocess.CompletedProcess[str]:
    argv = [render.find_helm(), "template", "gpuq", str(render.CHART), "--kube-version", render.KUBE_VERSION]
    for setting in settings:
        argv += ["--set", setting]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("webhook.failurePolicy=Fial", "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'"),
        ("webhook.failurPolicy=Fail", "at '/webhook': additional properties 'failurPolicy' not allowed"),
        ("scheduler.replicas=0", "at '/scheduler/replicas': minimum: got 0, want 1"),
        ("monitoring.pendingFor=15", "at '/monitoring/pendingFor': got number, want string"),
        (
            "monitoring.quotaThresholdRatio=90",
            "at '/monitoring/quotaThresholdRatio': maximum: got 90, want 1",
        ),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        (
            "networkPolicy.apiserver[0].cidr=10.0.0.0/24",
            "at '/networkPolicy/apiserver/0': additional properties 'cidr' not allowed",
        ),
        # Issue 27: the per-component values are typed.
        (
            "scheduler.resources.limits.memory=lots",
            "at '/scheduler/resources/limits/memory': 'lots' does not match pattern",
        ),
        ("certs.resources.requests.cpu=-1", "at '/certs/resources/requests/cpu': minimum: got -1, want 0"),
        ("webhook.resources.claims=x", "at '/webhook/resources': additional properties 'claims' not allowed"),
        (
            "webhook.tolerations[0].operator=Maybe",
            "at '/webhook/tolerations/0/operator': value must be one of",
        ),
        ("certs.affinity=x", "at '/certs/affinity': got string, want object"),
        (
            "scheduler.affinity.nodeAfinity.x=y",
            "at '/scheduler/affinity': additional properties 'nodeAfinity' not allowed",
        ),
        ("scheduler.nodeSelector.pool=1", "at '/scheduler/nodeSelector/pool': got number, want string"),
        (
            "webhook.topologySpreadConstraints[0].maxSkew=1",
            "at '/webhook/topologySpreadConstraints/0': missing properties 'topologyKey', "
            "'whenUnsatisfiable'",
        ),
        ("scheduler.podLabels.team=a b", "at '/scheduler/podLabels/team': 'a b' does not match pattern"),
        ("certs.podAnnotations.note=1", "at '/certs/podAnnotations/note': got number, want string"),
        ("scheduler.securityContext.runAsUser=-1", "at '/scheduler/securityContext/runAsUser': minimum"),
        (
            "webhook.securityContext.seccompProfile.type=Whatever",
            "at '/webhook/securityContext/seccompProfile/type': value must be one of",
        ),
        (
            "certs.containerSecurityContext.privileged=yes",
            "at '/certs/containerSecurityContext/privileged': got string, want boolean",
        ),
        ("scheduler.extraArgs=--log-level=DEBUG", "at '/scheduler/extraArgs': got string, want array"),
        ("webhook.extraEnv[0].value=1", "at '/webhook/extraEnv/0': missing property 'name'"),
        ("image.digest=sha256:abc", "at '/image/digest': 'sha256:abc' does not match pattern"),
        ("fullnameOverride=Gpuq_X", "at '/fullnameOverride': 'Gpuq_X' does not match pattern"),
        ("fullnameOverride=" + "g" * 38, "at '/fullnameOverride': maxLength: got 38, want 37"),
        ("nameOverride=GPUQ", "at '/nameOverride': 'GPUQ' does not match pattern"),
        ("scheduler.name=Gpuq", "at '/scheduler/name': 'Gpuq' does not match pattern"),
    ],
)
def test_schema_refuses_bad_values_naming_the_value(setting: str, message: str) -> None:
    result = template(setting)
    assert result.returncode != 0, result.stdout[:200]
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert message in result.stderr, result.stderr


@pytest.mark.parametrize(
    "settings",
    [
        (),
        ("webhook.failurePolicy=Ignore", "webhook.mutatingFailurePolicy=Fail"),
        ("webhook.excludedNamespaces=null",),
        ("webhook.excludedNamespaces={}",),
        ("webhook.excludedNamespaces={kube-system,monitoring}",),
        (
            "certManager.enabled=true",
            "certManager.issuerRef.name=ca",
            "certManager.issuerRef.kind=ClusterIssuer",
        ),
        ("monitoring.enabled=true", "monitoring.quotaThresholdFor=5s", "monitoring.serviceMonitorLabels.x=y"),
        ("plainManifests=true", "namespace.create=true", "certs.ttlSecondsAfterFinished=600"),
        ("webhook.pdb.minAvailable=50%", "scheduler.logFormat=text", "image.tag=0.1.0"),
        ("networkPolicy.enabled=false",),
        ("networkPolicy.apiserver[0].ipBlock.cidr=10.0.0.10/32", "networkPolicy.prometheus=null"),
        (
            "fullnameOverride=gpuq-canary",
            "nameOverride=quota",
            "image.digest=sha256:" + "0" * 64,
            "scheduler.resources.limits.memory=2.5Gi",
            "webhook.resources.requests.cpu=1",
            "certs.resources.requests.cpu=0.1",
            "scheduler.securityContext.fsGroup=null",
            "webhook.containerSecurityContext.readOnlyRootFilesystem=true",
            "certs.tolerations[0].operator=Exists",
            "scheduler.topologySpreadConstraints[0].maxSkew=1",
            "scheduler.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "scheduler.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
            "webhook.podLabels.team=platform",
            "webhook.extraArgs[0]=--log-level=DEBUG",
            "webhook.extraEnv[0].name=HTTPS_PROXY",
        ),
    ],
)
def test_schema_accepts_what_the_chart_documents(settings: tuple[str, ...]) -> None:
    result = template(*settings)
    assert result.returncode == 0, result.stderr


def test_package_is_reproducible_complete_and_renders_as_the_chart(tmp_path: Path) -> None:
    helm = render.find_helm()
    first = render.package(helm, tmp_path / "one")
    second = render.package(helm, tmp_path / "two")
    assert first.name == "gpuq-0.1.0.tgz"
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as archive:
        names = set(archive.getnames())
    for name in ("Chart.yaml", "values.yaml", "values.schema.json", "README.md", "templates/NOTES.txt"):
        assert f"gpuq/{name}" in names, name
    assert {f"gpuq/crds/{p.name}" for p in (render.CHART / "crds").glob("*.yaml")} <= names
    for settings in ((), ("monitoring.enabled=true", "certManager.enabled=true")):
        from_dir = render.helm_template(helm, settings, "--include-crds")
        argv = [helm, "template", render.RELEASE, str(first), "--namespace", render.NAMESPACE]
        argv += ["--kube-version", render.KUBE_VERSION, "--include-crds"]
        for setting in settings:
            argv += ["--set", setting]
        from_package = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        assert from_package == from_dir
    lint = subprocess.run([helm, "lint", str(first)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.fixture
def fresh_plane() -> Iterator[ControlPlane]:
    """A control plane of its own holding only gpuq-system: the shared one carries the objects other
    tests applied without Helm, which a `helm install` rightly refuses to adopt."""
    with ControlPlane() as plane:
        plane.kubectl("create", "namespace", NAMESPACE)
        yield plane


def test_helm_install_of_the_package_on_the_apiserver_prints_the_notes(
    fresh_plane: ControlPlane, tmp_path: Path
) -> None:
    """`helm install <package>` as a user without a checkout runs it, as a server-side dry run on a
    cluster without gpuq: every object is accepted by the real apiserver and the NOTES tell what to
    do next."""
    control_plane = fresh_plane
    helm = render.find_helm()
    chart = render.package(helm, tmp_path)
    argv = [helm, "install", "gpuq", str(chart), "--namespace", NAMESPACE, "--dry-run=server"]
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig), "HELM_CACHE_HOME": str(tmp_path)}
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("\nNOTES:\n", 1)[1]
    assert "gpuq 0.1.0 is installed in namespace gpuq-system" in notes
    assert "schedulerName: gpuq-scheduler" in notes
    assert "rollout status deployment/gpuq-scheduler deployment/gpuq-webhook" in notes
    assert "gpuq-scheduler-metrics.gpuq-system:10259/metrics" in notes  # monitoring off: scrape it
    bad = subprocess.run(
        [*argv, "--set", "webhook.failurePolicy=Fial"], capture_output=True, text=True, check=False, env=env
    )
    assert bad.returncode != 0 and "'/webhook/failurePolicy'" in bad.stderr, bad.stderr
