"""webhook.server over real HTTPS on 127.0.0.1: contract, limits, probes, metrics, TLS, rotation, fuzz."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuq_k8s.certs import KeyPair, issue_serving_certificate, write_key_pair
from gpuq_k8s.webhook.admission import Admission
from gpuq_k8s.webhook.endpoints import Endpoints, ServerLimits
from gpuq_k8s.webhook.metrics import WebhookMetrics
from gpuq_k8s.webhook.server import create_app, create_server, start_site
from gpuq_k8s.webhook.tls import CertificateReloader
from gpuq_k8s.webhook.view import StaticView
from tests.testing.builders import GPU
from tests.testing.webhook_server import (
    GPU_POD,
    NODE,
    QUEUE,
    Client,
    ServerThread,
    admission_review,
    client_context,
    write_serving_pair,
)

# --- contract -------------------------------------------------------------------------------------


def test_denial_echoes_uid_and_names_object_resource_asked_and_left(
    https: tuple[ServerThread, Client],
) -> None:
    _, client = https
    status, body = client.post(
        "/validate",
        json.dumps(admission_review(GPU_POD.copy().lim({GPU: "3"}).obj(), uid="abc-123")).encode(),
    )
    assert status == 200
    answer = json.loads(body)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "abc-123"
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    for part in ("Pod/ns/p", "NVIDIA-A100", "requested 3", "available 2"):
        assert part in message


def test_allowed_and_mutation_is_base64_jsonpatch(https: tuple[ServerThread, Client]) -> None:
    _, client = https
    review = admission_review(
        GPU_POD.copy().lim({GPU: "1"}).annotations({"volcano.sh/card.name": " NVIDIA-A100 "}).obj()
    )
    status, body = client.post("/mutate", json.dumps(review).encode())
    assert status == 200
    response = json.loads(body)["response"]
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    assert patch == [
        {"op": "replace", "path": "/metadata/annotations/volcano.sh~1card.name", "value": "NVIDIA-A100"}
    ]
    status, body = client.post(
        "/validate", json.dumps(admission_review(GPU_POD.copy().lim({GPU: "1"}).obj())).encode()
    )
    assert json.loads(body)["response"] == {"uid": "u-1", "allowed": True}


def test_v1beta1_is_echoed(https: tuple[ServerThread, Client]) -> None:
    _, client = https
    review = admission_review(GPU_POD.copy().lim({GPU: "1"}).obj())
    review["apiVersion"] = "admission.k8s.io/v1beta1"
    status, body = client.post("/validate", json.dumps(review).encode())
    assert status == 200 and json.loads(body)["apiVersion"] == "admission.k8s.io/v1beta1"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "empty body"),
        (b"{not json", "not valid JSON"),
        (b"[]", "invalid AdmissionReview"),
        (b'{"apiVersion": "v1", "kind": "AdmissionReview", "request": {}}', "apiVersion"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "x", '
            b'"kind": {"kind": "Pod"}, "operation": "EXPLODE"}}',
            "operation",
        ),
    ],
)
def test_malformed_body_is_400_with_one_line_reason(
    https: tuple[ServerThread, Client], body: bytes, reason: str
) -> None:
    _, client = https
    status, text = client.post("/validate", body)
    assert status == 400
    assert reason in text.decode()
    assert text.decode().count("\n") == 1


def test_body_size_limit(ca: KeyPair, tmp_path: Path) -> None:
    cert, key, _ = write_serving_pair(ca, tmp_path)
    with ServerThread(
        StaticView(), CertificateReloader(cert, key), limits=ServerLimits(max_body_bytes=4096)
    ) as server:
        client = Client(server.port, client_context(ca))
        big = admission_review(GPU_POD.copy().lim({GPU: "1"}).annotations({"x": "y" * 5000}).obj())
        status, text = client.post("/validate", json.dumps(big).encode())
        assert status == 413
        assert b"4096" in text


def _raw_post(port: int, head_and_part: bytes, rest: bytes, pause: float) -> bytes:
    """POST in two writes ``pause`` seconds apart over plain HTTP; the raw answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head_and_part)
        time.sleep(pause)
        with contextlib.suppress(OSError):  # the server may have answered and closed already
            sock.sendall(rest)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and len(b"".join(chunks)) > 100:
                break
        return b"".join(chunks)


