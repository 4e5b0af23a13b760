"""Issue 12, rotation: the deployed webhook renews its own certificates under load, with no failed request.

The chart's webhook (tests/e2e/deployed_webhook.py: its RBAC, its webhook configurations reached over
loopback, ``gpuq webhook`` with its Deployment's arguments on its ServiceAccount token) runs with
certificates valid for 30 s (serving) and 60 s (CA) and a 5 s grace. While four workers create governed
Pods through the real apiserver, the test waits for at least one serving rotation and one complete CA
rollover (the bundle holds the old and the new CA, then the new one only), then checks that no create
failed and each was patched by the mutating webhook, that the bundle never dropped to a CA the serving
certificate was not signed by, and that the port served every rotated certificate. A second replica
runs alongside: the Lease makes the first the only writer, and the second serves the renewed certificate
from the Secret all the same; when the first is killed (after the creates), the second takes the Lease
and renews. The 10-minute run
with 2-minute certificates is tests/bench/bench_cert_rotation.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio.client.api_client import ApiClient

from gpuq_k8s.common.kube.status import call
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.deployed_webhook import NAMESPACE, DeployedWebhook
from tests.e2e.rotation_load import Rotations, creates_while_rotating, secret_certificate, served_certificate

pytestmark = pytest.mark.e2e

SHORT = (
    "--certificate-validity=30",
    "--ca-validity=60",
    "--rotation-grace=5",
    "--renew-interval=1",
    "--cert-reload-interval=0.5",
)


@pytest.fixture
def replicas(
    control_plane: ControlPlane, tmp_path: Path
) -> Iterator[tuple[DeployedWebhook, DeployedWebhook]]:
    """Two replicas of the chart's Deployment: the first is the one the apiserver calls (and, started
    first, the Lease holder); the second stands by, renewing nothing, serving what the Secret holds."""
    deployed = DeployedWebhook(control_plane, tmp_path, extra_args=SHORT)
    (tmp_path / "standby").mkdir()
    standby: DeployedWebhook | None = None
    try:
        deployed.install()
        deployed.start()
        deployed.wait_serving()
        standby = deployed.replica(tmp_path / "standby")
        standby.start()
        standby.wait_serving()
        yield deployed, standby
    finally:
        if standby is not None:
            standby.kill()
        deployed.remove()
        deployed.reset_certificates()


def _done(seen: Rotations) -> bool:
    return seen.serving_rotations >= 2 and seen.ca_rollovers >= 1


async def test_certificates_rotate_under_load_without_a_failed_request(
    replicas: tuple[DeployedWebhook, DeployedWebhook], api_client: ApiClient, namespace: str
) -> None:
    webhook, standby = replicas
    seen = await creates_while_rotating(api_client, namespace, webhook.port, done=_done, timeout=150)
    print(seen.summary())
    assert _done(seen), f"not enough rotations: {seen.summary()}\n{webhook.log()}"
    assert not seen.failures, f"{seen.summary()}\n" + "\n".join(seen.failures[:20])
    assert seen.creates > 100, seen.summary()
    # Every certificate the Secret held was served on the port (hot reload, no restart).
    assert set(seen.servings[1:]) <= set(seen.served), seen.summary()
    assert webhook.process is not None and webhook.process.poll() is None, webhook.log()
    # One writer: the Lease is the first replica's, and the standby never wrote; it serves what the
    # Secret holds all the same.
    lease = await call(api_client, "GET", LEASE)
    assert webhook.process is not None
    assert lease.body["spec"]["holderIdentity"].endswith(f"_{webhook.process.pid}"), lease.body
    assert "certificates: " in webhook.log(10_000) and "certificates: " not in standby.log(10_000), (
        standby.log()
    )
    for _ in range(50):
        if await served_certificate(standby.port) == await secret_certificate(api_client):
            break
        await asyncio.sleep(0.2)
    else:
        pytest.fail(f"the standby does not serve the Secret's certificate\n{standby.log()}")
    # The leader dies: the standby takes the Lease once the dead holder's has run out, and renews.
    last = await secret_certificate(api_client)
    webhook.kill()
    assert standby.process is not None
    took = await _within(60, lambda: _holder_is(api_client, standby.process.pid if standby.process else 0))
    renewed = await _within(60, lambda: _changed(api_client, last))
    print(f"the standby took the Lease {took:.0f}s after the leader died, renewed {renewed:.0f}s later")
    assert "certificates: " in standby.log(10_000), standby.log()
    # Each bundle change keeps the CA in use: growing by the new CA, then dropping the old one.
    for before, after in zip(seen.bundles, seen.bundles[1:], strict=False):
        assert set(before) & set(after), f"the bundle was replaced, not overlapped: {seen.bundles}"


LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/gpuq-webhook-certs"


async def _holder_is(api: ApiClient, pid: int) -> bool:
    lease = await call(api, "GET", LEASE)
    return str((lease.body.get("spec") or {}).get("holderIdentity") or "").endswith(f"_{pid}")


async def _changed(api: ApiClient, before: str | None) -> bool:
    return await secret_certificate(api) not in (None, before)


async def _within(seconds: float, check: Callable[[], Awaitable[bool]]) -> float:
    start = time.monotonic()
    while not await check():
        assert time.monotonic() - start < seconds, f"not within {seconds:g}s"
        await asyncio.sleep(0.25)
    return time.monotonic() - start
