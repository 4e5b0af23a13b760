"""Issue 12, rotation: the deployed webhook renews its own certificates under load, with no failed request.

The chart's webhook (tests/e2e/deployed_webhook.py: its RBAC, its webhook configurations reached over
loopback, ``gpuq webhook`` with its Deployment's arguments on its ServiceAccount token) runs with
certificates valid for 30 s (serving) and 60 s (CA) and a 5 s grace. While four workers create governed
Pods through the real apiserver, the test waits for at least one serving rotation and one complete CA
rollover (the bundle holds the old and the new CA, then the new one only), then checks that no create
failed and each was patched by the mutating webhook, that the bundle never dropped to a CA the serving
certificate was not signed by, and that the port served every rotated certificate. The 10-minute run
with 2-minute certificates is tests/bench/bench_cert_rotation.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio.client.api_client import ApiClient

from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.deployed_webhook import DeployedWebhook
from tests.e2e.rotation_load import Rotations, creates_while_rotating

pytestmark = pytest.mark.e2e

SHORT = (
    "--certificate-validity=30",
    "--ca-validity=60",
    "--rotation-grace=5",
    "--renew-interval=1",
    "--cert-reload-interval=0.5",
)


@pytest.fixture
def webhook(control_plane: ControlPlane, tmp_path: Path) -> Iterator[DeployedWebhook]:
    deployed = DeployedWebhook(control_plane, tmp_path, extra_args=SHORT)
    try:
        deployed.install()
        deployed.start()
        deployed.wait_serving()
        yield deployed
    finally:
        deployed.remove()
        deployed.reset_certificates()


def _done(seen: Rotations) -> bool:
    return seen.serving_rotations >= 2 and seen.ca_rollovers >= 1


async def test_certificates_rotate_under_load_without_a_failed_request(
    webhook: DeployedWebhook, api_client: ApiClient, namespace: str
) -> None:
    seen = await creates_while_rotating(api_client, namespace, webhook.port, done=_done, timeout=150)
    print(seen.summary())
    assert _done(seen), f"not enough rotations: {seen.summary()}\n{webhook.log()}"
    assert not seen.failures, f"{seen.summary()}\n" + "\n".join(seen.failures[:20])
    assert seen.creates > 100, seen.summary()
    # Every certificate the Secret held was served on the port (hot reload, no restart).
    assert set(seen.servings[1:]) <= set(seen.served), seen.summary()
    assert webhook.process is not None and webhook.process.poll() is None, webhook.log()
    # Each bundle change keeps the CA in use: growing by the new CA, then dropping the old one.
    for before, after in zip(seen.bundles, seen.bundles[1:], strict=False):
        assert set(before) & set(after), f"the bundle was replaced, not overlapped: {seen.bundles}"
