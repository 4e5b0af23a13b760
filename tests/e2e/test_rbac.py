"""deploy/'s RBAC against the real API server, and both processes running on the ServiceAccount tokens
it grants (not the admin kubeconfig).

- A table of `kubectl auth can-i --as=system:serviceaccount:gpuq-system:<sa>`: every permission the
  scheduler, the webhook (its certificate renewal included) and the certificate Job use is granted; other
  Secrets, pod spec writes and node
  writes are denied.
- The webhook with its own token syncs its caches and denies a bad Queue; the scheduler with its own
  token syncs and takes its Lease in gpuq-system.
- The Grafana dashboard and the alert rules only name metrics the two processes export (live scrape).
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from gpuq_k8s.certs.authority import create_ca, issue_serving_certificate
from gpuq_k8s.certs.files import write_key_pair
from gpuq_k8s.common.model import kinds
from tests.e2e import rbac_fixtures
from tests.e2e.cluster_fixtures import SchedulerProcess
from tests.e2e.controlplane.harness import ControlPlane, Kubectl, free_ports
from tests.e2e.deployed_webhook import token_kubeconfig
from tests.e2e.manifests import DEPLOY, NAMESPACE, kustomize
from tests.e2e.rbac_fixtures import CERTS, FORBIDDEN, SCHEDULER, WEBHOOK
from tests.testing.builders import MakeQueue

pytestmark = pytest.mark.e2e

installed_rbac = rbac_fixtures.installed_rbac
service_account_kubeconfigs = rbac_fixtures.service_account_kubeconfigs

ALL = "*"  # all namespaces
TEAM = "team-a"  # any namespace a workload runs in
CRS = (kinds.QUEUE.resource, kinds.POD_GROUP.resource)
QUOTAS = (kinds.ELASTIC_QUOTA.resource, kinds.GPU_RESOURCE_QUOTA.resource)

# (service account, verb, resource[/name], subresource, namespace, allowed)
CAN_I: list[tuple[str, str, str, str, str, bool]] = [
    # scheduler: its informers
    *[
        (SCHEDULER, verb, resource, "", ALL, True)
        for resource in (k.resource for k in kinds.SCHEDULER_WATCHES)
        for verb in ("get", "list", "watch")
    ],
    # scheduler: its writes
    (SCHEDULER, "create", "pods", "binding", TEAM, True),
    (SCHEDULER, "patch", "pods", "status", TEAM, True),
    (SCHEDULER, "delete", "pods", "", TEAM, True),
    (SCHEDULER, "create", "events.events.k8s.io", "", TEAM, True),
    (SCHEDULER, "patch", "events.events.k8s.io", "", TEAM, True),
    *[(SCHEDULER, "patch", k.resource, "status", ALL, True) for k in kinds.STATUS_WRITES],
    # PreBind: a PersistentVolume's claimRef, a PersistentVolumeClaim's selected-node annotation
    *[(SCHEDULER, "patch", k.resource, "", ALL, True) for k in kinds.OBJECT_WRITES],
    # PreBind of DRA claims: the finalizer, the status, and the binding subresource 1.36 authorizes an
    # allocation or a reservation against (kube-controller-manager makes the template claims)
    *[
        (SCHEDULER, "patch", k.resource, sub, TEAM, True)
        for k in kinds.CLAIM_WRITES
        for sub in kinds.CLAIM_WRITE_SUBRESOURCES
    ],
    # ... and a pod's implicit claim for extended resources (DRAExtendedResource), created at PreBind
    # and deleted when the binding fails; never updated
    *[
        (SCHEDULER, verb, k.resource, "", TEAM, True)
        for k in kinds.CLAIM_WRITES
        for verb in kinds.CLAIM_LIFECYCLE_VERBS
    ],
    *[
        (SCHEDULER, verb, k.resource, sub, TEAM, False)
        for k in kinds.CLAIM_WRITES
        for verb, sub in (("update", ""), ("update", "status"))
    ],
    *[
        (SCHEDULER, verb, k.resource, "", ALL, False)
        for k in (kinds.DEVICE_CLASS, kinds.RESOURCE_SLICE, kinds.RESOURCE_CLAIM_TEMPLATE)
        for verb in ("create", "patch")
    ],
    (SCHEDULER, "create", "leases.coordination.k8s.io", "", NAMESPACE, True),
    (SCHEDULER, "get", "leases.coordination.k8s.io/gpuq-scheduler", "", NAMESPACE, True),
    (SCHEDULER, "update", "leases.coordination.k8s.io/gpuq-scheduler", "", NAMESPACE, True),
    # scheduler: denied
    (SCHEDULER, "get", "secrets", "", ALL, False),
    (SCHEDULER, "list", "secrets", "", NAMESPACE, False),
    (SCHEDULER, "create", "pods", "", TEAM, False),
    (SCHEDULER, "update", "pods", "", TEAM, False),
    # (patch pods is granted: a tensor-fusion pod's gpu-ids annotation, kinds.OBJECT_WRITES)
    (SCHEDULER, "create", "pods", "eviction", TEAM, False),
    *[(SCHEDULER, verb, "nodes", "", ALL, False) for verb in ("create", "update", "patch", "delete")],
    (SCHEDULER, "patch", "nodes", "status", ALL, False),
    *[
        (SCHEDULER, verb, resource, "", ALL, False)
        for resource in (*CRS, *QUOTAS)
        for verb in ("update", "patch")
        # a PodGroup's status lives in the object on Volcano's own CRD (no status subresource)
        if not (verb == "patch" and resource == kinds.POD_GROUP.resource)
    ],
    # ... and no other write of volumes or claims (the PV controller and provisioners make them)
    *[
        (SCHEDULER, verb, k.resource, sub, ALL, False)
        for k in kinds.OBJECT_WRITES
        for verb, sub in (("create", ""), ("update", ""), ("delete", ""), ("patch", "status"))
        if not (sub == "status" and k in kinds.STATUS_WRITES)
        # a pod: deleted for preemption, its PodScheduled condition patched (allowed above)
        and not (k is kinds.POD and (verb == "delete" or sub == "status"))
    ],
    *[
        (SCHEDULER, verb, k.resource, "", ALL, False)
        for k in (kinds.STORAGE_CLASS, kinds.CSI_NODE)
        for verb in ("create", "patch")
    ],
    (SCHEDULER, "update", "leases.coordination.k8s.io/kube-scheduler", "", NAMESPACE, False),
    (SCHEDULER, "create", "leases.coordination.k8s.io", "", "kube-system", False),
    (SCHEDULER, "update", "configmaps", "", NAMESPACE, False),
    # webhook: reads only what it watches
    *[
        (WEBHOOK, verb, resource, "", ALL, True)
        for resource in (k.resource for k in kinds.WEBHOOK_WATCHES)
        for verb in ("get", "list", "watch")
    ],
    (WEBHOOK, "get", "secrets", "", ALL, False),
    (WEBHOOK, "get", "secrets", "", NAMESPACE, False),
    # webhook: certificate renewal (certs/renewer.py), its two Secrets and its Lease by name
    (WEBHOOK, "get", "secrets/gpuq-webhook-tls", "", NAMESPACE, True),
    (WEBHOOK, "update", "secrets/gpuq-webhook-ca", "", NAMESPACE, True),
    (WEBHOOK, "update", "secrets/other", "", NAMESPACE, False),
    (WEBHOOK, "get", "secrets/gpuq-webhook-tls", "", "kube-system", False),
    (WEBHOOK, "update", "leases.coordination.k8s.io/gpuq-webhook-certs", "", NAMESPACE, True),
    (
        WEBHOOK,
        "patch",
        "validatingwebhookconfigurations.admissionregistration.k8s.io/gpuq-webhook",
        "",
        ALL,
        True,
    ),
    (WEBHOOK, "patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/other", "", ALL, False),
    (WEBHOOK, "list", "pods", "", ALL, False),
    (WEBHOOK, "create", "pods", "", TEAM, False),
    (WEBHOOK, "update", "pods", "", TEAM, False),
    (WEBHOOK, "patch", "pods", "", TEAM, False),
    (WEBHOOK, "create", "pods", "binding", TEAM, False),
    (WEBHOOK, "patch", "nodes", "", ALL, False),
    (WEBHOOK, "delete", "nodes", "", ALL, False),
    (WEBHOOK, "patch", "queues.scheduling.volcano.sh", "status", ALL, False),
    (WEBHOOK, "create", "events.events.k8s.io", "", TEAM, False),
    # certificate Job: one Secret, two webhook configurations, nothing else
    (CERTS, "create", "secrets", "", NAMESPACE, True),
    (CERTS, "update", "secrets/gpuq-webhook-tls", "", NAMESPACE, True),
    (CERTS, "get", "secrets/gpuq-webhook-ca", "", NAMESPACE, True),
    (CERTS, "update", "secrets/gpuq-webhook-ca", "", NAMESPACE, True),
    (CERTS, "get", "secrets/gpuq-webhook-tls", "", NAMESPACE, False),
    (
        CERTS,
        "get",
        "validatingwebhookconfigurations.admissionregistration.k8s.io/gpuq-webhook",
        "",
        ALL,
        True,
    ),
    (
        CERTS,
        "patch",
        "validatingwebhookconfigurations.admissionregistration.k8s.io/gpuq-webhook",
        "",
        ALL,
        True,
    ),
    (
        CERTS,
        "patch",
        "mutatingwebhookconfigurations.admissionregistration.k8s.io/gpuq-webhook",
        "",
        ALL,
        True,
    ),
    (CERTS, "get", "secrets", "", NAMESPACE, False),
    (CERTS, "list", "secrets", "", ALL, False),
    (CERTS, "update", "secrets/other", "", NAMESPACE, False),
    (CERTS, "create", "secrets", "", "kube-system", False),
    (CERTS, "patch", "validatingwebhookconfigurations.admissionregistration.k8s.io/other", "", ALL, False),
    (CERTS, "create", "pods", "", NAMESPACE, False),
    (CERTS, "patch", "nodes", "", ALL, False),
]


@pytest.mark.parametrize(
    "case",
    CAN_I,
    ids=[
        f"{'allow' if a else 'deny'}-{sa.removeprefix('gpuq-')}-{verb}-{res}{'/' + sub if sub else ''}@{ns}"
        for sa, verb, res, sub, ns, a in CAN_I
    ],
)
def test_service_account_permissions(
    installed_rbac: str, kubectl: Kubectl, case: tuple[str, str, str, str, str, bool]
) -> None:
    """Issue 7, done when: `kubectl auth can-i --as=system:serviceaccount:gpuq-system:<sa>` confirms
    every permission each process needs and denies Secrets, pod create/update and node writes."""
    account, verb, resource, subresource, namespace, allowed = case
    args = ["auth", "can-i", verb, resource, f"--as=system:serviceaccount:{NAMESPACE}:{account}"]
    args += ["--all-namespaces"] if namespace == ALL else ["-n", namespace]
    if subresource:
        args.append(f"--subresource={subresource}")
    result = kubectl(*args, check=False)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: {result.stderr}"
    assert (answer == "yes") == allowed, f"kubectl {' '.join(args)} answered {answer}"


# ------------------------------------------------------------------ the processes on their own tokens


def http_get(url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except OSError:
        return 0, ""


def wait_ready(process: subprocess.Popen[bytes], url: str, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"exited with {process.returncode}:\n{log.read_text(errors='replace')}"
        if http_get(url, timeout=1.0)[0] == 200:
            return
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready after {timeout}s:\n{log.read_text(errors='replace')}")


@pytest.fixture
def webhook_process(
    service_account_kubeconfigs: dict[str, Path], tmp_path: Path
) -> Iterator[tuple[int, int, Path]]:
    """`gpuq webhook` on the gpuq-webhook token, with a certificate for 127.0.0.1: (https, metrics, ca)."""
    ca = create_ca("gpuq-e2e-webhook-ca")
    write_key_pair(ca, tmp_path / "ca.crt", tmp_path / "ca.key")
    serving = issue_serving_certificate(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    write_key_pair(serving, tmp_path / "tls.crt", tmp_path / "tls.key")
    https, metrics = free_ports(2)
    log = tmp_path / "webhook.log"
    argv = [
        *(sys.executable, "-m", "gpuq_k8s.cli", "webhook"),
        *("--kubeconfig", str(service_account_kubeconfigs[WEBHOOK])),
        *("--tls-cert-file", str(tmp_path / "tls.crt"), "--tls-private-key-file", str(tmp_path / "tls.key")),
        *("--port", str(https), "--metrics-port", str(metrics), "--bind-address", "127.0.0.1"),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_ready(process, f"http://127.0.0.1:{metrics}/readyz", log)
        yield https, metrics, tmp_path / "ca.crt"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, (
        f"webhook exited with {process.returncode}:\n{log.read_text(errors='replace')}"
    )
    text = log.read_text(errors="replace")
    assert not FORBIDDEN.search(text), text


@pytest.fixture
def scheduler_process(
    service_account_kubeconfigs: dict[str, Path], tmp_path: Path
) -> Iterator[SchedulerProcess]:
    """`gpuq scheduler --leader-elect` on the gpuq-scheduler token, with its Lease in gpuq-system."""
    (port,) = free_ports(1)
    argv = [
        *(sys.executable, "-m", "gpuq_k8s.cli", "scheduler"),
        *("--kubeconfig", str(service_account_kubeconfigs[SCHEDULER])),
        *("--scheduler-name", "gpuq-rbac-e2e", "--metrics-port", str(port), "--bind-address", "127.0.0.1"),
        *("--leader-elect", "--leader-elect-resource-namespace", NAMESPACE),
        *("--leader-elect-retry-period", "0.5", "--leader-elect-renew-deadline", "2"),
        *("--leader-elect-lease-duration", "3"),
    ]
    process = SchedulerProcess(argv, tmp_path / "scheduler.log", port).start()
    try:
        yield process
    finally:
        code = process.terminate()
    assert code == 0, f"scheduler exited with {code}:\n{process.log()}"


def admission_review(obj: dict[str, Any], group: str, version: str, kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d9e7c1a-rbac-e2e",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": plural},
            "name": obj["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": obj,
        },
    }


def post_review(port: int, ca: Path, path: str, review: dict[str, Any]) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5, context=context) as reply:
        return dict(json.loads(reply.read()))


def test_certificate_job_rotates_on_its_token_and_keeps_the_ca(
    installed_rbac: str, control_plane: ControlPlane, kubectl: Kubectl, tmp_path: Path
) -> None:
    """`gpuq certs issue` as the Job runs it, on the gpuq-certs token: the first run creates and keeps a
    CA, the second (a rotation) reuses it, so the serving certificate changes and the CA bundle the
    apiserver trusts does not."""
    config = token_kubeconfig(control_plane, CERTS, tmp_path / "certs.kubeconfig")
    for name in ("gpuq-webhook-tls", "gpuq-webhook-ca"):
        kubectl("delete", "secret", name, "-n", NAMESPACE, "--ignore-not-found")
    argv = [
        sys.executable, "-m", "gpuq_k8s.cli", "certs", "issue", "--service", "gpuq-webhook",
        "--namespace", NAMESPACE, "--secret", "gpuq-webhook-tls", "--ca-secret", "gpuq-webhook-ca",
        "--kubeconfig", str(config),
    ]  # fmt: skip

    def secret(name: str) -> dict[str, str]:
        data = json.loads(kubectl("get", "secret", name, "-n", NAMESPACE, "-o", "json").stdout)["data"]
        return {key: base64.b64decode(value).decode() for key, value in data.items()}

    first = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "issued a new CA (none kept yet)" in first.stdout
    kept, served = secret("gpuq-webhook-ca"), secret("gpuq-webhook-tls")
    second = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert second.returncode == 0, second.stderr
    assert "reusing the CA kept in Secret gpuq-system/gpuq-webhook-ca" in second.stdout
    rotated = secret("gpuq-webhook-tls")
    assert secret("gpuq-webhook-ca") == kept
    assert rotated["ca.crt"] == served["ca.crt"] == kept["ca.crt"]
    assert rotated["tls.crt"] != served["tls.crt"]
    ca = x509.load_pem_x509_certificate(kept["ca.crt"].encode())
    x509.load_pem_x509_certificate(rotated["tls.crt"].encode()).verify_directly_issued_by(ca)


def test_webhook_runs_on_its_service_account_token(webhook_process: tuple[int, int, Path]) -> None:
    """The webhook's informers list and watch with the read-only role; a bad card quota is denied."""
    https, _, ca = webhook_process
    queue = MakeQueue("rbac-bad").card_quota('{"NVIDIA-A100": -1}').weight(1).obj()
    answer = post_review(
        https, ca, "/validate", admission_review(queue, "scheduling.volcano.sh", "v1beta1", "Queue", "queues")
    )
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403, answer
    assert (
        "Queue/rbac-bad" in response["status"]["message"]
        and "volcano.sh/card.quota" in response["status"]["message"]
    )


