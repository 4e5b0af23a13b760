#!/usr/bin/env bash
# The README's test command, and CI's (.ci/run runs exactly this): everything the suite needs on a
# fresh Debian machine, then the suite, then the static checks. Each step is skipped when its result
# is already there, so a second run goes straight to the tests.
#
#   1. Debian packages, with apt-get (as root, else through sudo), only when missing:
#      prometheus (tests/e2e/test_monitoring.py starts its own server; the Debian service is never
#      started) and chromium (headless, the HTML report's browser test).
#   2. The e2e control plane, by tests/e2e/controlplane/build.sh: kube-apiserver, kube-scheduler,
#      kube-controller-manager v1.36.4, etcd v3.6.8 (the release Kubernetes 1.36.4 is tested with),
#      kwok v0.8.0 and helm, cached under ~/.cache/gpuq/ (GPUQ_CACHE_DIR). Needs
#      Go >= 1.26 on PATH and the Go module proxy the first time (about 5 minutes on 2 cores).
#   3. Python: the virtual environment .venv (created when missing) with `pip install -e '.[dev]'`.
#   4. The tests (`python -m pytest`; arguments of this script are passed to pytest), then
#      lint-imports, ruff and mypy --strict.
#
# GPUQ_SKIP_SYSTEM=1 skips step 1 (a machine where apt is not to be touched: the tests that need the
# packages then fail, naming them).
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# apt_install PACKAGE...: install with apt-get, updating the package lists once if the first try fails
# (a fresh machine's lists may be empty or stale).
apt_install() {
    local install=($sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@")
    "${install[@]}" >/dev/null || { $sudo apt-get update -qq >/dev/null && "${install[@]}" >/dev/null; }
}

if [ "${GPUQ_SKIP_SYSTEM:-}" != 1 ]; then
    echo "== prometheus (Debian package; tests/e2e/test_monitoring.py runs its own on loopback)"
    if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
        # policy-rc.d answering 101: the package's maintainer scripts must not start the Debian service.
        added_policy=""
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
            $sudo chmod 755 /usr/sbin/policy-rc.d
            added_policy=1
        fi
        apt_install --no-install-recommends prometheus
        [ -z "$added_policy" ] || $sudo rm -f /usr/sbin/policy-rc.d
    fi
    prometheus --version 2>&1 | sed -n 1p

    echo "== chromium (Debian package; headless, for the HTML report's browser test)"
    command -v chromium >/dev/null 2>&1 || apt_install chromium
    chromium --version 2>/dev/null || true
fi

echo "== control plane (tests/e2e/controlplane/build.sh; cached under ~/.cache/gpuq): kube-apiserver,"
echo "   kube-scheduler, kube-controller-manager v1.36.4, etcd v3.6.8, kwok v0.8.0, helm"
bash tests/e2e/controlplane/build.sh

echo "== python: $(python3 --version), .venv"
[ -x .venv/bin/python ] || python3 -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[dev]'

echo "== tests"
python -m pytest "$@"

echo "== import contracts"
lint-imports

echo "== ruff"
ruff check .
ruff format --check .

echo "== mypy --strict"
mypy --strict
