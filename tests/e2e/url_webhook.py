"""A webhook served on 127.0.0.1, outside the cluster, as the e2e tests register it: url-based
ValidatingWebhookConfiguration and MutatingWebhookConfiguration that only match namespaces and Queues
carrying a label, and objects created through kubectl (admitted, or the apiserver's refusal)."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.controlplane.harness import Kubectl

# The label the configurations match (namespaces, and Queues, which are cluster-scoped).
LABEL = "gpuq-e2e-webhook"


def configurations(
    port: int, ca_bundle: str, prefix: str = "gpuq-e2e", label: tuple[str, str] = (LABEL, "true")
) -> list[dict[str, Any]]:
    """Url-based webhook configurations ``<prefix>-validate`` and ``<prefix>-mutate`` for a webhook on
    127.0.0.1:``port``, matching namespaces and Queues that carry ``label``."""

    def hook(name: str, path: str, rules: list[dict[str, Any]], **selectors: Any) -> dict[str, Any]:
        return {
            "name": name,
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle},
            "rules": rules,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "timeoutSeconds": 5,
            **selectors,
        }

    namespaced = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
        {
            "apiGroups": ["scheduling.volcano.sh"],
            "apiVersions": ["v1beta1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["podgroups"],
        },
        {
            "apiGroups": ["scheduling.x-k8s.io"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["elasticquotas"],
        },
        {
            "apiGroups": ["tensor-fusion.ai"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["gpuresourcequotas"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
        },
    ]
    queues = [
        {
            "apiGroups": ["scheduling.volcano.sh"],
            "apiVersions": ["v1beta1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["queues"],
            "scope": "Cluster",
        }
    ]
    ns_selector = {"namespaceSelector": {"matchLabels": dict([label])}}
    obj_selector = {"objectSelector": {"matchLabels": dict([label])}}
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"{prefix}-validate"},
        "webhooks": [
            hook("validate.gpuq.e2e", "/validate", namespaced, **ns_selector),
            hook("validate-queues.gpuq.e2e", "/validate", queues, **obj_selector),
        ],
    }
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": f"{prefix}-mutate"},
        "webhooks": [
            {
                **hook("mutate.gpuq.e2e", "/mutate", namespaced[:1], **ns_selector),
                "reinvocationPolicy": "Never",
            }
        ],
    }
    return [validating, mutating]


def create(kubectl: Kubectl, document: dict[str, Any]) -> tuple[bool, str]:
    result = kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(document), check=False)
    return result.returncode == 0, result.stdout if result.returncode == 0 else result.stderr
