"""deploy/crds against the real API server: the specs' example objects are accepted as written,
schema violations are rejected with the API server's own message, defaults, the status
subresource, short names and printer columns work through kubectl."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from gpuq_k8s.common.model.gpu_quota.quota import GPUResourceQuota, TflopsVram, validate_gpu_resource_quota
from tests.e2e.api import MERGE_PATCH, ignore_not_found, parse_table, status_message
from tests.e2e.controlplane.harness import Kubectl, dns_label
from tests.testing.builders import GPU, MakeElasticQuota, MakeGPUResourceQuota, MakePodGroup, MakeQueue

pytestmark = pytest.mark.e2e

# capacity-card.md, "Queue Card Quota Configuration", verbatim but for the name (Queues are
# cluster-scoped and the control plane is shared by the session).
QUEUE_SAMPLE = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: queue-a
  annotations:
    volcano.sh/card.quota: |
      {
        "NVIDIA-A100": 10,
        "NVIDIA-H100": 5,
        "NVIDIA-A100/mps-80g*1/8": 16
      }
spec:
  capability:
    cpu: "100"
    memory: "200Gi"
"""

# capacity-card.md, "Job Annotations for Card Requests": the card.request annotation, on a PodGroup.
PODGROUP_SAMPLE = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: training-job
  annotations:
    volcano.sh/card.request: |
      {
        "NVIDIA-A100": 8
      }
spec:
  queue: queue-a
  minMember: 1
"""

# capacity-scheduling.md, "Design Details", verbatim but for the namespace.
ELASTICQUOTA_SAMPLE = """
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: test
  namespace: test
spec:
  max:
    cpu: 20
    memory: 40Gi
    nvidia.com/gpu: 2
  min:
    cpu: 10
    memory: 20Gi
    nvidia.com/gpu: 1
"""

# NexusGPU/tensor-fusion config/samples/v1_gpuresourcequota.yaml (first object): the shape of the
# upstream CRD and of design.md.
GPURESOURCEQUOTA_SAMPLE = """
apiVersion: tensor-fusion.ai/v1
kind: GPUResourceQuota
metadata:
  name: production-namespace
  namespace: production-namespace
spec:
  total:
    requests:
      tflops: "1000"
      vram: "200Gi"
    limits:
      tflops: "1500"
      vram: "300Gi"
    maxWorkers: 100
    alertThresholdPercent: 90
  single:
    maxRequests:
      tflops: "200"
      vram: "40Gi"
    maxLimits:
      tflops: "300"
      vram: "60Gi"
    maxGPUCount: 8
    defaultRequests:
      tflops: "500m"
      vram: "1Gi"
    defaultLimits:
      tflops: "1"
      vram: "2Gi"
"""

# gpu-resource-quota.md, "GPUResourceQuota Specification": the design's own layout (flat keys
# requests.tflops/requests.vram, workers, single.max/min), which gpuq's CRD accepts besides
# tensor-fusion's (design.md Semantics 12).
GPURESOURCEQUOTA_DOC_SAMPLE = """
apiVersion: tensor-fusion.ai/v1
kind: GPUResourceQuota
metadata:
  name: team-a-quota
  namespace: team-a
spec:
  total:
    requests.tflops: "1000"
    requests.vram: "100Gi"
    workers: 50
    alertThresholdPercent: 90
  single:
    max:
      tflops: "100"
      vram: "16Gi"
      workers: 8
    min:
      tflops: "1"
      vram: "1Gi"
"""


def manifest(sample: str, **metadata: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(sample)
    document["metadata"].update(metadata)
    return document


def create(kubectl: Kubectl, document: dict[str, Any], *, check: bool = True) -> str:
    """``kubectl create -f -`` (kubectl validates fields strictly, as a user's create would)."""
    result = kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(document), check=check)
    return result.stdout if result.returncode == 0 else result.stderr


