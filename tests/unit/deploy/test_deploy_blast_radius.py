"""deploy/ limits what a compromised gpuq pod, or anyone on the pod network, can do (issue 24): static
checks of the rendered manifests. The apiserver's enforcement of the policy is tests/e2e/
test_admission_policy.py; the chart's values and schema, tests/e2e/test_chart.py."""

from __future__ import annotations

from typing import Any

import yaml

from tests.testing.paths import REPO_ROOT as REPO

DEPLOY = REPO / "deploy"
VALUES = yaml.safe_load((DEPLOY / "helm" / "gpuq" / "values.yaml").read_text())
TREES = {
    tree: [d for d in yaml.safe_load_all((DEPLOY / tree / "gpuq.yaml").read_text()) if d]
    for tree in ("base", "cert-manager")
}
BASE = TREES["base"]
NAMESPACE = "gpuq-system"
WEBHOOK_CONFIGURATIONS = frozenset({"validatingwebhookconfigurations", "mutatingwebhookconfigurations"})


def one(kind: str, name: str, docs: list[dict[str, Any]] = BASE) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def container_ports(deployment: str) -> dict[str, int]:
    (container,) = one("Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def test_the_webhook_admits_the_apiserver_on_https_and_prometheus_on_metrics_only() -> None:
    policy = one("NetworkPolicy", "gpuq-webhook")["spec"]
    labels = one("Deployment", "gpuq-webhook")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]  # gpuq's own calls go out to the apiserver
    ports = container_ports("gpuq-webhook")
    https, metrics = policy["ingress"]
    assert https["ports"] == [{"protocol": "TCP", "port": ports["https"]}]
    # Default: the apiserver's sources are the operator's to state (values.yaml); the port stays the only one.
    assert "from" not in https and VALUES["networkPolicy"]["apiserver"] == []
    assert metrics["ports"] == [{"protocol": "TCP", "port": ports["metrics"]}]
    assert metrics["from"] == VALUES["networkPolicy"]["prometheus"]
    assert metrics["from"] == [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    ]


def test_the_scheduler_admits_prometheus_on_its_metrics_port_only() -> None:
    policy = one("NetworkPolicy", "gpuq-scheduler")["spec"]
    labels = one("Deployment", "gpuq-scheduler")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    (rule,) = policy["ingress"]
    (port,) = container_ports("gpuq-scheduler").values()
    assert rule == {
        "ports": [{"protocol": "TCP", "port": port}],
        "from": VALUES["networkPolicy"]["prometheus"],
    }


def test_a_policy_narrows_every_account_that_may_patch_the_webhook_configurations() -> None:
    """RBAC names the objects, the ValidatingAdmissionPolicy the field (caBundle): it must cover every
    ServiceAccount RBAC lets patch a webhook configuration, in both trees."""
    for tree, docs in TREES.items():
        roles = {
            d["metadata"]["name"]
            for d in docs
            if d["kind"] == "ClusterRole"
            and any(
                WEBHOOK_CONFIGURATIONS & set(rule.get("resources", ()))
                and {"patch", "update"} & set(rule.get("verbs", ()))
                for rule in d["rules"]
            )
        }
        writers = {
            f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
            for d in docs
            if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] in roles
            for subject in d["subjects"]
        }
        policy = one("ValidatingAdmissionPolicy", "gpuq-webhook-cabundle-only", docs)["spec"]
        (condition,) = policy["matchConditions"]
        for writer in writers:
            assert f'"{writer}"' in condition["expression"], (tree, writer)
        if tree == "base":
            assert writers == {
                f"system:serviceaccount:{NAMESPACE}:gpuq-webhook",
                f"system:serviceaccount:{NAMESPACE}:gpuq-certs",
            }
        (rule,) = policy["matchConstraints"]["resourceRules"]
        assert set(rule["resources"]) == WEBHOOK_CONFIGURATIONS and "UPDATE" in rule["operations"]
        assert policy["failurePolicy"] == "Fail"
        binding = one("ValidatingAdmissionPolicyBinding", "gpuq-webhook-cabundle-only", docs)["spec"]
        assert binding == {"policyName": "gpuq-webhook-cabundle-only", "validationActions": ["Deny"]}


def test_the_policy_compares_every_field_of_a_webhook_but_the_ca_bundle() -> None:
    """The fields of admissionregistration.k8s.io/v1 Validating- and MutatingWebhook (Kubernetes 1.36):
    a field the policy does not compare is one a compromised pod could change."""
    fields = (
        "rules", "failurePolicy", "matchPolicy", "namespaceSelector", "objectSelector", "sideEffects",
        "timeoutSeconds", "admissionReviewVersions", "matchConditions", "reinvocationPolicy",
    )  # fmt: skip
    (changed,) = one("ValidatingAdmissionPolicy", "gpuq-webhook-cabundle-only")["spec"]["variables"]
    for name in fields:
        assert f"w.?{name} == o.?{name}" in changed["expression"], name
    for name in ("url", "service"):
        assert f"w.clientConfig.?{name} == o.clientConfig.?{name}" in changed["expression"], name
    assert "caBundle" not in changed["expression"]
