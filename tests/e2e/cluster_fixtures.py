"""Helpers for the scheduler's end-to-end tests: ``gpuq scheduler`` as a subprocess, fake nodes,
pods, polling with deadlines, and the control-plane disturbances (etcd compaction, apiserver restart).

Isolation between tests sharing one control plane: nodes are cluster-scoped and pods of a finished
test stay Pending in their Terminating namespace (no controllers), so every test runs its scheduler
under its own ``--scheduler-name`` (its pods name it) and deletes the nodes it created. Nodes of a
test carry a label with the test's id, and its pods select it.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from kubernetes_asyncio.client.api_client import ApiClient

from gpuq_k8s.common.kube.status import MERGE_PATCH, Reply, call
from tests.e2e.controlplane.harness import ControlPlane, dns_label, free_ports
from tests.testing.builders import MakeNode, MakePod

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_LABEL = "gpuq.e2e/test"
# A node's allocatable with eight GPUs (its card type comes from the labels a test gives it).
GPU_NODE = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}


# ------------------------------------------------------------------ the scheduler process


@dataclass
class SchedulerProcess:
    """One ``gpuq scheduler`` subprocess; stderr goes to a file read into failure messages."""

    argv: list[str]
    log_path: Path
    metrics_port: int
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> SchedulerProcess:
        log = self.log_path.open("ab")
        try:
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT
            )
        finally:
            log.close()
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as reply:
                return int(reply.status), reply.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")
        except OSError:
            return 0, ""

    def metrics(self) -> str:
        code, body = self.get("/metrics")
        assert code == 200, f"/metrics answered {code}\n{self.log()}"
        return body

    async def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.running, (
                f"gpuq scheduler exited with {self.popen and self.popen.poll()}:\n{self.log()}"
            )
            code, _ = await asyncio.to_thread(self.get, "/readyz", 1.0)
            if code == 200:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"gpuq scheduler not ready after {timeout}s:\n{self.log()}")

    def terminate(self, timeout: float = 15.0) -> int | None:
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


SchedulerFactory = Callable[..., SchedulerProcess]


def python_module(module: str) -> list[str]:
    """argv running ``module`` with this interpreter (the venv's, with gpuq installed editable)."""
    return [sys.executable, "-m", module]


def scheduler_starter(
    kubeconfig: Path,
    tmp_path: Path,
    started: list[SchedulerProcess],
    defaults: Callable[[Sequence[str]], Sequence[str]] = lambda extra: (),
) -> SchedulerFactory:
    """``start(name, config=None, *extra_args)`` runs ``gpuq scheduler`` on ``kubeconfig``.

    ``defaults(extra_args)`` adds a suite's own flags (e.g. leader election) unless the test set them.
    Every process goes into ``started``, for the fixture to stop.
    """

    def start(name: str, config: str | None = None, *extra: str) -> SchedulerProcess:
        (port,) = free_ports(1)
        argv = [
            *(sys.executable, "-m", "gpuq_k8s.cli", "scheduler", "--kubeconfig", str(kubeconfig)),
            *("--scheduler-name", name, "--metrics-port", str(port), "--bind-address", "127.0.0.1"),
            *("--flush-interval", "0.2"),
            *defaults(extra),
        ]
        if config is not None:
            path = tmp_path / f"{name}-config.yaml"
            path.write_text(config)
            argv += ["--config", str(path)]
        argv += list(extra)
        process = SchedulerProcess(argv, tmp_path / f"{name}-{len(started)}.log", port).start()
        started.append(process)
        return process

    return start


@pytest.fixture
def run_scheduler(control_plane: ControlPlane, tmp_path: Path) -> Iterator[SchedulerFactory]:
    """``run_scheduler(name, config=None, *extra_args)`` starts ``gpuq scheduler``; all are stopped after."""
    started: list[SchedulerProcess] = []
    yield scheduler_starter(control_plane.kubeconfig, tmp_path, started)
    for process in started:
        process.terminate()


# ------------------------------------------------------------------ polling


async def eventually(
    probe: Callable[[], Awaitable[T | None]], timeout: float, what: str, log: Callable[[], str] = lambda: ""
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` and the log otherwise."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    last: T | None = None
    while True:
        last = await probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})\n{log()}")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.5)


# ------------------------------------------------------------------ objects


@dataclass
class Cluster:
    """Creates objects through the admin client; deletes the nodes it made when the test ends."""

    api: ApiClient
    test_id: str
    namespace: str
    nodes: list[str] = field(default_factory=list)
    cluster_objects: list[str] = field(default_factory=list)  # paths of cluster-scoped objects

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Reply:
        reply = await call(self.api, method, path, body, content_type=content_type)
        assert reply.ok, f"{method} {path}: {reply.status} {reply.message}"
        return reply

    async def node(
        self,
        name: str,
        allocatable: Mapping[str, str],
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> str:
        """A Ready node with ``allocatable`` (also its capacity); the name is made unique."""
        full = f"{self.test_id}-{name}"
        node = MakeNode(full).labels({TEST_LABEL: self.test_id, **(labels or {})})
        if annotations:
            node.annotations(dict(annotations))
        await self.request("POST", "/api/v1/nodes", node.obj())
        self.nodes.append(full)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "capacity": dict(allocatable),
            "allocatable": dict(allocatable),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
        await self.request("PATCH", f"/api/v1/nodes/{full}/status", {"status": status}, MERGE_PATCH)
        # The TaintNodesByCondition admission plugin adds node.kubernetes.io/not-ready at creation;
        # without a node lifecycle controller nobody removes it once the node is Ready.
        await self.request("PATCH", f"/api/v1/nodes/{full}", {"spec": {"taints": None}}, MERGE_PATCH)
        return full

    def pod_body(
        self,
        name: str,
        requests: Mapping[str, str],
        *,
        scheduler: str,
        limits: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        priority_class: str = "",
        namespace: str = "",
    ) -> dict[str, Any]:
        pod = (
            MakePod(name, namespace or self.namespace)
            .image("registry.k8s.io/pause:3.10")
            .scheduler(scheduler)
            .req(**requests)
            .lim(**(limits or {}))
            .node_selector({TEST_LABEL: self.test_id})
            .spec(automountServiceAccountToken=False, terminationGracePeriodSeconds=0)
        )
        if priority_class:
            pod.spec(priorityClassName=priority_class)
        if annotations:
            pod.annotations(dict(annotations))
        return pod.obj()

    async def pod(self, name: str, requests: Mapping[str, str], **options: Any) -> dict[str, Any]:
        body = self.pod_body(name, requests, **options)
        namespace = body["metadata"]["namespace"]
        reply = await self.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
        return dict(reply.body)

    async def create(self, obj: Mapping[str, Any], path: str) -> dict[str, Any]:
        reply = await self.request("POST", path, dict(obj))
        if not (obj.get("metadata") or {}).get("namespace"):
            self.cluster_objects.append(f"{path}/{obj['metadata']['name']}")
        return dict(reply.body)

    async def get(self, path: str) -> dict[str, Any]:
        return dict((await self.request("GET", path)).body)

    async def pods(self, namespace: str = "") -> dict[str, dict[str, Any]]:
        listing = await self.get(f"/api/v1/namespaces/{namespace or self.namespace}/pods")
        return {p["metadata"]["name"]: p for p in listing.get("items") or []}

    async def extra_namespace(self, suffix: str) -> str:
        """Another namespace for this test (with its ``default`` ServiceAccount), deleted afterwards."""
        name = dns_label(self.namespace[:40], suffix)
        await self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        self.cluster_objects.append(f"/api/v1/namespaces/{name}")
        await self.request(
            "POST", f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}}
        )
        return name

    async def cleanup(self) -> None:
        for name in self.nodes:
            await call(self.api, "DELETE", f"/api/v1/nodes/{name}")
        for path in self.cluster_objects:
            if path.startswith("/api/v1/namespaces/"):  # its pods first (see conftest's namespace)
                await call(self.api, "DELETE", f"{path}/pods", {"gracePeriodSeconds": 0})
            await call(self.api, "DELETE", path)


@pytest_asyncio.fixture
async def cluster(
    api_client: ApiClient, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    test_id = dns_label("s", request.node.name.removeprefix("test_"), max_length=30)
    helper = Cluster(api_client, test_id, namespace)
    yield helper
    await helper.cleanup()


def node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return dict(condition)
    return None


async def pending_message(cluster: Cluster, name: str, contains: str) -> str | None:
    """The PodScheduled=False message of pod ``name`` if it contains ``contains`` (None otherwise)."""
    pod = (await cluster.pods()).get(name) or {}
    condition = scheduled_condition(pod)
    if condition and condition.get("status") == "False" and contains in str(condition.get("message")):
        return str(condition["message"])
    return None


def metric_value(text: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """The value of one sample in Prometheus text format (None if absent)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        sample, _, label_text = head.partition("{")
        if sample != name:
            continue
        found = {
            part.split("=", 1)[0]: part.split("=", 1)[1].strip('"')
            for part in label_text.rstrip("}").split(",")
            if "=" in part
        }
        if all(found.get(k) == v for k, v in (labels or {}).items()):
            return float(value)
    return None


# ------------------------------------------------------------------ disturbing the control plane


def compact_etcd(plane: ControlPlane) -> int:
    """Compact etcd at its current revision; returns the revision (see ``ControlPlane.compact_etcd``)."""
    return plane.compact_etcd()


def restart_apiserver(plane: ControlPlane, timeout: float = 60.0) -> None:
    """Restart kube-apiserver on the same port and etcd (see ``ControlPlane.restart_apiserver``)."""
    plane.restart_apiserver(timeout)
