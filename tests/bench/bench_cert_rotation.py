"""The webhook's certificates rotating under continuous creates, for 10 minutes (issue 12, rotation).

    python tests/bench/bench_cert_rotation.py [--minutes 10] [--validity 120] [--ca-validity 240]

Starts its own etcd + kube-apiserver (the e2e harness), installs the chart's webhook as
tests/e2e/deployed_webhook.py does (its RBAC, its webhook configurations reached over loopback,
``gpuq webhook`` with the Deployment's arguments on its ServiceAccount token), with serving certificates
valid for ``--validity`` seconds and CAs for ``--ca-validity``, then creates governed Pods through the
apiserver without a pause for ``--minutes`` (tests/e2e/rotation_load.py). Prints the creates, the
failures, the serving rotations and the completed CA rollovers; exits 1 unless the serving certificate
rotated at least 3 times, the CA rolled over at least once and no create failed. The short variant is
tests/e2e/test_webhook_rotation.py.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuq_k8s.common.kube.client import new_api_client
from gpuq_k8s.common.kube.status import call
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.deployed_webhook import DeployedWebhook
from tests.e2e.rotation_load import Rotations, creates_while_rotating


async def main(args: argparse.Namespace) -> int:
    plane = ControlPlane()
    plane.start()
    plane.apply_crds()
    workdir = Path(tempfile.mkdtemp(prefix="gpuq-rotation-"))
    extra = (
        f"--certificate-validity={args.validity}",
        f"--ca-validity={args.ca_validity}",
        f"--rotation-grace={args.grace}",
        "--renew-interval=1",
        "--cert-reload-interval=0.5",
    )
    webhook = DeployedWebhook(plane, workdir, extra_args=extra)
    api = await new_api_client(str(plane.kubeconfig))
    try:
        for path, body in (
            ("/api/v1/namespaces", {"metadata": {"name": "rotation"}}),
            ("/api/v1/namespaces/rotation/serviceaccounts", {"metadata": {"name": "default"}}),
        ):
            reply = await call(api, "POST", path, body)
            assert reply.ok or reply.status == 409, reply.message
        webhook.install()
        webhook.start()
        webhook.wait_serving()
        minute = [0]

        def progress(seen: Rotations) -> None:
            if seen.seconds_now() // 60 > minute[0]:
                minute[0] += 1
                print(f"{minute[0]} min: {seen.summary()}", flush=True)

        seen = await creates_while_rotating(
            api,
            "rotation",
            webhook.port,
            done=lambda _: False,
            timeout=args.minutes * 60,
            workers=args.workers,
            progress=progress,
        )
        print(seen.summary())
        for failure in seen.failures[:20]:
            print("failed:", failure)
        ok = seen.serving_rotations >= 3 and seen.ca_rollovers >= 1 and not seen.failures
        print("PASS" if ok else "FAIL", f"(logs in {workdir})")
        return 0 if ok else 1
    finally:
        webhook.remove()
        await api.close()
        plane.stop()


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--validity", type=float, default=120.0, help="serving certificate validity, seconds")
    parser.add_argument("--ca-validity", type=float, default=120.0, help="CA validity, seconds")
    parser.add_argument("--grace", type=float, default=10.0, help="--rotation-grace, seconds")
    parser.add_argument("--workers", type=int, default=2, help="concurrent create loops")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
