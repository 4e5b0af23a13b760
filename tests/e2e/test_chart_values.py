"""The chart adapts without forking (issue 27, "the chart resists adaptation"), checked on what
`helm template` renders:

- two releases in two namespaces (a canary) share no object name, name none of each other's objects,
  Secrets, Leases or schedulerName anywhere in their manifests, and each refers only to its own objects;
- fullnameOverride, nameOverride and the release name make the names; a name over 63 characters is
  refused naming it;
- every per-component value (affinity, nodeSelector, tolerations, topologySpreadConstraints, podLabels,
  podAnnotations, securityContext, containerSecurityContext, resources, extraArgs, extraEnv) and
  image.digest reaches its pod, the security contexts stay restricted where not overridden, and the
  result is accepted by the real apiserver (a server-side dry run).

The schema's refusals of these values are in tests/e2e/test_chart.py.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.certs.flags import CertsOptions
from gpuq_k8s.cli import _parser
from gpuq_k8s.scheduler.flags import SchedulerOptions
from gpuq_k8s.webhook.flags import WebhookOptions
from tests.e2e.controlplane.harness import Kubectl
from tests.e2e.manifests import NAMESPACE, documents, render

pytestmark = pytest.mark.e2e

Doc = dict[str, Any]
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "Namespace",
}
# Flags whose value names an object of the release (a Service, Secret, Lease, webhook configuration)
# or its schedulerName.
NAME_FLAGS = (
    "--scheduler-name", "--leader-elect-resource-name", "--tls-secret", "--ca-secret", "--service",
    "--webhook-configuration", "--certificates-lease", "--secret", "--inject-validating", "--inject-mutating",
)  # fmt: skip
COMPONENTS = ("scheduler", "webhook", "certs")


def helm_template(release: str, namespace: str, *settings: str, values: Path | None = None) -> str:
    argv = [render.find_helm(), "template", release, str(render.CHART), "--namespace", namespace]
    argv += ["--kube-version", render.KUBE_VERSION]
    for setting in settings:
        argv += ["--set", setting]
    if values is not None:
        argv += ["--values", str(values)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def pod_specs(docs: Sequence[Doc]) -> dict[str, Doc]:
    """The pod templates of the Deployments and the Job, by app.kubernetes.io/name."""
    return {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]: d["spec"]["template"]
        for d in docs
        if d["kind"] in ("Deployment", "Job")
    }


def referenced_names(docs: Sequence[Doc]) -> set[str]:
    """Every object name the release uses: its objects' and those its processes and RBAC name."""
    names = {d["metadata"]["name"] for d in docs}
    for template in pod_specs(docs).values():
        for container in template["spec"]["containers"]:
            for arg in container["args"]:
                flag, _, value = arg.partition("=")
                if flag in NAME_FLAGS:
                    names.add(value)
    for d in docs:
        for rule in d.get("rules", ()):
            names.update(rule.get("resourceNames", ()))
    return names


