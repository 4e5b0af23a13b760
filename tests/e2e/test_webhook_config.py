"""One configuration for scheduler and webhook (design.md Semantics 10), through the real apiserver.

Under each of four configurations (capacity-card only; gpu-quota only; all plugins; capacity-card with
``cardUnlimitedCpuMemory``) the test keeps the configuration in one ConfigMap and runs both real
processes on the file that ConfigMap holds: ``gpuq webhook --config`` (over TLS, registered with the
apiserver) and ``gpuq scheduler --config``. It creates a set of pods through the apiserver and checks
that the webhook admits exactly what the scheduler could ever place under that configuration:

* every pod's verdict is the one expected for that configuration (the table below), and a denial names
  the pod;
* the running scheduler binds every admitted pod (they all fit together on the one GPU node);
* for each pod without a malformed annotation, the scheduler itself (``gpuq simulate`` with the same
  file, the same Node, Queues and GPUResourceQuota, the pod alone, as the apiserver stored it) binds it
  exactly when the webhook admitted it;
* a malformed scoring or quota annotation is denied exactly when the plugin that reads it is enabled
  (Semantics 3: the scheduler would place such a pod with a Warning and the fallback).

One webhook process per configuration; its webhook configurations match only this module's namespaces
and are deleted with it.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.certs import create_ca, issue_serving_certificate, write_key_pair
from gpuq_k8s.cli import main as gpuq_main
from gpuq_k8s.common.model.annotations import (
    CROSSQUOTA_SCORING_STRATEGY,
    RESOURCE_STRATEGY_SCORING_TYPE,
    RESOURCE_STRATEGY_WEIGHT,
)
from gpuq_k8s.common.model.config import DEFAULT_CONFIG_YAML
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from tests.e2e.cluster_fixtures import REPO_ROOT, SchedulerProcess
from tests.e2e.controlplane.harness import ControlPlane, Kubectl, dns_label, free_ports
from tests.e2e.url_webhook import configurations, create
from tests.testing.builders import MakeGPUResourceQuota, MakeNode, MakePod, MakeQueue
from tests.testing.config import scheduler_config

pytestmark = pytest.mark.e2e

LABEL = "gpuq-e2e-webhook-config"
NODE = "gpuq-webhook-config-e2e-a100"
SMALL, BIG = "gpuq-cfg-small", "gpuq-cfg-big"
ALLOCATABLE = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}

CONFIGS = {
    "card": scheduler_config("name: capacity-card"),
    "gpu": scheduler_config("name: gpu-quota"),
    "all": DEFAULT_CONFIG_YAML,
    "unlimited": scheduler_config("name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: true}"),
}


@dataclass(frozen=True)
class Case:
    name: str
    pod: MakePod
    admitted_under: frozenset[str]  # the configurations whose webhook admits it
    malformed: bool = False  # carries a malformed annotation: the scheduler would place it anyway


def _pod(queue: str | None = BIG, cpu: str = "1") -> MakePod:
    pod = MakePod().image("busybox").req(cpu=cpu).node_selector({LABEL: "node"})
    return pod.queue(queue) if queue else pod


def _admitted(*configs: str) -> frozenset[str]:
    return frozenset(configs)


EVERYWHERE = _admitted(*CONFIGS)
CASES = [
    Case("cpu-small", _pod(), EVERYWHERE),
    # Volcano's default Queue has no capability: capacity-card refuses, nothing else looks at queues.
    Case("default-queue", _pod(queue=None), _admitted("gpu")),
    # 3 A100 over the small queue's 2; gpu-quota's single.maxGPUCount is 4.
    Case("card-over-queue", _pod(SMALL).gpus(3).card("NVIDIA-A100"), _admitted("gpu")),
    # 5 GPUs over single.maxGPUCount 4; the big queue holds 8.
    Case("gpu-over-single", _pod().gpus(5).card("NVIDIA-A100"), _admitted("card", "unlimited")),
    # 8 cpu over the small queue's 4, on a card pod: cardUnlimitedCpuMemory lets it through.
    Case("card-cpu-over", _pod(SMALL, cpu="8").gpus(1).card("NVIDIA-A100"), _admitted("gpu", "unlimited")),
    # ... but never a pod without cards.
    Case("cpu-over", _pod(SMALL, cpu="8"), _admitted("gpu")),
    Case(
        "good-annotations",
        _pod().annotations(
            {
                CROSSQUOTA_SCORING_STRATEGY: "least-allocated",
                RESOURCE_STRATEGY_SCORING_TYPE: "MostAllocated",
                RESOURCE_STRATEGY_WEIGHT: '{"cpu": 2}',
            }
        ),
        EVERYWHERE,
    ),
    Case(
        "bad-crossquota",
        _pod().annotation(CROSSQUOTA_SCORING_STRATEGY, "spread"),
        _admitted("card", "gpu", "unlimited"),
        malformed=True,
    ),
    Case(
        "bad-strategy-type",
        _pod().annotation(RESOURCE_STRATEGY_SCORING_TYPE, "Spread"),
        _admitted("card", "gpu", "unlimited"),
        malformed=True,
    ),
    Case(
        "bad-strategy-weight",
        _pod().annotation(RESOURCE_STRATEGY_WEIGHT, "not json"),
        _admitted("card", "gpu", "unlimited"),
        malformed=True,
    ),
    Case("bad-card-name", _pod().card("A||B"), _admitted("gpu"), malformed=True),
    Case(
        "bad-tflops",
        _pod().annotation("tensor-fusion.ai/tflops-request", "lots"),
        _admitted("card", "unlimited"),
        malformed=True,
    ),
]


def _node() -> dict[str, Any]:
    node = MakeNode(NODE).product("NVIDIA-A100").labels({"nvidia.com/gpu.memory": "81920", LABEL: "node"})
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": now, "lastTransitionTime": now}
    status = {"capacity": ALLOCATABLE, "allocatable": ALLOCATABLE, "conditions": [ready]}
    return {**node.obj(), "status": status}


QUEUES = [
    MakeQueue("default").obj(),  # as Volcano creates it: no capability
    MakeQueue(SMALL).capability(cpu="4", memory="8Gi").card_quota('{"NVIDIA-A100": 2}').obj(),
    MakeQueue(BIG).capability(cpu="64", memory="256Gi").card_quota('{"NVIDIA-A100": 8}').obj(),
]


@dataclass(frozen=True)
class Setup:
    plane: ControlPlane
    cert: Path
    key: Path
    ca_bundle: str


@pytest.fixture(scope="module")
def setup(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """The GPU node and the Queues (created before any webhook of this module is registered), and a
    serving certificate for 127.0.0.1."""
    kubectl = control_plane.kubectl
    directory = tmp_path_factory.mktemp("webhook-config-certs")
    ca = create_ca("gpuq-e2e-webhook-config-ca")
    write_key_pair(
        issue_serving_certificate(ca, ip_addresses=["127.0.0.1"]), directory / "c", directory / "k"
    )
    node = _node()
    kubectl("create", "-f", "-", stdin=json.dumps({k: v for k, v in node.items() if k != "status"}))
    kubectl("patch", "node", NODE, "--subresource=status", "--type=merge", "-p", json.dumps(node))
    # TaintNodesByCondition added node.kubernetes.io/not-ready; no node lifecycle controller removes it.
    kubectl("patch", "node", NODE, "--type=merge", "-p", '{"spec": {"taints": null}}')
    kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": QUEUES}))
    try:
        yield Setup(
            control_plane, directory / "c", directory / "k", base64.b64encode(ca.certificate_pem()).decode()
        )
    finally:
        kubectl("delete", "node", NODE, "--ignore-not-found")
        for queue in QUEUES:
            kubectl("delete", "queue", queue["metadata"]["name"], "--ignore-not-found")


class WebhookProcess:
    """``gpuq webhook --config``: the real process, on 127.0.0.1."""

    def __init__(self, setup: Setup, config: Path, scheduler: str, log: Path) -> None:
        self.port, metrics = free_ports(2)
        self.log = log
        argv = [
            *(sys.executable, "-m", "gpuq_k8s.cli", "webhook", "--kubeconfig", str(setup.plane.kubeconfig)),
            *("--tls-cert-file", str(setup.cert), "--tls-private-key-file", str(setup.key)),
            *("--config", str(config), "--bind-address", "127.0.0.1", "--scheduler-name", scheduler),
            *("--port", str(self.port), "--metrics-port", str(metrics), "--log-level", "WARNING"),
        ]
        with log.open("wb") as out:
            self.popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT)

    def wait_serving(self, timeout: float = 60.0) -> None:
        """The HTTPS port opens only once the informer caches have synced."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.popen.poll() is None, f"gpuq webhook exited:\n{self.log.read_text()}"
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise AssertionError(f"gpuq webhook not serving after {timeout}s:\n{self.log.read_text()}")

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def _config_file(kubectl: Kubectl, namespace: str, text: str, path: Path) -> Path:
    """The configuration kept in one ConfigMap, and the file both processes read: its content."""
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpuq-scheduler-config", "namespace": namespace},
        "data": {"config.yaml": text},
    }
    kubectl("create", "-f", "-", stdin=json.dumps(config_map))
    stored = json.loads(
        kubectl("get", "configmap", "-n", namespace, "gpuq-scheduler-config", "-o", "json").stdout
    )
    path.write_text(stored["data"]["config.yaml"])
    return path