@pytest.mark.parametrize(
    ("crd", "scope", "short_names", "columns"),
    [
        (
            "queues.scheduling.volcano.sh",
            "Cluster",
            ["q", "queue-v1beta1"],
            ["WEIGHT", "STATE", "PARENT", "AGE"],
        ),
        (
            "podgroups.scheduling.volcano.sh",
            "Namespaced",
            ["pg", "podgroup-v1beta1"],
            ["STATUS", "minMember", "RUNNINGS", "AGE", "QUEUE"],
        ),
        ("elasticquotas.scheduling.x-k8s.io", "Namespaced", ["eq", "eqs"], ["Age"]),
        (
            "gpuresourcequotas.tensor-fusion.ai",
            "Namespaced",
            None,
            ["Requests TFlops Used", "Requests VRAM Used", "Workers Used", "Alert Threshold", "Age"],
        ),
    ],
)
async def test_crd_is_established_as_declared(
    api_client: ApiClient, crd: str, scope: str, short_names: list[str] | None, columns: list[str]
) -> None:
    definition = await client.ApiextensionsV1Api(api_client).read_custom_resource_definition(crd)
    conditions = {c.type: c.status for c in definition.status.conditions}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert definition.spec.scope == scope
    assert definition.spec.names.short_names == short_names
    (version,) = definition.spec.versions
    assert version.served and version.storage
    assert version.subresources.status == {}
    assert [column.name for column in version.additional_printer_columns] == columns


async def test_spec_samples_are_accepted_and_listed_by_kubectl(kubectl: Kubectl, namespace: str) -> None:
    queue_name = dns_label("queue-a")
    queue = json.loads(create(kubectl, manifest(QUEUE_SAMPLE, name=queue_name)))
    quota = json.loads(queue["metadata"]["annotations"]["volcano.sh/card.quota"])
    assert quota == {"NVIDIA-A100": 10, "NVIDIA-H100": 5, "NVIDIA-A100/mps-80g*1/8": 16}
    assert queue["spec"] == {"capability": {"cpu": "100", "memory": "200Gi"}, "weight": 1}

    podgroup = json.loads(create(kubectl, manifest(PODGROUP_SAMPLE, namespace=namespace)))
    assert json.loads(podgroup["metadata"]["annotations"]["volcano.sh/card.request"]) == {"NVIDIA-A100": 8}

    quota_eq = json.loads(create(kubectl, manifest(ELASTICQUOTA_SAMPLE, namespace=namespace)))
    assert quota_eq["spec"]["max"] == {"cpu": 20, "memory": "40Gi", "nvidia.com/gpu": 2}
    assert quota_eq["spec"]["min"] == {"cpu": 10, "memory": "20Gi", "nvidia.com/gpu": 1}

    grq = json.loads(create(kubectl, manifest(GPURESOURCEQUOTA_SAMPLE, namespace=namespace)))
    assert grq["spec"]["total"]["requests"] == {"tflops": "1000", "vram": "200Gi"}
    assert grq["spec"]["single"]["defaultRequests"] == {"tflops": "500m", "vram": "1Gi"}

    try:
        listing = kubectl("get", "queues,podgroups,elasticquotas,gpuresourcequotas", "-A").stdout
        assert f"queue.scheduling.volcano.sh/{queue_name}" in listing
        assert f"{namespace}   podgroup.scheduling.volcano.sh/training-job" in listing
        assert f"{namespace}   elasticquota.scheduling.x-k8s.io/test" in listing
        assert f"{namespace}   gpuresourcequota.tensor-fusion.ai/production-namespace" in listing

        by_short_name = kubectl("get", "q,pg,eq", "-A", "-o", "name").stdout.split()
        assert f"queue.scheduling.volcano.sh/{queue_name}" in by_short_name
        assert "podgroup.scheduling.volcano.sh/training-job" in by_short_name
        assert "elasticquota.scheduling.x-k8s.io/test" in by_short_name

        # QUEUE is a priority-1 column: shown with -o wide only.
        (row,) = parse_table(kubectl("get", "pg", "-n", namespace, "-o", "wide").stdout)
        assert row == {
            "NAME": "training-job",
            "STATUS": "",
            "MINMEMBER": "1",
            "RUNNINGS": "",
            "AGE": row["AGE"],
            "QUEUE": "queue-a",
        }
    finally:
        kubectl("delete", "queue", queue_name)


