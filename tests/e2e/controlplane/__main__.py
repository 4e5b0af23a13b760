"""Start the e2e control plane by hand: ``python -m tests.e2e.controlplane``.

Starts etcd + kube-apiserver with the CRDs of deploy/crds applied, prints the KUBECONFIG to export
in another shell, and keeps running until Ctrl-C (or SIGTERM), then stops both processes.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from tests.e2e.controlplane.harness import ControlPlane, ControlPlaneError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.controlplane", description=__doc__)
    parser.add_argument("--no-crds", action="store_true", help="do not apply deploy/crds")
    parser.add_argument("--keep", action="store_true", help="keep the working directory (logs, PKI) on exit")
    args = parser.parse_args(argv)

    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        plane = ControlPlane(keep_workdir=args.keep)
        plane.start()
    except ControlPlaneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        if not args.no_crds:
            plane.apply_crds()
        print(f"kube-apiserver {plane.server} ready in {plane.startup_seconds:.1f}s", file=sys.stderr)
        for name, path in plane.log_paths.items():
            print(f"  {name} log: {path}", file=sys.stderr)
        print("Ctrl-C stops it. In another shell:", file=sys.stderr)
        print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
        stopping.wait()
    except ControlPlaneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        print("stopping the control plane", file=sys.stderr)
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
