"""``gpuq simulate`` accepts exactly what the apiserver accepts (design.md "gpuq simulate").

An object a cluster can hold but whose gpuq annotations are malformed (it predates the webhook) runs:
exit 0, the scheduler's Warning event and the documented fallback (Semantics 3) in the JSON and in the
table. A custom resource the apiserver would refuse (its CRD schema, kubectl's strict field
validation) is an input error: exit 2, one line naming the object and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuq_k8s.cli import main
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name

MALFORMED = str(REPO_ROOT / "examples" / "malformed-annotations")


def _on(out: dict[str, Any], kind: str, name: str, reason: str) -> list[str]:
    """Messages of the ``reason`` events on the object ``kind``/.../``name`` (whatever its namespace)."""
    return [
        e["message"]
        for e in out["events"]
        if e["object"].split("/")[0] == kind and e["object"].split("/")[-1] == name and e["reason"] == reason
    ]


@pytest.fixture
def malformed(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["simulate", "-f", MALFORMED, "-o", "json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_a_queue_with_a_malformed_card_quota_has_card_quota_0(malformed: dict[str, Any]) -> None:
    [warning] = _on(malformed, "Queue", "broken-quota", "InvalidAnnotation")
    assert "volcano.sh/card.quota" in warning and "card quota treated as 0" in warning
    pods = pods_by_name(malformed)
    card = pods["card-in-broken-quota"]
    assert card["phase"] == "Pending"
    assert "broken-quota for NVIDIA-A100: requested 1, available 0, used 0, limit 0" in card["reason"]
    assert pods["cpu-in-broken-quota"]["phase"] == "Bound"  # its cpu/memory capability still holds


def test_a_podgroup_with_a_malformed_card_request_is_enqueued_on_its_cpu_memory(
    malformed: dict[str, Any],
) -> None:
    [warning] = _on(malformed, "PodGroup", "broken-request", "InvalidAnnotation")
    assert "volcano.sh/card.request" in warning and "card request treated as 0" in warning
    pods = pods_by_name(malformed)
    assert pods["gang-0"]["phase"] == pods["gang-1"]["phase"] == "Bound"
    assert {g["name"]: g["phase"] for g in malformed["podGroups"]} == {"broken-request": "Running"}


def test_malformed_pod_scoring_overrides_fall_back_to_the_configuration(malformed: dict[str, Any]) -> None:
    [weight] = _on(malformed, "Pod", "bad-strategy-weight", "InvalidAnnotation")
    assert (
        "volcano.sh/resource-strategy-weight" in weight and "scoring with the plugin configuration" in weight
    )
    [strategy] = _on(malformed, "Pod", "bad-scoring-strategy", "InvalidAnnotation")
    assert "'sideways'" in strategy and "scoring with most-allocated" in strategy
    pods = pods_by_name(malformed)
    assert pods["bad-strategy-weight"]["phase"] == pods["bad-scoring-strategy"]["phase"] == "Bound"


def test_a_malformed_card_name_or_tensor_fusion_request_keeps_the_pod_waiting_with_the_reason(
    malformed: dict[str, Any],
) -> None:
    pods = pods_by_name(malformed)
    [card] = _on(malformed, "Pod", "bad-card-name", "GetTaskRequestResourceFailed")
    assert "volcano.sh/card.name: invalid value 'NVIDIA-A100||'" in card
    assert (
        pods["bad-card-name"]["phase"] == "Pending"
        and "volcano.sh/card.name" in pods["bad-card-name"]["reason"]
    )
    [tflops] = _on(malformed, "Pod", "bad-tflops", "FailedScheduling")
    assert "tensor-fusion.ai/tflops-request: invalid value 'fast'" in tflops
    assert pods["bad-tflops"]["phase"] == "Pending" and "tflops-request" in pods["bad-tflops"]["reason"]


def test_malformed_crossquota_node_annotations_fall_through_to_the_next_source(
    malformed: dict[str, Any],
) -> None:
    warnings = _on(malformed, "Node", "gpu-1", "InvalidAnnotation")
    assert len(warnings) == 2
    assert any("volcano.sh/crossquota-cpu: invalid value 'lots'" in w for w in warnings)
    assert any("volcano.sh/crossquota-percentage-memory: invalid value 'half'" in w for w in warnings)
    assert all("falls through to the next source" in w for w in warnings)


def test_the_table_lists_the_warning_events_and_the_fallback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one table row per line: the assertions read whole messages
    assert main(["simulate", "-f", MALFORMED]) == 0
    text = capsys.readouterr().out
    assert "Warning events" in text
    warnings = text[text.index("Warning events") :]
    for name, reason in (
        ("broken-quota", "InvalidAnnotation"),
        ("broken-request", "InvalidAnnotation"),
        ("gpu-1", "InvalidAnnotation"),
        ("bad-card-name", "GetTaskRequestResourceFailed"),
        ("bad-strategy-weight", "InvalidAnnotation"),
        ("bad-scoring-strategy", "InvalidAnnotation"),
        ("card-in-broken-quota", "InsufficientScalarQuota"),
    ):
        assert any(name in line and reason in line for line in warnings.splitlines()), name
    assert "card quota treated as 0 until the annotation is fixed" in warnings
    assert "FailedScheduling" not in warnings  # the Pods table's REASON column says that already
    card_row = next(
        line for line in text.splitlines() if "card-in-broken-quota" in line and "Pending" in line
    )
    assert "available 0, used 0, limit 0" in card_row
    tflops_row = next(line for line in text.splitlines() if "bad-tflops" in line)
    assert "Pending" in tflops_row and "tensor-fusion.ai/tflops-request" in tflops_row


def test_a_custom_resource_gpuq_cannot_read_but_the_apiserver_holds_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """min > max passes the CRD schema (only the webhook refuses it): the scheduler warns and, as in a
    cluster, runs without that quota."""
    path = tmp_path / "in.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"
        'status: {allocatable: {cpu: "8", memory: 8Gi, pods: "110"}}\n---\n'
        "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: ElasticQuota\nmetadata: {name: eq, namespace: a}\n"
        'spec: {min: {cpu: "4"}, max: {cpu: "2"}}\n---\n'
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: a}\n"
        'spec: {schedulerName: gpuq-scheduler, containers: [{name: c, resources: {requests: {cpu: "3"}}}]}\n'
    )
    assert main(["simulate", "-f", str(path), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {
        "object": "ElasticQuota/a/eq",
        "type": "Warning",
        "reason": "InvalidAnnotation",
        "message": "ElasticQuota/a/eq: spec.min[cpu]: invalid value '4': expected at most spec.max[cpu] = 2",
    } in out["events"]
    assert out["pods"][0]["phase"] == "Bound" and out["elasticQuotas"] == []


GRQ = "apiVersion: tensor-fusion.ai/v1\nkind: GPUResourceQuota\nmetadata: {name: q, namespace: ml}\n"
QUEUE = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: team}\n"
PODGROUP = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\n"
EQ = "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: ElasticQuota\nmetadata: {name: eq, namespace: ml}\n"


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        # kubectl: strict decoding error: unknown field "spec.total.requestz"
        (
            GRQ + "spec: {total: {requestz: {tflops: '10', vram: 1Gi}}}\n",
            "GPUResourceQuota/ml/q: spec.total.requestz: unknown field",
        ),
        (
            PODGROUP + "spec: {minMember: 1, queeue: team}\n",
            "PodGroup/ml/g: spec.queeue: unknown field",
        ),
        (
            EQ + "spec: {min: {cpu: '1'}}\nstatus: {usd: {}}\n",
            "ElasticQuota/ml/eq: status.usd: unknown field",
        ),
        # a type error: a string where the schema says integer
        (
            PODGROUP + "spec: {minMember: two}\n",
            "PodGroup/ml/g: spec.minMember: invalid value 'two': expected an integer",
        ),
        # an enum violation
        (
            QUEUE + "status: {state: Halfopen}\n",
            "status.state: invalid value 'Halfopen': expected one of Open, Closed, Closing, Unknown",
        ),
        # a missing required field
        (
            GRQ + "spec: {total: {requests: {tflops: '10'}}}\n",
            "GPUResourceQuota/ml/q: spec.total.requests.vram: missing: required by the CRD schema",
        ),
        # a quantity the pattern refuses, a bound
        (
            EQ + "spec: {max: {cpu: lots}}\n",
            "ElasticQuota/ml/eq: spec.max[cpu]: invalid value 'lots': expected a string matching",
        ),
        (QUEUE + "spec: {weight: 0}\n", "spec.weight: invalid value 0: expected a number at least 1"),
    ],
)
def test_what_the_apiserver_refuses_is_an_input_error_naming_the_object_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: str, expected: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(document)
    assert main(["simulate", "-f", str(path), "-o", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"error: {path} (document 1): ") and expected in line


def test_every_problem_of_every_object_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(
        GRQ + "spec: {total: {requestz: {}, maxWorkers: -1}}\n---\n" + PODGROUP + "spec: {minMember: -2}\n"
    )
    assert main(["simulate", "-f", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3
    assert "GPUResourceQuota/ml/q: spec.total.requestz: unknown field" in err[0]
    assert "GPUResourceQuota/ml/q: spec.total.maxWorkers: invalid value -1" in err[1]
    assert "(document 2): PodGroup/ml/g: spec.minMember: invalid value -2" in err[2]