@pytest.mark.parametrize(
    ("pause", "status"),
    [
        (0.05, b"200"),  # a body in two TCP segments, the second well within the read timeout
        (1.0, b"408"),  # a client trickling its body past the read timeout
    ],
)
def test_body_read_timeout_only_fails_slow_bodies(pause: float, status: bytes) -> None:
    body = json.dumps(admission_review(GPU_POD.copy().lim({GPU: "1"}).obj())).encode()
    head = (
        f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with ServerThread(StaticView([QUEUE, NODE]), limits=ServerLimits(read_timeout=0.3)) as server:
        answer = _raw_post(server.port, head + body[:40], body[40:], pause)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]


def test_json_that_orjson_refuses_is_judged_like_any_other(https: tuple[ServerThread, Client]) -> None:
    """An integer beyond 64 bits is valid JSON: the review is answered (denied, naming the field),
    not refused as "not valid JSON" because the fast parser cannot hold it."""
    _, client = https
    obj = GPU_POD.copy().lim({GPU: "1"}).obj()
    obj["spec"]["priority"] = 10**30
    status, body = client.post("/validate", json.dumps(admission_review(obj)).encode())
    assert status == 200
    answer = json.loads(body)["response"]
    assert answer["allowed"] is False
    assert "spec.priority" in answer["status"]["message"]