def test_spec_doc_gpuresourcequota_sample_is_accepted_and_read_as_the_crd_layout(
    kubectl: Kubectl, namespace: str
) -> None:
    """Semantics 12: the design's layout goes through the apiserver unpruned (kubectl's strict field
    validation finds no unknown field) and gpuq reads it as the same limits as tensor-fusion's layout,
    although the apiserver adds the CRD's maxWorkers default next to the design's workers."""
    stored = json.loads(create(kubectl, manifest(GPURESOURCEQUOTA_DOC_SAMPLE, namespace=namespace)))
    assert stored["spec"]["total"] == {
        "requests.tflops": "1000",
        "requests.vram": "100Gi",
        "workers": 50,
        "alertThresholdPercent": 90,
        "maxWorkers": 32768,
    }
    assert stored["spec"]["single"] == {
        "max": {"tflops": "100", "vram": "16Gi", "workers": 8},
        "min": {"tflops": "1", "vram": "1Gi"},
    }
    quota = validate_gpu_resource_quota(stored)
    twin = GPUResourceQuota.from_dict(
        MakeGPUResourceQuota("team-a-quota", namespace)
        .total(requests={"tflops": "1000", "vram": "100Gi"}, maxWorkers=50, alertThresholdPercent=90)
        .single(maxRequests={"tflops": "100", "vram": "16Gi"}, maxGPUCount=8)
        .obj()
    )
    same = ("total_requests", "max_workers", "alert_threshold_percent", "max_requests", "max_gpu_count")
    assert {f: getattr(quota, f) for f in same} == {f: getattr(twin, f) for f in same}
    assert quota.min_requests == TflopsVram(tflops=1000, vram=1024**3)


def test_unknown_gpuresourcequota_fields_are_still_refused(kubectl: Kubectl, namespace: str) -> None:
    document = manifest(GPURESOURCEQUOTA_DOC_SAMPLE, namespace=namespace, name="typo")
    document["spec"]["single"]["max"]["gpus"] = 8
    document["spec"]["total"]["requests.cpu"] = "4"
    error = create(kubectl, document, check=False)
    for field in ("spec.single.max.gpus", "spec.total.requests.cpu"):
        assert f'unknown field "{field}"' in error


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(
            MakeQueue(dns_label("bad-queue")).weight(0).obj(),
            "spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1",
            id="queue-weight-0",
        ),
        pytest.param(
            MakeQueue(dns_label("bad-queue")).weight(65536).obj(),
            "spec.weight: Invalid value: 65536: spec.weight in body should be less than or equal to 65535",
            id="queue-weight-too-big",
        ),
        pytest.param(
            MakeQueue(dns_label("bad-queue")).capability(cpu="lots").obj(),
            'spec.capability.cpu: Invalid value: "lots": spec.capability.cpu in body should match',
            id="queue-capability-not-a-quantity",
        ),
        pytest.param(
            MakePodGroup("bad").min_member(-1).obj(),
            "spec.minMember: Invalid value: -1: spec.minMember in body should be greater than or equal to 0",
            id="podgroup-negative-min-member",
        ),
        pytest.param(
            MakePodGroup("bad").spec(networkTopology={"mode": "medium"}).obj(),
            'spec.networkTopology.mode: Unsupported value: "medium": supported values: "hard", "soft"',
            id="podgroup-topology-mode",
        ),
        pytest.param(
            MakeElasticQuota("bad").max({GPU: "two"}).obj(),
            'spec.max.nvidia.com/gpu: Invalid value: "two"',
            id="elasticquota-not-a-quantity",
        ),
        pytest.param(
            MakeGPUResourceQuota("bad").total(alertThresholdPercent=101).obj(),
            "spec.total.alertThresholdPercent: Invalid value: 101: "
            "spec.total.alertThresholdPercent in body should be less than or equal to 100",
            id="grq-alert-threshold-over-100",
        ),
        pytest.param(
            MakeGPUResourceQuota("bad").total(requests={"tflops": "10"}).obj(),
            "spec.total.requests.vram: Required value",
            id="grq-requests-without-vram",
        ),
        pytest.param(
            MakeGPUResourceQuota("bad").total(requests={"tflops": "-5", "vram": "1Gi"}).obj(),
            'spec.total.requests.tflops: Invalid value: "-5"',
            id="grq-negative-tflops",
        ),
    ],
)
def test_schema_violation_is_rejected(
    kubectl: Kubectl, namespace: str, document: dict[str, Any], message: str
) -> None:
    if document["kind"] != "Queue":
        document = {**document, "metadata": {**document["metadata"], "namespace": namespace}}
    error = create(kubectl, document, check=False)
    assert "is invalid" in error
    assert message in error


