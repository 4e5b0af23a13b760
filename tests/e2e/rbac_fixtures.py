"""gpuq as deploy/ grants it: the Namespace, ServiceAccounts and RBAC of deploy/ applied for real, a
kubeconfig on each ServiceAccount's token, and ``run_scheduler`` on either identity, so the scheduler's
scenarios (tests/e2e/test_scheduler_features.py) also run with only what the Role grants.

Fixtures are assigned in the modules that use them (``installed_rbac = rbac_fixtures.installed_rbac``),
as cluster_fixtures' are; a module using ``run_scheduler_as_admin_and_service_account`` assigns
``installed_rbac`` and ``service_account_kubeconfigs`` too (the service-account runs ask for them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.e2e.cluster_fixtures import SchedulerFactory, SchedulerProcess, scheduler_starter
from tests.e2e.controlplane.harness import ControlPlane
from tests.e2e.deployed_webhook import RBAC_KINDS, token_kubeconfig
from tests.e2e.manifests import DEPLOY, NAMESPACE, apply_for_real, kustomize

# The ServiceAccounts of deploy/: the scheduler's, the webhook's and the certificate Job's.
SCHEDULER, WEBHOOK, CERTS = "gpuq-scheduler", "gpuq-webhook", "gpuq-certs"


@pytest.fixture(scope="module")
def installed_rbac(control_plane: ControlPlane) -> str:
    """The Namespace, ServiceAccounts and RBAC of deploy/, applied for real (nothing else of it)."""
    docs = [d for d in kustomize(control_plane.kubectl, DEPLOY) if d["kind"] in RBAC_KINDS]
    apply_for_real(control_plane.kubectl, docs)
    return NAMESPACE


# An apiserver refusal as the processes log it ("HTTP 403", kubernetes_asyncio's "(403)", "Forbidden"),
# never a log timestamp's milliseconds ("22:03:35,403").
FORBIDDEN = re.compile(r"HTTP 403\b|\(403\)|\bForbidden\b")


@pytest.fixture(scope="module")
def service_account_kubeconfigs(
    control_plane: ControlPlane, installed_rbac: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """A kubeconfig on the token of each long-running process's ServiceAccount."""
    directory = tmp_path_factory.mktemp("sa-kubeconfigs")
    return {sa: token_kubeconfig(control_plane, sa, directory / sa) for sa in (SCHEDULER, WEBHOOK)}


def _leader_election(extra: Sequence[str]) -> list[str]:
    """Leader election on the one Lease the Role grants, in gpuq-system, as the Deployment runs it
    (unless the test asks for leader election itself); a released Lease is taken within one retry period."""
    if "--leader-elect" in extra:
        return []
    return [
        *("--leader-elect", "--leader-elect-resource-namespace", NAMESPACE),
        *("--leader-elect-retry-period", "0.5", "--leader-elect-renew-deadline", "2"),
        *("--leader-elect-lease-duration", "3"),
    ]


@pytest.fixture(params=["admin", "service-account"])
def run_scheduler_as_admin_and_service_account(
    request: pytest.FixtureRequest, control_plane: ControlPlane, tmp_path: Path
) -> Iterator[SchedulerFactory]:
    """cluster_fixtures.run_scheduler, once on the admin kubeconfig and once authenticated as
    system:serviceaccount:gpuq-system:gpuq-scheduler with leader election on its Lease. The test objects
    are still created by the admin, as a user would. On the ServiceAccount no scheduler may log a
    refusal (403): what deploy/ grants is all it needs."""
    started: list[SchedulerProcess] = []
    if request.param == "admin":
        yield scheduler_starter(control_plane.kubeconfig, tmp_path, started)
    else:
        kubeconfigs: dict[str, Path] = request.getfixturevalue("service_account_kubeconfigs")
        yield scheduler_starter(kubeconfigs[SCHEDULER], tmp_path, started, _leader_election)
    for process in started:
        process.terminate()
    if request.param != "admin":
        for process in started:
            assert not FORBIDDEN.search(process.log(2000)), process.log(2000)