def test_routing_of_the_low_level_server() -> None:
    """Unknown paths are 404, a wrong method 405 naming the right one, HEAD probes work, and a client
    that sends ``Expect: 100-continue`` gets its go-ahead (as aiohttp's router would give it)."""
    review = json.dumps(admission_review(GPU_POD.copy().lim({GPU: "1"}).obj())).encode()
    with ServerThread(StaticView([QUEUE, NODE])) as server:
        client = Client(server.port)
        assert client.get("/nope")[0] == 404
        assert client.get("/validate")[0] == 405
        assert client.post("/livez", b"")[0] == 405
        client.conn.request("HEAD", "/livez")
        head = client.conn.getresponse()
        head.read()
        assert head.status == 200
        status, body = client.post("/mutate", review)
        assert status == 200 and json.loads(body)["response"]["uid"] == "u-1"
        client.close()
        header = (
            f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Expect: 100-continue\r\nContent-Length: {len(review)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(header)
            assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
            sock.sendall(review)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")


async def _answer_of(app: Any, body: bytes) -> tuple[int, bytes]:
    runner, port = await start_site(app, "127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        answer = await reader.readexactly(length)
        writer.close()
        return int(head.split()[1]), answer
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(admission_review(GPU_POD.copy().lim({GPU: "1"}).obj())).encode(),
        json.dumps(admission_review(GPU_POD.copy().lim({GPU: "5"}).obj())).encode(),
        b"{x",
    ],
    ids=["allowed", "denied", "malformed"],
)
def test_application_and_low_level_server_answer_alike(body: bytes) -> None:
    """create_app (the routed application) and create_server (what gpuq webhook serves) share the
    endpoints: the same review gets the same status and body from both."""

    async def both() -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        admission = Admission(StaticView([QUEUE, NODE]))
        app = create_app(Endpoints(admission, WebhookMetrics()))
        server = create_server(Endpoints(admission, WebhookMetrics()))
        return await _answer_of(app, body), await _answer_of(server, body)

    routed, low_level = asyncio.run(both())
    assert routed == low_level
    assert routed[0] in (200, 400)


def test_chunked_body_over_the_limit_is_413() -> None:
    """Without a Content-Length the limit is checked on the body itself, however it arrived."""
    body = json.dumps(
        admission_review(GPU_POD.copy().lim({GPU: "1"}).annotations({"x": "y" * 5000}).obj())
    ).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    with ServerThread(StaticView([QUEUE, NODE]), limits=ServerLimits(max_body_bytes=4096)) as server:
        answer = _raw_post(server.port, head + chunked, b"", 0.0)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_probes_and_metrics(ca: KeyPair, tmp_path: Path) -> None:
    cert, key, _ = write_serving_pair(ca, tmp_path)
    ready = {"value": False}
    with ServerThread(
        StaticView([QUEUE, NODE]), CertificateReloader(cert, key), ready=lambda: ready["value"]
    ) as server:
        client = Client(server.port, client_context(ca))
        assert client.get("/livez")[0] == 200
        assert client.get("/readyz")[0] == 503
        ready["value"] = True
        assert client.get("/readyz")[0] == 200
        client.post("/validate", json.dumps(admission_review(GPU_POD.copy().lim({GPU: "3"}).obj())).encode())
        client.post("/validate", json.dumps(admission_review(GPU_POD.copy().lim({GPU: "1"}).obj())).encode())
        client.post("/validate", b"junk")
        plain = Client(server.metrics_port)
        status, text = plain.get("/metrics")
        assert status == 200
        metrics = text.decode()
        assert 'gpuq_admission_requests_total{allowed="false",kind="Pod",operation="CREATE"} 1.0' in metrics
        assert 'gpuq_admission_requests_total{allowed="true",kind="Pod",operation="CREATE"} 1.0' in metrics
        assert 'gpuq_admission_malformed_requests_total{reason="malformed"} 1.0' in metrics
        assert "gpuq_admission_request_duration_seconds_bucket" in metrics
        assert 'gpuq_build_info{version="' in metrics
        families = [line.split()[2] for line in metrics.splitlines() if line.startswith("# TYPE ")]
        assert families and all(f.startswith("gpuq_") for f in families), families
        assert "_created" not in metrics


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_only_tls_1_2_or_newer(https: tuple[ServerThread, Client], ca: KeyPair) -> None:
    server, _ = https
    old = client_context(ca)
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with contextlib.suppress(ssl.SSLError):
        old.set_ciphers("ALL:@SECLEVEL=0")
    client = Client(server.port, old)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        client.get("/livez")
    modern = client_context(ca)
    modern.minimum_version = ssl.TLSVersion.TLSv1_2
    modern.maximum_version = ssl.TLSVersion.TLSv1_2
    assert Client(server.port, modern).get("/livez")[0] == 200


# --- rotation -------------------------------------------------------------------------------------


def _served_serial(port: int, context: ssl.SSLContext) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    conn.request("GET", "/livez")
    conn.getresponse().read()
    assert conn.sock is not None
    der = conn.sock.getpeercert(binary_form=True)
    conn.close()
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_half_rotated_pair_keeps_the_old_one_until_the_key_arrives(ca: KeyPair, tmp_path: Path) -> None:
    cert, key, first = write_serving_pair(ca, tmp_path)
    reloader = CertificateReloader(cert, key)
    second = issue_serving_certificate(ca, ip_addresses=["127.0.0.1"])
    cert.write_bytes(second.certificate_pem())  # a non-atomic copy: certificate first
    assert reloader.check() is False
    assert reloader.failures == 1
    key.write_bytes(second.private_key_pem())
    assert reloader.check() is True
    assert reloader.reloads == 1
    assert reloader.check() is False  # nothing changed since
    key.touch()
    assert reloader.check() is False  # same bytes: no reload
    assert first.certificate.serial_number != second.certificate.serial_number


def test_rotation_under_load_fails_no_request(ca: KeyPair, tmp_path: Path) -> None:
    """Certificate files are replaced while clients send continuously; zero failed requests."""
    cert, key, first = write_serving_pair(ca, tmp_path)
    reloader = CertificateReloader(cert, key, interval=0.02)
    context = client_context(ca)
    body = json.dumps(admission_review(GPU_POD.copy().lim({GPU: "1"}).obj())).encode()
    stop = threading.Event()
    failures: list[str] = []
    counts = [0, 0]

    def keep_alive_client() -> None:
        client = Client(server.port, context)
        while not stop.is_set():
            try:
                status, _ = client.post("/validate", body)
                if status != 200:
                    failures.append(f"keep-alive status {status}")
                counts[0] += 1
            except Exception as err:
                failures.append(f"keep-alive {err!r}")
                client = Client(server.port, context)

    def new_connection_client() -> None:
        while not stop.is_set():
            client = Client(server.port, context)
            try:
                status, _ = client.post("/validate", body)
                if status != 200:
                    failures.append(f"handshake status {status}")
                counts[1] += 1
            except Exception as err:
                failures.append(f"handshake {err!r}")
            finally:
                client.close()

    with ServerThread(StaticView([QUEUE, NODE]), reloader) as server:

        async def poll() -> None:
            await reloader.run()

        task = asyncio.run_coroutine_threadsafe(poll(), server._loop)
        threads = [threading.Thread(target=keep_alive_client), threading.Thread(target=new_connection_client)]
        for thread in threads:
            thread.start()
        serials = {first.certificate.serial_number}
        for _ in range(5):
            time.sleep(0.15)
            pair = issue_serving_certificate(ca, ip_addresses=["127.0.0.1"])
            write_key_pair(pair, cert, key)
            serials.add(pair.certificate.serial_number)
        deadline = time.monotonic() + 5
        while reloader.reloads < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        stop.set()
        for thread in threads:
            thread.join(10)
        served = _served_serial(server.port, context)
        task.cancel()
    assert failures == []
    assert counts[0] > 10 and counts[1] > 10
    assert reloader.reloads >= 1
    assert served == pair.certificate.serial_number


# --- fuzz -----------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=8,
)
ANNOTATION_KEYS = [
    "volcano.sh/card.quota",
    "volcano.sh/card.request",
    "volcano.sh/card.name",
    "scheduling.volcano.sh/queue-name",
    "scheduling.k8s.io/group-name",
    "tensor-fusion.ai/tflops-request",
    "tensor-fusion.ai/vram-limit",
    "tensor-fusion.ai/gpu-count",
]
annotation_values = st.sampled_from(
    ['{"NVIDIA-A100": 1}', '{"A|B": -1}', "NVIDIA-A100| x", "team-a", "1e400", "-5", "", "{", "8Gi", "1.5"]
) | st.text(max_size=12)
quantities = st.sampled_from(["1", "500m", "-1", "1e3", "64Gi", "x", "1.5", "0", "9" * 30]) | st.text(
    max_size=6
)
objects = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(
            [
                "v1",
                "scheduling.volcano.sh/v1beta1",
                "scheduling.x-k8s.io/v1alpha1",
                "tensor-fusion.ai/v1",
                "x/y",
            ]
        ),
        "kind": st.sampled_from(["Pod", "Queue", "PodGroup", "ElasticQuota", "GPUResourceQuota", "Other"]),
        "metadata": st.fixed_dictionaries(
            {"name": st.sampled_from(["a", "", "p"]) | json_values},
            optional={
                "namespace": st.sampled_from(["ns", ""]) | json_values,
                "annotations": st.dictionaries(
                    st.sampled_from(ANNOTATION_KEYS), annotation_values, max_size=4
                )
                | json_values,
            },
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "schedulerName": st.sampled_from(["gpuq-scheduler", "default-scheduler"]) | json_values,
                "containers": st.lists(
                    st.fixed_dictionaries(
                        {
                            "name": st.text(max_size=3),
                            "resources": st.fixed_dictionaries(
                                {},
                                optional={
                                    "requests": st.dictionaries(
                                        st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "x"]),
                                        quantities,
                                        max_size=3,
                                    ),
                                    "limits": st.dictionaries(
                                        st.sampled_from(["cpu", "nvidia.com/gpu"]), quantities, max_size=2
                                    )
                                    | json_values,
                                },
                            ),
                        }
                    )
                    | json_values,
                    max_size=2,
                ),
                "queue": st.sampled_from(["team-a", "nope"]) | json_values,
                "min": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities, max_size=2)
                | json_values,
                "max": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities, max_size=2)
                | json_values,
                "total": json_values,
                "single": json_values,
                "capability": json_values,
            },
        ),
    }
)
reviews = st.builds(
    lambda obj, op, uid, kind, group: {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": kind},
            "namespace": "ns",
            "operation": op,
            "object": obj,
        },
    },
    objects | json_values,
    st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "PATCH"]),
    st.text(min_size=0, max_size=8),
    st.sampled_from(["Pod", "Queue", "PodGroup", "ElasticQuota", "GPUResourceQuota", "Other"]),
    st.sampled_from(["", "scheduling.volcano.sh", "scheduling.x-k8s.io", "tensor-fusion.ai"]),
)