async def test_scheduler_runs_on_its_service_account_token_and_holds_its_lease(
    scheduler_process: SchedulerProcess, kubectl: Kubectl
) -> None:
    await scheduler_process.wait_ready()
    deadline = time.monotonic() + 20
    holder = ""
    while time.monotonic() < deadline and not holder:
        result = kubectl(
            "get",
            "lease",
            "gpuq-scheduler",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.spec.holderIdentity}",
            check=False,
        )
        holder = result.stdout.strip() if result.returncode == 0 else ""
        time.sleep(0.2)
    assert holder, f"no Lease gpuq-system/gpuq-scheduler held:\n{scheduler_process.log()}"
    assert "Forbidden" not in scheduler_process.log(400), scheduler_process.log(400)


# ------------------------------------------------------------------ dashboard and rules vs /metrics

PROMQL_KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
    }
)
# Produced by Prometheus for every scrape target, not by the processes.
SYNTHETIC = frozenset({"up"})


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (label names, functions and variables removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\{?\w+\}?", "", text)  # Grafana variables
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if not call and name.lower() not in PROMQL_KEYWORDS:
            names.add(name)
    return names


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((DEPLOY / "helm" / "gpuq" / "dashboards" / "gpuq.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict) and (found := re.match(r"label_values\((\w+)", query.get("query", ""))):
            exprs.append(found.group(1))
    return exprs


def rule_exprs(kubectl: Kubectl) -> list[str]:
    rules = [d for d in kustomize(kubectl, DEPLOY / "monitoring") if d["kind"] == "PrometheusRule"]
    return [r["expr"] for d in rules for g in d["spec"]["groups"] for r in g["rules"]]


def exported(text: str) -> set[str]:
    """Every sample name a /metrics body can carry, including families that have no sample yet."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()[:4]
            names.add(name)
            suffixes = {
                "counter": ("_total", "_created"),
                "histogram": ("_bucket", "_sum", "_count", "_created"),
            }
            names.update(name + s for s in suffixes.get(kind, ()))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_metric_name_extraction() -> None:
    expr = 'histogram_quantile(0.99, sum by (le, e) (rate(a_bucket{x="y"}[5m]))) / max(b) > 0.9 and on (q) c'
    assert metric_names(expr) == {"a_bucket", "b", "c"}
    assert metric_names('absent(up{job="gpuq"} == 1)') == {"up"}


async def test_dashboard_and_alerts_only_name_exported_metrics(
    webhook_process: tuple[int, int, Path], scheduler_process: SchedulerProcess, kubectl: Kubectl
) -> None:
    """Issue 7, done when: each metric a Grafana query or an alert rule names is in a live scrape."""
    await scheduler_process.wait_ready()
    _, metrics_port, _ = webhook_process
    code, webhook_text = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
    assert code == 200
    available = exported(webhook_text) | exported(scheduler_process.metrics())
    dashboard = set().union(*map(metric_names, dashboard_exprs()))
    rules = set().union(*map(metric_names, rule_exprs(kubectl)))
    assert len(dashboard) >= 10, dashboard
    missing = sorted((dashboard | rules) - available - SYNTHETIC)
    assert not missing, f"not exported by gpuq scheduler or webhook: {missing}"