def _wait_registered(kubectl: Kubectl, document: dict[str, Any]) -> None:
    """Until the apiserver calls the new webhook: a server-side dry run of a pod it denies is denied."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        result = kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(document), check=False)
        if result.returncode != 0 and "denied the request" in result.stderr:
            return
        time.sleep(0.2)
    raise AssertionError("the apiserver never called the webhook")


def _wait_bound(
    kubectl: Kubectl, namespace: str, names: set[str], scheduler: SchedulerProcess
) -> dict[str, str]:
    """The node of each of ``names`` once all are bound (or what is bound after 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        listing = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in listing["items"]}
        bound = {n: nodes[n] for n in names if nodes.get(n)}
        if len(bound) == len(names) or time.monotonic() > deadline or not scheduler.running:
            return bound
        time.sleep(0.2)


def _why_pending(kubectl: Kubectl, namespace: str) -> str:
    listing = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)
    return "".join(
        f"{p['metadata']['name']}: {c.get('message')}\n"
        for p in listing["items"]
        for c in (p.get("status") or {}).get("conditions") or ()
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    )


def _scheduler_binds(
    directory: Path, config: Path, objects: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> bool:
    """Whether the scheduler binds the one pod of ``objects`` (``gpuq simulate`` with ``config``)."""
    directory.mkdir(parents=True, exist_ok=True)
    # simulate schedules the pods of gpuq-scheduler; the running scheduler had a name of its own.
    objects = [
        {**o, "spec": {**o["spec"], "schedulerName": GPUQ_SCHEDULER}} if o["kind"] == "Pod" else o
        for o in objects
    ]
    (directory / "input.yaml").write_text(yaml.safe_dump_all(objects))
    capsys.readouterr()
    code = gpuq_main(["simulate", "-f", str(directory / "input.yaml"), "--config", str(config), "-o", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    (pod,) = json.loads(out.out)["pods"]
    return bool(pod["phase"] == "Bound")


@pytest.mark.parametrize("key", list(CONFIGS))
def test_the_webhook_admits_what_the_scheduler_could_ever_place(
    key: str,
    setup: Setup,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubectl = setup.plane.kubectl
    config = _config_file(kubectl, namespace, CONFIGS[key], tmp_path / "config.yaml")
    # Its own scheduler name: pods of other tests, left Pending in their namespaces, are not its business.
    name = dns_label("cfg", key, max_length=30)
    scheduler = SchedulerProcess(
        [
            *(sys.executable, "-m", "gpuq_k8s.cli", "scheduler", "--kubeconfig", str(setup.plane.kubeconfig)),
            *("--config", str(config), "--scheduler-name", name, "--bind-address", "127.0.0.1"),
            *("--metrics-port", str(free_ports(1)[0]), "--flush-interval", "0.2"),
        ],
        tmp_path / "scheduler.log",
        0,
    ).start()
    quota = MakeGPUResourceQuota("quota", namespace).single(maxGPUCount=4).obj()
    kubectl("create", "-f", "-", stdin=json.dumps(quota))
    kubectl("label", "namespace", namespace, f"{LABEL}={key}")
    webhook = WebhookProcess(setup, config, name, tmp_path / "webhook.log")
    prefix = f"gpuq-e2e-config-{key}"
    try:
        webhook.wait_serving()
        documents = configurations(webhook.port, setup.ca_bundle, prefix=prefix, label=(LABEL, key))
        kubectl(
            "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
        )
        pods = {c.name: c.pod.copy().name(c.name).namespace(namespace).scheduler(name).obj() for c in CASES}
        first_denied = next(c for c in CASES if key not in c.admitted_under)
        _wait_registered(
            kubectl, {**pods[first_denied.name], "metadata": {"name": "probe", "namespace": namespace}}
        )

        verdicts: dict[str, tuple[bool, str]] = {}
        stored: dict[str, dict[str, Any]] = {}
        for case in CASES:
            ok, out = create(kubectl, pods[case.name])
            verdicts[case.name] = (ok, out)
            stored[case.name] = json.loads(out) if ok else pods[case.name]
        admitted = {n for n, (ok, _) in verdicts.items() if ok}
        bound = _wait_bound(kubectl, namespace, admitted, scheduler)
    finally:
        kubectl("delete", "validatingwebhookconfiguration", f"{prefix}-validate", "--ignore-not-found")
        kubectl("delete", "mutatingwebhookconfiguration", f"{prefix}-mutate", "--ignore-not-found")
        webhook.stop()
        scheduler.terminate()
        # Without a kubelet bound pods stay, and would count on the node and in the Queues under the
        # next configuration: remove them now (the namespace itself is only marked for deletion).
        kubectl("delete", "pods", "--all", "-n", namespace, "--force", "--grace-period=0", "--wait=false")

    expected = {c.name: key in c.admitted_under for c in CASES}
    assert {name: ok for name, (ok, _) in verdicts.items()} == expected, {
        name: out.strip()[-300:] for name, (ok, out) in verdicts.items() if ok != expected[name]
    }
    for pod, (ok, out) in verdicts.items():
        if not ok:
            assert "denied the request" in out and f"Pod/{namespace}/{pod}" in out, out
    assert bound == dict.fromkeys(admitted, NODE), _why_pending(kubectl, namespace) + scheduler.log()

    # The scheduler under the same file, each pod alone against the same objects: it binds exactly
    # the pods the webhook admitted (malformed annotations aside: Semantics 3 denies them regardless).
    cluster = [_node(), *QUEUES, quota]
    placed = {
        case.name: _scheduler_binds(tmp_path / case.name, config, [*cluster, stored[case.name]], capsys)
        for case in CASES
        if not case.malformed
    }
    assert placed == {name: verdicts[name][0] for name in placed}
