"""Fixtures of the webhook tests: a test CA, the webhook over HTTPS with a client, and a plain-HTTP
webhook shared by a module (tests/testing/webhook_server.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuq_k8s.certs import KeyPair, create_ca
from gpuq_k8s.webhook.tls import CertificateReloader
from gpuq_k8s.webhook.view import StaticView
from tests.testing.webhook_server import NODE, QUEUE, Client, ServerThread, client_context, write_serving_pair


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return create_ca("gpuq-webhook-test-ca")


@pytest.fixture
def https(ca: KeyPair, tmp_path: Path) -> Iterator[tuple[ServerThread, Client]]:
    cert, key, _ = write_serving_pair(ca, tmp_path)
    with ServerThread(StaticView([QUEUE, NODE]), CertificateReloader(cert, key)) as server:
        client = Client(server.port, client_context(ca))
        yield server, client
        client.close()


@pytest.fixture(scope="module")
def plain_server() -> Iterator[ServerThread]:
    with ServerThread(StaticView([QUEUE, NODE])) as server:
        yield server
