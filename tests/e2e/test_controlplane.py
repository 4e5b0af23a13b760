"""The harness itself: a real API server with RBAC, the CRDs, and the scheduling round trip the
scheduler will perform (fake GPU node, Pending pod, bind through pods/binding, watch event)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.api import MERGE_PATCH, ignore_not_found, status_message
from tests.e2e.cluster_fixtures import eventually
from tests.e2e.controlplane.harness import ControlPlane, Kubectl, dns_label, pinned_versions
from tests.testing.builders import GPU, MakeNode, MakePod, MakePodGroup, MakeQueue

pytestmark = pytest.mark.e2e

SCHEDULER_NAME = "gpuq-scheduler"
VOLCANO = ("scheduling.volcano.sh", "v1beta1")
GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"


async def test_server_runs_the_pinned_kubernetes_version(api_client: ApiClient, kubectl: Kubectl) -> None:
    expected = f"v{pinned_versions()['K8S_VERSION']}"
    info = await client.VersionApi(api_client).get_code()
    assert info.git_version == expected
    assert json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"] == expected


def test_etcd_is_the_pinned_release_and_serves_watch_progress(control_plane: ControlPlane) -> None:
    """The suite runs on the etcd build.sh builds (versions.env's ETCD_VERSION, the release
    Kubernetes 1.36 is tested with), not on an older one: kube-apiserver 1.36 logs "RequestWatchProgress
    feature is not supported" on etcd 3.4, and its clients' watch progress requests fail there."""
    with urllib.request.urlopen(f"http://127.0.0.1:{control_plane.etcd_port}/version", timeout=5) as reply:
        version = json.loads(reply.read())
    assert version["etcdserver"] == pinned_versions()["ETCD_VERSION"], version
    log = control_plane.log_paths["kube-apiserver"].read_text(errors="replace")
    assert "RequestWatchProgress feature is not supported" not in log


async def test_rbac_authorizes_service_account_tokens(
    api_client: ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    token_request = await core.create_namespaced_service_account_token(
        "default",
        namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
    )
    configuration = client.Configuration(
        host=control_plane.server,
        api_key={"BearerToken": token_request.status.token},
        api_key_prefix={"BearerToken": "Bearer"},
    )
    configuration.ssl_ca_cert = str(control_plane.pki / "ca.crt")
    async with ApiClient(configuration=configuration) as as_service_account:
        # A token signed by the harness's service-account key authenticates, and RBAC (not
        # AlwaysAllow) decides: nothing is granted yet.
        with pytest.raises(ApiException) as denied:
            await client.CoreV1Api(as_service_account).list_namespaced_pod(namespace)
        assert denied.value.status == 403
        assert f'User "system:serviceaccount:{namespace}:default" cannot list' in status_message(denied.value)

        rbac = client.RbacAuthorizationV1Api(api_client)
        await rbac.create_namespaced_role(
            namespace,
            client.V1Role(
                metadata=client.V1ObjectMeta(name="pod-reader"),
                rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])],
            ),
        )
        await rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="pod-reader"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"
                ),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="default", namespace=namespace)],
            ),
        )

        # The apiserver's RBAC authorizer reads Roles and RoleBindings from its own informers: the
        # grant takes effect once they have seen it (milliseconds, longer on a loaded machine).
        async def granted() -> list[object] | None:
            try:
                pods = await client.CoreV1Api(as_service_account).list_namespaced_pod(namespace)
            except ApiException as err:
                if err.status != 403:
                    raise
                return None
            return [pods.items]

        assert await eventually(granted, 30, "the Role to authorize the list") == [[]]


# Extended resources such as nvidia.com/gpu must have requests equal to limits. kubernetes_asyncio
# sends a dict body as it is; its stubs ask for the model class (hence the type: ignore[arg-type]).
GPU_POD = (
    MakePod()
    .image("registry.k8s.io/pause:3.10")
    .scheduler(SCHEDULER_NAME)
    .card(GPU_PRODUCT)
    .req({"cpu": "2", "memory": "8Gi", GPU: "1"})
    .lim({"cpu": "2", "memory": "8Gi", GPU: "1"})
)


async def bind(core: client.CoreV1Api, pod: client.V1Pod, node: str) -> tuple[int, dict[str, Any]]:
    """POST pods/binding the way the scheduler does; returns (HTTP status, Status body).

    The server answers a Status, which kubernetes_asyncio cannot parse as the V1Binding it expects,
    so the response is read raw. metadata.uid makes the API server refuse the binding if the pod
    was deleted and recreated under the same name meanwhile.
    """
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod.metadata.name, uid=pod.metadata.uid),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    response = await core.create_namespaced_pod_binding(
        pod.metadata.name, pod.metadata.namespace, body, _preload_content=False
    )
    # The stubs declare V1Binding whatever _preload_content says; raw, it is the aiohttp response.
    assert isinstance(response, aiohttp.ClientResponse)
    try:
        return int(response.status), dict(await response.json())
    finally:
        response.release()


