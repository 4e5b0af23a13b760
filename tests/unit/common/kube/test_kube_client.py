"""The API client looks the environment's proxy up once, not per request (common/kube/client.py)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from gpuq_k8s.common.kube.client import resolve_proxy_once

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


def api_client(host: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = host
    return client.ApiClient(configuration)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


async def test_no_proxy_in_the_environment_means_none_and_no_per_request_lookup() -> None:
    api = api_client("https://10.0.0.1:6443")
    try:
        resolve_proxy_once(api)
        assert api.rest_client.proxy is None
        assert api.rest_client.pool_manager.trust_env is False
    finally:
        await api.close()


async def test_https_proxy_of_the_environment_becomes_the_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.example:3128")
    api = api_client("https://10.0.0.1:6443")
    try:
        resolve_proxy_once(api)
        assert api.rest_client.proxy == "http://proxy.example:3128"
        assert api.rest_client.proxy_headers["Proxy-Authorization"].startswith("Basic ")
        assert api.rest_client.pool_manager.trust_env is False
    finally:
        await api.close()


async def test_no_proxy_exempts_the_apiserver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    api = api_client("https://10.0.0.1:6443")
    try:
        resolve_proxy_once(api)
        assert api.rest_client.proxy is None
    finally:
        await api.close()


async def test_an_explicit_proxy_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    api = api_client("https://10.0.0.1:6443")
    api.rest_client.proxy = "http://chosen.example:8080"
    try:
        resolve_proxy_once(api)
        assert api.rest_client.proxy == "http://chosen.example:8080"
    finally:
        await api.close()