def _check_answer(status: int, body: bytes, sent: Any) -> None:
    assert status in (200, 400), (status, body[:300])
    if status == 200:
        answer = json.loads(body)
        assert answer["kind"] == "AdmissionReview"
        assert answer["apiVersion"] == sent["apiVersion"]
        assert answer["response"]["uid"] == sent["request"]["uid"]
        assert isinstance(answer["response"]["allowed"], bool)
        if not answer["response"]["allowed"]:
            assert answer["response"]["status"]["code"] == 403
            assert answer["response"]["status"]["message"]
        if "patch" in answer["response"]:
            assert isinstance(json.loads(base64.b64decode(answer["response"]["patch"])), list)
    else:
        assert body.decode().count("\n") == 1


# Each example posts several bodies (every endpoint, several operations): hypothesis spends most of
# its time generating, so 1,300 reviews x 6 and 1,100 byte strings x 3 post 11,100 bodies in all.
@settings(max_examples=1300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(review=reviews)
def test_fuzz_admission_reviews_never_5xx(plain_server: ServerThread, review: dict[str, Any]) -> None:
    """No 5xx, no crash: every answer is a valid AdmissionReview echoing the uid, or a 400."""
    client = _client(plain_server)
    errors = plain_server.metrics.errors._value.get()
    for operation in (review["request"]["operation"], "CREATE", "UPDATE"):
        variant = {**review, "request": {**review["request"], "operation": operation}}
        for path in ("/validate", "/mutate"):
            status, body = client.post(path, json.dumps(variant).encode())
            _check_answer(status, body, variant)
    assert plain_server.metrics.errors._value.get() == errors


@settings(max_examples=1100, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    body=st.binary(max_size=300)
    | json_values.map(lambda v: json.dumps(v).encode())
    | reviews.map(lambda r: json.dumps(r).encode()[: len(json.dumps(r)) // 2]),
)
def test_fuzz_malformed_bodies_are_400(plain_server: ServerThread, body: bytes) -> None:
    client = _client(plain_server)
    for path, payload in (("/validate", body), ("/mutate", body), ("/validate", body[::-1])):
        status, text = client.post(path, payload)
        assert status in (200, 400), (status, text[:300])
        if status == 200:
            _check_answer(status, text, json.loads(payload))
        else:
            assert text.decode().count("\n") == 1


_clients: dict[int, Client] = {}


def _client(server: ServerThread) -> Client:
    client = _clients.get(server.port)
    if client is None:
        client = _clients[server.port] = Client(server.port)
    return client
