"""The chart's ValidatingAdmissionPolicy gpuq-webhook-cabundle-only (issue 24, blast radius), enforced by
the real kube-apiserver 1.36: gpuq's webhook ServiceAccount (the certificate renewal) and the
certificate Job's may patch the webhook configurations gpuq-webhook (RBAC), and the policy lets them
change the caBundle there and nothing else. Requests are sent with each ServiceAccount's own token.

The rendered webhook configurations point at a Service this control plane does not run, so they are
deleted at the end whatever happens (kept, they would refuse gpuq's objects in every other test)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.controlplane.harness import ControlPlane, Kubectl
from tests.e2e.deployed_webhook import (
    CONFIGURATION,
    NAMESPACE,
    RBAC_KINDS,
    chart,
    token_kubeconfig,
    webhook_configurations,
)
from tests.e2e.rbac_fixtures import CERTS, WEBHOOK

pytestmark = pytest.mark.e2e

POLICY = "gpuq-webhook-cabundle-only"
KINDS = ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")
REFUSED = f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request"
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n").decode()

# (what, JSON patch) a compromised pod would try: everything but the caBundle.
WIDENINGS: list[tuple[str, list[dict[str, Any]]]] = [
    ("rules", [{"op": "replace", "path": "/webhooks/0/rules/0/resources", "value": ["*"]}]),
    ("namespaceSelector", [{"op": "remove", "path": "/webhooks/0/namespaceSelector"}]),
    ("matchConditions", [{"op": "remove", "path": "/webhooks/0/matchConditions"}]),
    ("sideEffects", [{"op": "replace", "path": "/webhooks/0/sideEffects", "value": "NoneOnDryRun"}]),
    ("timeoutSeconds", [{"op": "replace", "path": "/webhooks/0/timeoutSeconds", "value": 30}]),
    (
        "clientConfig.url",
        [
            {"op": "remove", "path": "/webhooks/0/clientConfig/service"},
            {"op": "add", "path": "/webhooks/0/clientConfig/url", "value": "https://elsewhere.example/x"},
        ],
    ),
    (
        "a second webhook",
        [
            {"op": "copy", "from": "/webhooks/0", "path": "/webhooks/1"},
            {"op": "replace", "path": "/webhooks/1/name", "value": "widened.gpuq.io"},
        ],
    ),
    ("a label", [{"op": "add", "path": "/metadata/labels/x", "value": "y"}]),
]


@pytest.fixture(scope="module")
def installed(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    """The chart's RBAC, the policy and its binding, and the two webhook configurations, applied as
    rendered; the kubeconfigs of the two ServiceAccounts' tokens."""
    docs = chart()
    kinds = {d["kind"] for d in docs}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds & RBAC_KINDS
    applied = [d for d in docs if d["kind"] in RBAC_KINDS] + webhook_configurations(docs)
    control_plane.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(applied)
    )
    directory = tmp_path_factory.mktemp("policy")
    try:
        kubeconfigs = {
            account: token_kubeconfig(control_plane, account, directory / account)
            for account in (WEBHOOK, CERTS)
        }
        # A new policy takes effect once the apiserver's policy informer has it (about a second).
        deadline = time.monotonic() + 30
        probe = (control_plane.kubectl, kubeconfigs[WEBHOOK], KINDS[0], WIDENINGS[0][1], "--dry-run=server")
        while REFUSED not in patch_as(*probe).stderr:
            assert time.monotonic() < deadline, "the policy did not take effect within 30 s"
            time.sleep(0.2)
        yield kubeconfigs
    finally:
        control_plane.kubectl("delete", *(f"{kind}/{CONFIGURATION}" for kind in KINDS), "--ignore-not-found")


def stored(kubectl: Kubectl, kind: str) -> dict[str, Any]:
    """The configuration without what the apiserver changes on every write."""
    obj = json.loads(kubectl("get", kind, CONFIGURATION, "-o", "json").stdout)
    for key in ("resourceVersion", "managedFields", "generation"):
        obj["metadata"].pop(key, None)
    return dict(obj)


def patch_as(kubectl: Kubectl, kubeconfig: Path, kind: str, ops: list[dict[str, Any]], *extra: str) -> Any:
    return kubectl(
        "--kubeconfig", str(kubeconfig), "patch", kind, CONFIGURATION, "--type=json", "-p", json.dumps(ops),
        *extra, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("account", [WEBHOOK, CERTS])
@pytest.mark.parametrize("kind", KINDS)
def test_gpuqs_service_accounts_may_set_the_ca_bundle_and_nothing_else(
    installed: dict[str, Path], kubectl: Kubectl, account: str, kind: str
) -> None:
    kubeconfig = installed[account]
    bundle = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": CA}]
    allowed = patch_as(kubectl, kubeconfig, kind, bundle)
    assert allowed.returncode == 0, allowed.stderr
    before = stored(kubectl, kind)
    assert before["webhooks"][0]["clientConfig"]["caBundle"] == CA
    for what, ops in WIDENINGS:
        refused = patch_as(kubectl, kubeconfig, kind, ops)
        assert refused.returncode != 0, f"{account} changed {what} of {kind}/{CONFIGURATION}"
        assert REFUSED in refused.stderr and "may change only clientConfig.caBundle" in refused.stderr, (
            what,
            refused.stderr,
        )
        assert stored(kubectl, kind) == before, what
    # The policy binds gpuq's ServiceAccounts only: an administrator still changes what it likes.
    timeout = [{"op": "replace", "path": "/webhooks/0/timeoutSeconds", "value": 29}]
    admin = kubectl("patch", kind, CONFIGURATION, "--type=json", "-p", json.dumps(timeout), check=False)
    assert admin.returncode == 0, admin.stderr
    assert stored(kubectl, kind)["webhooks"][0]["timeoutSeconds"] == 29


def test_the_policy_compiles_without_warnings(installed: dict[str, Path], kubectl: Kubectl) -> None:
    """The apiserver type-checks the policy's expressions against both kinds: none is reported."""
    status = json.loads(kubectl("get", "validatingadmissionpolicy", POLICY, "-o", "json").stdout).get(
        "status", {}
    )
    assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status
    assert NAMESPACE in kubectl("get", "validatingadmissionpolicy", POLICY, "-o", "yaml").stdout