def assert_self_contained(docs: Sequence[Doc]) -> None:
    """Every reference by name inside a release is to one of its own objects."""
    objects = {(d["kind"], d["metadata"]["name"]) for d in docs}
    namespaces = {d["metadata"].get("namespace") for d in docs if d["kind"] not in CLUSTER_SCOPED}
    assert len(namespaces) == 1, namespaces
    (namespace,) = namespaces
    templates = pod_specs(docs)
    (scheduler,) = [
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "Deployment" and "-scheduler" in d["metadata"]["name"]
    ]
    fullname = scheduler.removesuffix("-scheduler")
    for d in docs:
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert (d["roleRef"]["kind"], d["roleRef"]["name"]) in objects, d["metadata"]["name"]
            for subject in d["subjects"]:
                assert ("ServiceAccount", subject["name"]) in objects and subject["namespace"] == namespace
        if d["kind"] in ("Deployment", "Job"):
            pod = d["spec"]["template"]["spec"]
            assert ("ServiceAccount", pod["serviceAccountName"]) in objects
            for volume in pod.get("volumes", ()):
                if "configMap" in volume:
                    assert ("ConfigMap", volume["configMap"]["name"]) in objects
        if d["kind"] in ("Service", "PodDisruptionBudget", "NetworkPolicy", "Deployment"):
            spec = d["spec"]
            selector = spec.get("selector") or spec["podSelector"]
            labels = selector.get("matchLabels", selector)
            matching = [t for t in templates.values() if labels.items() <= t["metadata"]["labels"].items()]
            assert len(matching) == 1, (d["kind"], d["metadata"]["name"], labels)
        if d["kind"].endswith("WebhookConfiguration"):
            for hook in d["webhooks"]:
                service = hook["clientConfig"]["service"]
                assert ("Service", service["name"]) in objects and service["namespace"] == namespace
        if d["kind"] == "ValidatingAdmissionPolicyBinding":
            assert ("ValidatingAdmissionPolicy", d["spec"]["policyName"]) in objects
        if d["kind"] == "ValidatingAdmissionPolicy":
            (condition,) = d["spec"]["matchConditions"]
            for account in re.findall(r'"system:serviceaccount:([^:"]+):([^"]+)"', condition["expression"]):
                # The certificate Job's account is named even with cert-manager, where there is no Job.
                namespace_of, account_name = account
                own = ("ServiceAccount", account_name) in objects or account_name == f"{fullname}-certs"
                assert namespace_of == namespace and own, account


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param((), id="defaults"),
        pytest.param(("certManager.enabled=true", "monitoring.enabled=true"), id="cert-manager+monitoring"),
    ],
)
def test_two_releases_in_two_namespaces_share_no_name(settings: tuple[str, ...]) -> None:
    """A canary (`helm install gpuq-canary ... -n gpuq-canary`) beside `gpuq` in gpuq-system: no object
    name in common, cluster-scoped or not; the canary's manifests mention none of the first release's
    names (its Secrets, Leases, webhook configurations, Prometheus jobs, schedulerName); each release
    refers only to its own objects."""
    main = documents(helm_template("gpuq", NAMESPACE, *settings))
    canary = documents(helm_template("gpuq-canary", "gpuq-canary", *settings))
    main_objects = {d["metadata"]["name"] for d in main}
    canary_objects = {d["metadata"]["name"] for d in canary}
    assert not main_objects & canary_objects, main_objects & canary_objects
    assert {d["kind"] for d in canary} >= {
        "ClusterRole",
        "ValidatingAdmissionPolicy",
        "Deployment",
        "Service",
    }
    for d in canary:
        assert d["metadata"]["name"].startswith("gpuq-canary"), (d["kind"], d["metadata"]["name"])
    # The first release's names, anywhere in the canary's manifests (comments dropped), as whole names.
    text = yaml.safe_dump_all(canary)
    for name in referenced_names(main) - {"gpuq"}:
        assert not re.search(rf"(?<![-\w.]){re.escape(name)}(?![-\w])", text), name
    for docs in (main, canary):
        assert_self_contained(docs)
    (scheduler,) = [d for d in canary if d["kind"] == "Deployment" and "scheduler" in d["metadata"]["name"]]
    (container,) = scheduler["spec"]["template"]["spec"]["containers"]
    assert "--scheduler-name=gpuq-canary-scheduler" in container["args"]
    assert "--leader-elect-resource-name=gpuq-canary-scheduler" in container["args"]
    if "monitoring.enabled=true" in settings:
        (dashboard,) = [
            d for d in canary if d["kind"] == "ConfigMap" and "dashboard" in d["metadata"]["name"]
        ]
        jobs = set(re.findall(r'job=~?\\"([^"\\]+)\\"', dashboard["data"]["gpuq.json"]))
        assert jobs == {
            "gpuq-canary-scheduler-metrics",
            "gpuq-canary-webhook",
            "gpuq-canary-scheduler-metrics|gpuq-canary-webhook",
        }, jobs
        # Grafana keys dashboards by uid: the canary's does not replace the first release's.
        dashboard_json = json.loads(dashboard["data"]["gpuq.json"])
        assert (dashboard_json["uid"], dashboard_json["title"]) == ("gpuq-canary-overview", "gpuq-canary")


@pytest.mark.parametrize(
    ("release", "settings", "prefix"),
    [
        ("gpuq", (), "gpuq"),
        ("my-gpuq", (), "my-gpuq"),  # contains the chart name: the release name alone
        ("team", (), "team-gpuq"),
        ("team", ("nameOverride=quota",), "team-quota"),
        ("team", ("fullnameOverride=edge",), "edge"),
    ],
)
def test_names_come_from_the_release_or_the_overrides(
    release: str, settings: tuple[str, ...], prefix: str
) -> None:
    docs = documents(helm_template(release, "ns", *settings))
    for d in docs:
        assert d["metadata"]["name"] == prefix or d["metadata"]["name"].startswith(f"{prefix}-"), d["kind"]
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} >= {
        ("Deployment", f"{prefix}-scheduler"),
        ("Service", f"{prefix}-webhook"),
        ("ClusterRole", f"{prefix}-certs"),
        ("ConfigMap", f"{prefix}-scheduler-config"),
        ("ValidatingAdmissionPolicy", f"{prefix}-webhook-cabundle-only"),
    }
    assert (
        f"--tls-secret={prefix}-webhook-tls"
        in pod_specs(docs)[f"{prefix}-webhook"]["spec"]["containers"][0]["args"]
    )


