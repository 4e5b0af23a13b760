"""``gpuq webhook`` under hostile and busy clients (issue 24), over real TLS, against the real apiserver.

- **Flood**: 4 connections pipeline reviews for 60 s and never read an answer. The webhook stops
  reading them once their answers back up (webhook/fastpath.py: read pressure, ``pause_writing``), so
  its RSS (from /proc) stays within 50 MiB of its idle RSS, and a second client's reviews, one at a
  time on a connection of their own, keep a p99 under 10 ms. Before, the flooded buffers grew without
  bound (48 -> 160 MiB in 45 s).
- **Busy connection**: with ``--keepalive-timeout 2``, a review every 0.25 s on one connection for
  10 s: every one answered on that connection. Before, aiohttp's keep-alive timer (armed when the
  connection was made, never pushed back by fast-path traffic) closed it after 2 s: 8 answers, then
  EOF.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuq_k8s.certs import create_ca, issue_serving_certificate, write_key_pair
from tests.bench.bench_webhook import review_body
from tests.e2e.cluster_fixtures import SchedulerProcess
from tests.e2e.controlplane.harness import ControlPlane, free_ports

pytestmark = pytest.mark.e2e

FLOOD_CONNECTIONS = 4
FLOOD_SECONDS = 60.0
RSS_MARGIN = 50 * 1024 * 1024
P99_LIMIT = 0.010
KEEPALIVE = 2.0


@pytest.fixture
def webhook(
    control_plane: ControlPlane, tmp_path: Path
) -> Iterator[tuple[SchedulerProcess, int, ssl.SSLContext]]:
    ca = create_ca("gpuq-e2e-pressure-ca")
    write_key_pair(
        issue_serving_certificate(ca, ip_addresses=["127.0.0.1"]), tmp_path / "tls.crt", tmp_path / "tls.key"
    )
    (ca_file := tmp_path / "ca.crt").write_bytes(ca.certificate_pem())
    port, metrics_port = free_ports(2)
    argv = [
        *(sys.executable, "-m", "gpuq_k8s.cli", "webhook", "--kubeconfig", str(control_plane.kubeconfig)),
        *("--tls-cert-file", str(tmp_path / "tls.crt"), "--tls-private-key-file", str(tmp_path / "tls.key")),
        *("--port", str(port), "--metrics-port", str(metrics_port), "--bind-address", "127.0.0.1"),
        *("--keepalive-timeout", str(KEEPALIVE)),
    ]
    process = SchedulerProcess(argv, tmp_path / "webhook.log", metrics_port).start()
    try:
        yield process, port, ssl.create_default_context(cafile=str(ca_file))
    finally:
        process.terminate()


def request(uid: str) -> bytes:
    body = review_body().replace(b'"uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816"', f'"uid": "{uid}"'.encode())
    return (
        b"POST /validate?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def connect(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    return context.wrap_socket(sock, server_hostname="127.0.0.1")


class Answers:
    """HTTP answers read one at a time off a socket (Content-Length framing, as the webhook answers)."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.data = b""

    def next(self) -> tuple[bytes, bytes]:
        while True:
            end = self.data.find(b"\r\n\r\n")
            if end >= 0:
                head = self.data[:end]
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                if len(self.data) >= end + 4 + length:
                    body = self.data[end + 4 : end + 4 + length]
                    self.data = self.data[end + 4 + length :]
                    return head.split(b"\r\n")[0], body
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"the webhook closed the connection ({len(self.data)} bytes unread)")
            self.data += chunk


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


async def test_a_flood_of_unread_pipelined_reviews_leaves_memory_and_other_clients_alone(
    webhook: tuple[SchedulerProcess, int, ssl.SSLContext],
) -> None:
    process, port, context = webhook
    await process.wait_ready(60)
    assert process.popen is not None
    pid = process.popen.pid
    # Warm up (imports, the first reviews), then take the idle RSS.
    with connect(port, context) as sock:
        answers = Answers(sock)
        for n in range(200):
            sock.sendall(request(f"warm-{n}"))
            assert answers.next()[0] == b"HTTP/1.1 200 OK"
    time.sleep(1)
    idle = rss(pid)

    stop = threading.Event()
    batch = b"".join(request(f"flood-{n}") for n in range(200))
    flooders: list[ssl.SSLSocket] = []

    def flood() -> None:
        sock = connect(port, context)
        flooders.append(sock)
        sock.settimeout(None)
        try:
            while not stop.is_set():
                sock.sendall(batch)  # blocks once the webhook stops reading: the point
        except OSError:
            pass  # closed by the test's end

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(FLOOD_CONNECTIONS)]
    for thread in threads:
        thread.start()
    latencies: list[float] = []
    peak = idle
    cpu_before = cpu_seconds(pid)
    with connect(port, context) as sock:
        answers = Answers(sock)
        ends = time.monotonic() + FLOOD_SECONDS
        n = 0
        while time.monotonic() < ends:
            message = request(f"probe-{n}")
            began = time.perf_counter()
            sock.sendall(message)
            status, body = answers.next()
            latencies.append(time.perf_counter() - began)
            assert status == b"HTTP/1.1 200 OK"
            assert json.loads(body)["response"]["uid"] == f"probe-{n}"
            n += 1
            if n % 50 == 0:
                peak = max(peak, rss(pid))
            time.sleep(0.005)
    peak = max(peak, rss(pid))
    cpu = cpu_seconds(pid) - cpu_before
    stop.set()
    for flooder in flooders:
        flooder.close()
    assert process.running, process.log()
    p99 = statistics.quantiles(latencies, n=100)[98]
    print(
        f"idle RSS {idle / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB; "
        f"{len(latencies)} reviews, p50 {statistics.median(latencies) * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms; "
        f"webhook CPU {cpu:.1f} s in {FLOOD_SECONDS:g} s; load average {os.getloadavg()[0]:.1f}"
    )
    assert peak - idle <= RSS_MARGIN, f"RSS {idle / 2**20:.1f} -> {peak / 2**20:.1f} MiB"
    assert p99 < P99_LIMIT, f"p99 {p99 * 1e3:.2f} ms over {len(latencies)} reviews"


async def test_a_busy_connection_outlives_the_keepalive_timeout(
    webhook: tuple[SchedulerProcess, int, ssl.SSLContext],
) -> None:
    process, port, context = webhook
    await process.wait_ready(60)
    with connect(port, context) as sock:
        answers = Answers(sock)
        uids = []
        for n in range(40):  # 10 s at one every 0.25 s: five keep-alive timeouts
            sock.sendall(request(f"busy-{n}"))
            status, body = answers.next()
            assert status == b"HTTP/1.1 200 OK"
            uids.append(json.loads(body)["response"]["uid"])
            time.sleep(0.25)
        assert uids == [f"busy-{n}" for n in range(40)]
        # Idle, it is closed after the keep-alive timeout.
        started = time.monotonic()
        with contextlib.suppress(ssl.SSLEOFError):  # closed without a close_notify: closed all the same
            assert sock.recv(1) == b""
    assert time.monotonic() - started < KEEPALIVE + 3
