"""gpuq's own HTTP client (common/kube/http.py) under faults, through the e2e HTTP proxy.

Every write of gpuq goes through it. What its docstring promises is injected here: a request that
is never answered times out and its connection is never reused (the proxy is still waiting on it,
so a reuse would hang); a connection the server closed while idle is not reused either (the next
request succeeds on a new one); an idle connection is reused otherwise; answers arrive chunked (the
proxy streams them) and are read whole. A timeout raises gpuq's RequestTimeout on gpuq's client and
on the aiohttp path alike (one error vocabulary, common/kube/errors.py), and the apiserver's error
statuses come back as their typed errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from gpuq_k8s.common.kube.client import new_api_client, request
from gpuq_k8s.common.kube.errors import Conflict, Invalid, NotFound, RequestTimeout
from gpuq_k8s.common.kube.http import HttpClient
from gpuq_k8s.common.kube.status import call
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.proxy import ApiProxy, is_write

pytestmark = pytest.mark.e2e

EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"


def event(name: str) -> dict[str, object]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "eventTime": "2026-11-24T00:00:00.000000Z",
        "reportingController": "gpuq-test",
        "reportingInstance": "gpuq-test",
        "action": "Scheduling",
        "reason": "Test",
        "type": "Normal",
        "regarding": {"kind": "Pod", "namespace": "default", "name": name},
    }


@pytest_asyncio.fixture
async def proxy(control_plane: ControlPlane) -> AsyncIterator[ApiProxy]:
    proxy = await ApiProxy(control_plane, keepalive_timeout=0.5).start()
    yield proxy
    await proxy.stop()


async def test_a_request_never_answered_times_out_and_its_connection_is_not_reused(
    proxy: ApiProxy, tmp_path: Path
) -> None:
    api = await new_api_client(str(proxy.kubeconfig(tmp_path / "kubeconfig")))
    try:
        http = api.gpuq_http
        assert isinstance(http, HttpClient)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        hole = proxy.black_hole(is_write)
        began = asyncio.get_running_loop().time()
        with pytest.raises(RequestTimeout) as timed_out:
            await http.request("POST", EVENTS, query=[], headers=headers, body=b"{}", timeout=0.5)
        assert isinstance(timed_out.value.__cause__, TimeoutError)
        assert asyncio.get_running_loop().time() - began < 5
        hole.clear()
        # The black-holed exchange is still open at the proxy: had the connection gone back to the
        # pool, this request would queue behind it and time out too.
        reply = await asyncio.wait_for(call(api, "POST", EVENTS, event("after-timeout")), 10)
        assert reply.status == 201, reply.message
        assert [x.method for x in proxy.exchanges] == ["POST", "POST"]
    finally:
        await api.close()


async def test_a_connection_the_server_closed_while_idle_is_not_reused(
    proxy: ApiProxy, tmp_path: Path
) -> None:
    api = await new_api_client(str(proxy.kubeconfig(tmp_path / "kubeconfig")))
    try:
        first = await call(api, "GET", "/api/v1/namespaces/default")
        assert first.status == 200 and first.body["metadata"]["name"] == "default"
        # Back to back: the same keep-alive connection serves both (the proxy sees two requests).
        again = await call(api, "POST", EVENTS, event("back-to-back"))
        assert again.status == 201, again.message
        await asyncio.sleep(1.5)  # the proxy closes connections idle for 0.5 s
        later = await asyncio.wait_for(call(api, "POST", EVENTS, event("after-idle-close")), 10)
        assert later.status == 201, later.message
        assert later.body["metadata"]["name"] == "after-idle-close"  # a chunked answer, read whole
        assert len(proxy.exchanges) == 3
    finally:
        await api.close()


async def test_a_timeout_on_the_aiohttp_path_is_the_same_request_timeout(
    proxy: ApiProxy, tmp_path: Path
) -> None:
    """With a proxy configured the writes go through aiohttp (common/kube/client.py): its timeout
    reaches the caller as the RequestTimeout gpuq's own client raises, not as aiohttp's exception."""
    api = await new_api_client(str(proxy.kubeconfig(tmp_path / "kubeconfig")))
    try:
        assert api.gpuq_http is not None
        await api.gpuq_http.close()
        api.gpuq_http = None  # what a configured proxy leaves: the ApiClient's aiohttp session
        hole = proxy.black_hole(is_write)
        with pytest.raises(RequestTimeout) as timed_out:
            await request(
                api,
                "POST",
                EVENTS,
                body=event("aiohttp"),
                content_type="application/json",
                query=[],
                timeout=0.5,
            )
        assert isinstance(timed_out.value.__cause__, TimeoutError)
        hole.clear()
        reply = await asyncio.wait_for(call(api, "POST", EVENTS, event("aiohttp-after")), 10)
        assert reply.ok, reply.message
    finally:
        await api.close()


async def test_the_apiservers_error_statuses_are_typed(control_plane: ControlPlane) -> None:
    """What kube-apiserver answers a missing object, a second create and an invalid object: the
    typed error of each, with the Status body's reason and details."""
    api = await new_api_client(str(control_plane.kubeconfig))
    try:
        missing = await call(api, "GET", "/api/v1/namespaces/default/pods/no-such-pod")
        assert isinstance(missing.error, NotFound) and missing.error.reason == "NotFound"
        assert missing.error.details == {"name": "no-such-pod", "kind": "pods"}
        with pytest.raises(NotFound, match='pods "no-such-pod" not found'):
            missing.raise_for_status()
        (await call(api, "POST", EVENTS, event("typed-twice"))).raise_for_status()
        again = await call(api, "POST", EVENTS, event("typed-twice"))
        assert isinstance(again.error, Conflict) and again.error.reason == "AlreadyExists"
        invalid = await call(api, "POST", EVENTS, {**event("typed-invalid"), "reason": ""})
        assert isinstance(invalid.error, Invalid) and invalid.error.reason == "Invalid"
        assert invalid.error.details["causes"], invalid.error.details
    finally:
        await api.close()