def test_a_name_longer_than_63_characters_is_refused_naming_it() -> None:
    argv = [render.find_helm(), "template", "a-long-release-name-for-the-gpuq-canary-x", str(render.CHART)]
    argv += ["--kube-version", render.KUBE_VERSION]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert re.search(
        r'the name "a-long-release-name-for-the-gpuq-canary-x-[a-z-]+" has \d+ characters', result.stderr
    )
    assert "at most 63: choose a shorter release name or set fullnameOverride" in result.stderr


DIGEST = "sha256:" + "ab" * 32
EXTRA_ARGS = {
    "scheduler": ["--log-level=DEBUG"],
    "webhook": ["--log-level=DEBUG"],
    "certs": ["--cluster-domain=corp.local"],
}


def component_values(component: str) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}
                    ]
                }
            }
        },
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
            },
            {
                "maxSkew": 2,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"team": "platform"}},
            },
        ],
        # The chart's own keys cannot be overridden: the selector label, the configuration checksum.
        "podLabels": {"team": "platform", "app.kubernetes.io/name": "mine"},
        "podAnnotations": {"example.com/owner": "platform", "checksum/config": "mine"},
        "securityContext": {"runAsUser": 1000, "fsGroup": None},
        "containerSecurityContext": {
            "seccompProfile": {"type": "Localhost", "localhostProfile": "gpuq.json"}
        },
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "3Gi"}},
        "extraArgs": EXTRA_ARGS[component],
        "extraEnv": [
            {"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
    }


@pytest.fixture(scope="module")
def adapted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Doc]]:
    values = tmp_path_factory.mktemp("values") / "values.yaml"
    values.write_text(
        yaml.safe_dump({"image": {"digest": DIGEST}, **{c: component_values(c) for c in COMPONENTS}})
    )
    yield documents(helm_template("gpuq", NAMESPACE, values=values))


OPTIONS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "scheduler": SchedulerOptions.from_args,
    "webhook": WebhookOptions.from_args,
    "certs": CertsOptions.from_args,
}


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_component_value_reaches_its_pod(adapted: list[Doc], component: str) -> None:
    name = f"gpuq-{component}"
    template = pod_specs(adapted)[name]
    given = component_values(component)
    pod = template["spec"]
    assert pod["affinity"] == given["affinity"]  # replaces the default anti-affinity
    assert pod["nodeSelector"] == given["nodeSelector"] and pod["tolerations"] == given["tolerations"]
    zone, host = pod["topologySpreadConstraints"]
    assert zone == {
        **given["topologySpreadConstraints"][0],
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
    }
    assert host == given["topologySpreadConstraints"][1]
    labels, annotations = template["metadata"]["labels"], template["metadata"].get("annotations", {})
    assert labels["team"] == "platform" and labels["app.kubernetes.io/name"] == name
    assert annotations["example.com/owner"] == "platform"
    if component != "certs":
        assert annotations["checksum/config"] != "mine"
    # Merged into the restricted defaults; fsGroup: null removes it.
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "Localhost", "localhostProfile": "gpuq.json"},
    }
    assert container["resources"]["requests"] == given["resources"]["requests"]
    assert container["resources"]["limits"] == given["resources"]["limits"]
    assert container["image"] == f"ghcr.io/gpuq/gpuq@{DIGEST}"
    assert container["env"][-2:] == given["extraEnv"]
    # extraArgs come last, and the process reads them as a user's flags: the last one wins.
    assert container["args"][-1:] == given["extraArgs"]
    options = OPTIONS[component](_parser().parse_args(container["args"]))
    if component == "certs":
        assert options.issue is not None and options.issue.cluster_domain == "corp.local"
    else:
        assert options.log.level == "DEBUG"


def test_by_default_replicas_spread_over_nodes_and_the_job_has_no_affinity() -> None:
    templates = pod_specs(documents(helm_template("gpuq", NAMESPACE)))
    for name in ("gpuq-scheduler", "gpuq-webhook"):
        (term,) = templates[name]["spec"]["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"app.kubernetes.io/name": name}}
        assert "topologySpreadConstraints" not in templates[name]["spec"]
    assert "affinity" not in templates["gpuq-certs"]["spec"]


def test_the_adapted_chart_is_accepted_by_the_apiserver(adapted: list[Doc], kubectl: Kubectl) -> None:
    """Every typed value has the shape the API wants: a server-side dry run of the whole release."""
    kubectl("create", "namespace", NAMESPACE, check=False)
    result = kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", "-o", "name",
        stdin=yaml.safe_dump_all(adapted), check=False,
    )  # fmt: skip
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    assert {"deployment.apps/gpuq-scheduler", "deployment.apps/gpuq-webhook", "job.batch/gpuq-certs"} <= set(
        result.stdout.split()
    )
