"""Fixtures of the end-to-end tests: a real kube-apiserver + etcd for the whole session.

- ``control_plane``: started once per session with the CRDs of deploy/crds applied. If the binaries
  are missing or the control plane cannot start, every e2e test FAILS with the reason and the build
  command: an e2e run that silently tested nothing would look green.
- ``api_client``: a kubernetes_asyncio ApiClient authenticated as the admin (system:masters).
- ``namespace``: a fresh namespace per test, with the ``default`` ServiceAccount that the
  ServiceAccount admission plugin requires for pods (no controller-manager creates it here).
- ``kubectl``: the harness's kubectl bound to the admin kubeconfig.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.api_client import ApiClient

from tests.e2e.controlplane.harness import ControlPlane, ControlPlaneError, Kubectl, dns_label


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane: ControlPlane | None = None
    failure = ""
    try:
        plane = ControlPlane()
        plane.start()
        plane.apply_crds()
    except ControlPlaneError as error:
        failure = str(error)
    if failure:
        # Outside the except block, so the report shows the reason once, not a chained traceback.
        if plane is not None:
            plane.stop()
        pytest.fail(f"e2e control plane unavailable: {failure}", pytrace=False)
    assert plane is not None
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> Kubectl:
    return control_plane.kubectl


@pytest_asyncio.fixture(scope="session")
async def api_client(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(control_plane.kubeconfig), client_configuration=configuration
    )
    async with ApiClient(configuration=configuration) as api:
        yield api


@pytest_asyncio.fixture
async def namespace(api_client: ApiClient, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    core = client.CoreV1Api(api_client)
    name = dns_label("e2e", request.node.name)
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    await core.create_namespaced_service_account(
        name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default"))
    )
    yield name
    # Without the namespace controller the namespace stays Terminating and its objects remain: its pods
    # go now (grace 0: no kubelet confirms), so later tests list and watch a cluster of their own size;
    # deletion still buys that nothing new can be created in it by a straggling task.
    await core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    await core.delete_namespace(name)
