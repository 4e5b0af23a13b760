"""gpuq's webhook as deploy/ installs it, on the e2e control plane (no kubelet, no kube-proxy).

Everything comes from the chart (deploy/helm/gpuq, rendered as deploy/render.py renders deploy/): the
Namespace, ServiceAccounts, RBAC and the policy narrowing it are applied as rendered; the Validating- and
MutatingWebhookConfiguration are applied as rendered except for one change, made in one place
(:func:`reach_over_loopback`): the harness has no kube-proxy, so the apiserver cannot reach a Service,
and ``clientConfig.service`` becomes ``clientConfig.url`` on the loopback port the process listens on.
matchConditions, rules, failurePolicy, namespaceSelector, timeouts and names stay as rendered (the
function checks it). The process is ``gpuq webhook`` with the rendered Deployment's own arguments, on
the gpuq-webhook ServiceAccount's token; only what a pod would get from its mounts and ports is
replaced (the configuration file, the ports, the bind address), plus the flags a test adds (e.g. an
IP SAN for 127.0.0.1 and short certificate validities).
"""

from __future__ import annotations

import copy
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cluster_fixtures import REPO_ROOT
from tests.e2e.controlplane.harness import ControlPlane, free_ports
from tests.e2e.manifests import render

NAMESPACE = "gpuq-system"
CONFIGURATION = "gpuq-webhook"
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
# The access the chart grants, and the ValidatingAdmissionPolicy that narrows it (gpuq's ServiceAccounts
# may change only the caBundle of the webhook configurations): applied together, always.
RBAC_KINDS = frozenset(
    {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)
PLAIN = ("plainManifests=true", "namespace.create=true")


def chart(settings: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The chart's documents for ``settings`` (on top of the plain-manifest ones of deploy/base)."""
    text = render.helm_template(render.find_helm(), [*PLAIN, *settings], namespace=NAMESPACE)
    return [d for d in yaml.safe_load_all(text) if d]


def reach_over_loopback(configurations: Sequence[dict[str, Any]], port: int) -> list[dict[str, Any]]:
    """The rendered webhook configurations with ``clientConfig.service`` swapped for the loopback URL of
    the same path; nothing else changes (the caBundle is left to the webhook's renewer to inject)."""
    swapped = []
    for rendered in configurations:
        assert rendered["kind"] in WEBHOOK_KINDS, rendered["kind"]
        doc = copy.deepcopy(rendered)
        for hook in doc["webhooks"]:
            service = hook["clientConfig"].pop("service")
            assert service == {
                "name": "gpuq-webhook",
                "namespace": NAMESPACE,
                "path": service["path"],
                "port": 443,
            }
            hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{service['path']}"
        swapped.append(doc)
    for before, after in zip(configurations, swapped, strict=True):
        for old, new in zip(before["webhooks"], after["webhooks"], strict=True):
            rest = {k: v for k, v in new.items() if k != "clientConfig"}
            assert rest == {k: v for k, v in old.items() if k != "clientConfig"}
            assert set(new["clientConfig"]) == {"url"} | (set(old["clientConfig"]) - {"service"})
    return swapped


def webhook_configurations(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in WEBHOOK_KINDS]


def deployment_args(docs: Sequence[dict[str, Any]]) -> list[str]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpuq-webhook"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def config_map_file(docs: Sequence[dict[str, Any]], directory: Path) -> Path:
    """The scheduler configuration the Deployment mounts, as a file."""
    (config,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuq-scheduler-config"
    ]
    path = directory / "config.yaml"
    path.write_text(config["data"]["config.yaml"])
    return path


def token_kubeconfig(plane: ControlPlane, account: str, path: Path, namespace: str = NAMESPACE) -> Path:
    """A kubeconfig authenticating as ``<namespace>/<account>`` with a TokenRequest token; its
    context's namespace is ``namespace`` (what kubectl uses without -n)."""
    token = plane.kubectl("create", "token", account, "-n", namespace, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(plane.kubeconfig.read_text())
    context = {"cluster": admin["clusters"][0]["name"], "user": account, "namespace": namespace}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": context}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@dataclass
class DeployedWebhook:
    """The chart's webhook on the control plane: RBAC and configurations applied, ``gpuq webhook`` run
    with the Deployment's arguments. ``remove()`` deletes the configurations (they match every
    namespace) and the certificate state; call it whatever happens."""

    plane: ControlPlane
    directory: Path
    settings: Sequence[str] = ()
    extra_args: Sequence[str] = ()
    docs: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    metrics_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def replica(self, directory: Path) -> DeployedWebhook:
        """Another replica of the same (installed) Deployment, on its own ports (the apiserver reaches
        the first only)."""
        assert self.docs, "install() first"
        other = DeployedWebhook(self.plane, directory, self.settings, self.extra_args, self.docs)
        other.port, other.metrics_port = free_ports(2)
        return other

    @property
    def log_path(self) -> Path:
        return self.directory / "webhook.log"

    def install(self) -> None:
        self.docs = chart(self.settings)
        self.port, self.metrics_port = free_ports(2)
        self.reset_certificates()
        rbac = [d for d in self.docs if d["kind"] in RBAC_KINDS]
        configurations = reach_over_loopback(webhook_configurations(self.docs), self.port)
        self.plane.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(rbac + configurations),
        )

    def reset_certificates(self) -> None:
        kubectl = self.plane.kubectl
        kubectl(
            "delete", "secret", "gpuq-webhook-tls", "gpuq-webhook-ca", "-n", NAMESPACE, "--ignore-not-found"
        )
        kubectl("delete", "lease", "gpuq-webhook-certs", "-n", NAMESPACE, "--ignore-not-found")

    def start(self) -> None:
        kubeconfig = token_kubeconfig(self.plane, "gpuq-webhook", self.directory / "webhook.kubeconfig")
        config = config_map_file(self.docs, self.directory)
        argv = [
            *(sys.executable, "-m", "gpuq_k8s.cli", *deployment_args(self.docs)),
            *(f"--config={config}", f"--kubeconfig={kubeconfig}", "--bind-address=127.0.0.1"),
            *(f"--port={self.port}", f"--metrics-port={self.metrics_port}", "--certificate-ip=127.0.0.1"),
            *self.extra_args,
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT
            )

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}{path}", timeout=timeout
            ) as reply:
                return int(reply.status), reply.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, ""
        except OSError:
            return 0, ""

    def log(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Until the HTTPS port accepts connections and the caBundle is injected (the first renewal)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.poll() is None, f"webhook exited:\n{self.log()}"
            if self.get("/readyz")[0] == 200 and self.https_open() and self.ca_bundle():
                return
            time.sleep(0.2)
        raise AssertionError(f"the webhook did not serve within {timeout}s:\n{self.log()}")

    def https_open(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def ca_bundle(self) -> str:
        out = self.plane.kubectl(
            "get",
            "validatingwebhookconfiguration",
            CONFIGURATION,
            "-o",
            "jsonpath={.webhooks[0].clientConfig.caBundle}",
        ).stdout
        return out.strip()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def remove(self) -> None:
        self.kill()
        self.plane.kubectl(
            "delete",
            f"validatingwebhookconfiguration/{CONFIGURATION}",
            f"mutatingwebhookconfiguration/{CONFIGURATION}",
            "--ignore-not-found",
        )
