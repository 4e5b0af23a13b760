"""The scheduler-in-a-cluster scenarios of test_scheduler_features.py, re-run with the scheduler on the
gpuq-scheduler ServiceAccount token that deploy/'s RBAC grants (not the admin kubeconfig) and with
leader election on its Lease in gpuq-system, as the Deployment runs it.

Every ``test_*`` of that module is collected here again; only the ``run_scheduler`` fixture differs.
The test objects themselves are still created by the admin, as a user would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.e2e import cluster_fixtures as fixtures
from tests.e2e import test_scheduler_features as features
from tests.e2e.cluster_fixtures import SchedulerFactory, SchedulerProcess
from tests.e2e.test_deploy import NAMESPACE
from tests.e2e.test_rbac import FORBIDDEN, installed_rbac, service_account_kubeconfigs

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
__all__ = ["installed_rbac", "service_account_kubeconfigs"]

SCENARIOS = {
    name: test for name, test in vars(features).items() if name.startswith("test_") and callable(test)
}
globals().update(SCENARIOS)


def test_the_scenarios_are_collected() -> None:
    assert len(SCENARIOS) >= 5, sorted(SCENARIOS)


@pytest.fixture
def run_scheduler(service_account_kubeconfigs: dict[str, Path], tmp_path: Path) -> Iterator[SchedulerFactory]:
    """cluster_fixtures.run_scheduler, authenticated as system:serviceaccount:gpuq-system:gpuq-scheduler."""
    started: list[SchedulerProcess] = []

    def leader_election(extra: Sequence[str]) -> list[str]:
        if "--leader-elect" in extra:
            return []
        # The one Lease the Role grants; a released Lease is taken within one retry period.
        return [
            *("--leader-elect", "--leader-elect-resource-namespace", NAMESPACE),
            *("--leader-elect-retry-period", "0.5", "--leader-elect-renew-deadline", "2"),
            *("--leader-elect-lease-duration", "3"),
        ]

    kubeconfig = service_account_kubeconfigs["gpuq-scheduler"]
    yield fixtures.scheduler_starter(kubeconfig, tmp_path, started, leader_election)
    for process in started:
        process.terminate()
    for process in started:
        assert not FORBIDDEN.search(process.log(2000)), process.log(2000)
