"""``gpuq webhook --workers 2`` (webhook/workers.py) against the real apiserver.

Both workers serve the one HTTPS port: reviews sent over fresh TLS connections are answered, and each
worker's own metrics (worker k on ``--metrics-port + k``) count some of them. A worker killed with
SIGKILL stops the whole webhook with exit code 1 (the kubelet restarts the container); SIGTERM stops
every worker and exits 0; a supervisor killed outright (SIGKILL) takes its workers with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuq_k8s.certs import create_ca, issue_serving_certificate, write_key_pair
from tests.bench.bench_webhook import review_body
from tests.e2e.cluster_fixtures import SchedulerProcess, metric_value
from tests.e2e.controlplane.harness import ControlPlane, free_ports

pytestmark = pytest.mark.e2e

WORKERS = 2
REVIEWS = 40
COUNTER = "gpuq_admission_requests_total"


def two_free_ports_in_a_row() -> int:
    """A free port p with p + 1 free too (worker 1 serves its metrics on --metrics-port + 1)."""
    for _ in range(50):
        (port,) = free_ports(1)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two consecutive free ports")


@pytest.fixture
def webhook(
    control_plane: ControlPlane, tmp_path: Path
) -> Iterator[tuple[SchedulerProcess, int, ssl.SSLContext]]:
    ca = create_ca("gpuq-e2e-workers-ca")
    write_key_pair(
        issue_serving_certificate(ca, ip_addresses=["127.0.0.1"]), tmp_path / "tls.crt", tmp_path / "tls.key"
    )
    (ca_file := tmp_path / "ca.crt").write_bytes(ca.certificate_pem())
    metrics_port = two_free_ports_in_a_row()
    port = next(p for p in iter(lambda: free_ports(1)[0], 0) if p not in (metrics_port, metrics_port + 1))
    argv = [
        *(sys.executable, "-m", "gpuq_k8s.cli", "webhook", "--kubeconfig", str(control_plane.kubeconfig)),
        *("--tls-cert-file", str(tmp_path / "tls.crt"), "--tls-private-key-file", str(tmp_path / "tls.key")),
        *("--port", str(port), "--metrics-port", str(metrics_port), "--bind-address", "127.0.0.1"),
        *("--workers", str(WORKERS)),
    ]
    process = SchedulerProcess(argv, tmp_path / "webhook.log", metrics_port).start()
    try:
        yield process, port, ssl.create_default_context(cafile=str(ca_file))
    finally:
        process.terminate()


def worker(process: SchedulerProcess, index: int) -> SchedulerProcess:
    """The view of worker ``index``'s metrics port (no process of its own to start)."""
    return SchedulerProcess(process.argv, process.log_path, process.metrics_port + index, process.popen)


def worker_pids(process: SchedulerProcess) -> list[int]:
    assert process.popen is not None
    pid = process.popen.pid
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


async def ready_workers(process: SchedulerProcess) -> list[int]:
    """Wait until every worker's /readyz answers 200; their pids."""
    for index in range(WORKERS):
        await worker(process, index).wait_ready(60)
    pids = worker_pids(process)
    assert len(pids) == WORKERS, pids
    return pids


async def review(port: int, context: ssl.SSLContext) -> dict[str, object]:
    """POST one Pod AdmissionReview to /validate over a new TLS connection."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )
    try:
        body = review_body()
        writer.write(
            b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    decoded: dict[str, object] = json.loads(payload)
    return decoded


async def test_two_workers_serve_one_port_and_a_dead_worker_stops_the_webhook(
    webhook: tuple[SchedulerProcess, int, ssl.SSLContext],
) -> None:
    process, port, context = webhook
    pids = await ready_workers(process)

    answers = [await review(port, context) for _ in range(REVIEWS)]
    assert all(a["kind"] == "AdmissionReview" and "response" in a for a in answers)
    counted = []
    for index in range(WORKERS):
        text = worker(process, index).metrics()
        counted.append(
            sum(metric_value(text, COUNTER, {"allowed": allowed}) or 0 for allowed in ("true", "false"))
        )
    assert sum(counted) == REVIEWS, counted
    assert all(c > 0 for c in counted), f"every worker answers some of the connections: {counted}"

    os.kill(pids[1], signal.SIGKILL)
    assert process.popen is not None
    deadline = time.monotonic() + 60
    while process.popen.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert process.popen.returncode == 1, f"exit {process.popen.returncode}:\n{process.log()}"
    assert "webhook worker 1" in process.log() and "died (signal SIGKILL)" in process.log()
    assert not Path(f"/proc/{pids[0]}").exists() or "zombie" in Path(f"/proc/{pids[0]}/status").read_text()


async def test_sigterm_stops_every_worker_with_exit_0(
    webhook: tuple[SchedulerProcess, int, ssl.SSLContext],
) -> None:
    process, port, context = webhook
    pids = await ready_workers(process)
    assert (await review(port, context))["kind"] == "AdmissionReview"
    assert process.terminate(60) == 0, process.log()
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def gone(pid: int) -> bool:
    path = Path(f"/proc/{pid}/status")
    try:
        return "zombie" in path.read_text()
    except FileNotFoundError:
        return True


async def test_a_supervisor_killed_outright_takes_its_workers_with_it(
    webhook: tuple[SchedulerProcess, int, ssl.SSLContext],
) -> None:
    """SIGKILL of the supervisor leaves no orphan worker serving the port (PR_SET_PDEATHSIG)."""
    process, port, context = webhook
    pids = await ready_workers(process)
    assert (await review(port, context))["kind"] == "AdmissionReview"
    assert process.popen is not None
    process.popen.kill()
    process.popen.wait(30)
    deadline = time.monotonic() + 30
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert all(gone(pid) for pid in pids), f"workers left running: {[p for p in pids if not gone(p)]}"
    with pytest.raises(OSError):
        await review(port, context)