async def test_defaults_from_the_schemas(api_client: ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(api_client)
    podgroup = await custom.create_namespaced_custom_object(
        "scheduling.volcano.sh",
        "v1beta1",
        namespace,
        "podgroups",
        MakePodGroup("defaults", namespace).min_member(2).spec(networkTopology={}).obj(),
    )
    assert podgroup["spec"] == {
        "minMember": 2,
        "queue": "default",
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
    }
    grq = await custom.create_namespaced_custom_object(
        "tensor-fusion.ai",
        "v1",
        namespace,
        "gpuresourcequotas",
        MakeGPUResourceQuota("defaults", namespace).total(requests={"tflops": "10", "vram": "8Gi"}).obj(),
    )
    assert grq["spec"]["total"] == {
        "requests": {"tflops": "10", "vram": "8Gi"},
        "maxWorkers": 32768,
        "alertThresholdPercent": 95,
    }


async def test_status_subresource_and_printer_columns(
    api_client: ApiClient, kubectl: Kubectl, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api_client)
    group = ("tensor-fusion.ai", "v1", namespace, "gpuresourcequotas")
    await custom.create_namespaced_custom_object(
        *group, manifest(GPURESOURCEQUOTA_SAMPLE, name="team-a", namespace=namespace)
    )
    status = {
        "used": {
            "requests": {"tflops": "250", "vram": "48Gi"},
            "limits": {"tflops": "300", "vram": "64Gi"},
            "workers": 3,
        },
        "availablePercent": {"requests.tflops": "75.00", "requests.vram": "76.00", "workers": "97.00"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "QuotaReady",
                "message": "quota is ready",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "lastUpdateTime": "2026-01-01T00:00:00Z",
    }
    # Status written through the main resource is dropped: only /status may change it...
    ignored = await custom.patch_namespaced_custom_object(  # type: ignore[call-arg]
        *group, "team-a", {"status": status}, _content_type=MERGE_PATCH
    )
    assert "status" not in ignored
    # ... and a spec sent to /status is dropped likewise.
    written = await custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]
        *group, "team-a", {"status": status, "spec": {"total": {"maxWorkers": 1}}}, _content_type=MERGE_PATCH
    )
    assert written["status"] == status
    assert written["spec"]["total"]["maxWorkers"] == 100

    (row,) = parse_table(kubectl("get", "gpuresourcequotas", "-n", namespace).stdout)
    assert row == {
        "NAME": "team-a",
        "REQUESTS TFLOPS USED": "250",
        "REQUESTS VRAM USED": "48Gi",
        "WORKERS USED": "3",
        "ALERT THRESHOLD": "90",
        "AGE": row["AGE"],
    }

    # The Queue state enum is enforced on status writes, where the scheduler sets it.
    queue_name = dns_label("closing")
    await custom.create_cluster_custom_object(
        "scheduling.volcano.sh",
        "v1beta1",
        "queues",
        MakeQueue(queue_name).obj(),
    )
    try:
        with pytest.raises(ApiException) as rejected:
            await custom.patch_cluster_custom_object_status(  # type: ignore[call-arg]
                "scheduling.volcano.sh",
                "v1beta1",
                "queues",
                queue_name,
                {"status": {"state": "Paused"}},
                _content_type=MERGE_PATCH,
            )
        assert rejected.value.status == 422
        assert 'status.state: Unsupported value: "Paused"' in status_message(rejected.value)
        await custom.patch_cluster_custom_object_status(  # type: ignore[call-arg]
            "scheduling.volcano.sh",
            "v1beta1",
            "queues",
            queue_name,
            {"status": {"state": "Closing"}},
            _content_type=MERGE_PATCH,
        )
        (queue_row,) = parse_table(kubectl("get", "q", queue_name).stdout)
        assert queue_row == {
            "NAME": queue_name,
            "WEIGHT": "1",
            "STATE": "Closing",
            "PARENT": "",
            "AGE": queue_row["AGE"],
        }
    finally:
        await ignore_not_found(
            custom.delete_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", queue_name)
        )