async def test_queue_podgroup_gpu_node_pending_pod_bind_and_watch(
    api_client: ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    queue_name = dns_label("team-a")
    node_name = dns_label("gpu-node")

    queue = await custom.create_cluster_custom_object(
        *VOLCANO,
        "queues",
        MakeQueue(queue_name)
        .card_quota(json.dumps({GPU_PRODUCT: 8}))
        .capability(cpu="64", memory="512Gi")
        .obj(),
    )
    try:
        assert json.loads(queue["metadata"]["annotations"]["volcano.sh/card.quota"]) == {GPU_PRODUCT: 8}
        assert queue["spec"]["weight"] == 1  # schema default

        podgroup = await custom.create_namespaced_custom_object(
            *VOLCANO,
            namespace,
            "podgroups",
            MakePodGroup("training", namespace)
            .card_request(json.dumps({GPU_PRODUCT: 1}))
            .queue(queue_name)
            .min_member(1)
            .min_resources(cpu="2", memory="8Gi")
            .obj(),
        )
        assert podgroup["spec"]["queue"] == queue_name
        # The status subresource takes a merge patch: a dict body would go out as JSON-Patch.
        # (_content_type is accepted at run time but missing from kubernetes_asyncio's stubs.)
        patched = await custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]
            *VOLCANO,
            namespace,
            "podgroups",
            "training",
            {"status": {"phase": "Inqueue"}},
            _content_type=MERGE_PATCH,
        )
        assert patched["status"]["phase"] == "Inqueue"

        labels = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920"}
        node_body = MakeNode(node_name).product(GPU_PRODUCT).labels(labels).obj()
        await core.create_node(node_body)  # type: ignore[arg-type]
        capacity = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"}
        await core.patch_node_status(
            node_name,
            {
                "status": {
                    "capacity": capacity,
                    "allocatable": capacity,
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node"}
                    ],
                }
            },
        )
        node = await core.read_node(node_name)
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.metadata.labels["nvidia.com/gpu.product"] == GPU_PRODUCT
        assert [(c.type, c.status) for c in node.status.conditions] == [("Ready", "True")]

        body = GPU_POD.copy().name("worker-0").namespace(namespace).group("training").obj()
        pod = await core.create_namespaced_pod(namespace, body)  # type: ignore[arg-type]
        assert pod.spec.scheduler_name == SCHEDULER_NAME
        await asyncio.sleep(0.5)  # nothing in the harness schedules pods: it must still be unbound
        pod = await core.read_namespaced_pod("worker-0", namespace)
        assert pod.status.phase == "Pending"
        assert pod.spec.node_name is None
        assert not pod.status.conditions

        events: list[tuple[str, str | None]] = []

        async def watch_until_bound() -> None:
            async with watch.Watch() as stream:
                async for event in stream.stream(
                    core.list_namespaced_pod,
                    namespace,
                    field_selector="metadata.name=worker-0",
                    resource_version=pod.metadata.resource_version,
                    timeout_seconds=20,
                ):
                    events.append((event["type"], event["object"].spec.node_name))
                    if event["object"].spec.node_name:
                        return

        watcher = asyncio.create_task(watch_until_bound())
        await asyncio.sleep(0.2)  # let the watch open before the write it must see

        status, answer = await bind(core, pod, node_name)
        assert (status, answer["kind"], answer["status"]) == (201, "Status", "Success")
        await asyncio.wait_for(watcher, timeout=20)
        assert events == [("MODIFIED", node_name)]

        bound = await core.read_namespaced_pod("worker-0", namespace)
        assert bound.spec.node_name == node_name
        assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
        assert bound.status.phase == "Pending"  # no kubelet: bound pods never run

        status, answer = await bind(core, bound, node_name)
        assert status == 409
        assert "already assigned" in answer["message"]

        # A binding carrying a stale UID (the pod was recreated under the same name) is refused.
        recreated = GPU_POD.copy().name("worker-1").namespace(namespace).group("training").obj()
        other = await core.create_namespaced_pod(namespace, recreated)
        other.metadata.uid = "00000000-0000-0000-0000-000000000000"
        status, answer = await bind(core, other, node_name)
        assert status == 409
        assert "Precondition failed: UID in precondition" in answer["message"]
        assert (await core.read_namespaced_pod("worker-1", namespace)).spec.node_name is None
    finally:
        await ignore_not_found(custom.delete_cluster_custom_object(*VOLCANO, "queues", queue_name))
        await ignore_not_found(core.delete_node(node_name))
