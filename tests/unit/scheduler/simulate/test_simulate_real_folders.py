"""``gpuq simulate -f`` on a real repository folder (design.md "gpuq simulate", issue 27): kinds gpuq does
not simulate are skipped with one summary line (refused with ``--strict``); built-in kinds are held to the
apiserver's field tree, as ``kubectl apply``'s strict field validation holds them; a CRD of a simulated
kind in the input is the one its objects are checked against; a pod without ``schedulerName`` is not
gpuq's; and every shipped example folder runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.cli import main
from tests.testing.paths import REPO_ROOT

GITOPS = REPO_ROOT / "tests" / "fixtures" / "gitops"
EXAMPLES = REPO_ROOT / "examples"
SPECS = EXAMPLES / "specs"
NODE = (
    "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"
    "status: {allocatable: {cpu: '8', memory: 8Gi, pods: '110'}}\n"
)
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec: {%scontainers: [{name: c}]}\n"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["simulate", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _write(tmp_path: Path, *docs: str) -> str:
    path = tmp_path / "in.yaml"
    path.write_text("---\n".join(docs))
    return str(path)


def test_a_gitops_folder_runs_and_says_in_one_line_what_it_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(capsys, "-f", str(GITOPS), "-o", "json")
    assert code == 0
    assert err.splitlines() == [
        "skipped 7 objects: 2 ConfigMap, 1 Certificate, 1 CustomResourceDefinition, "
        "1 Kustomization, 1 Secret, 1 ServiceAccount (kinds gpuq does not simulate; --strict refuses them)"
    ]
    pods = {p["name"]: p for p in json.loads(out)["pods"]}
    # The Job and the Deployment are expanded and scheduled; the Namespaces and Queues are read.
    assert {name: pods[name]["phase"] for name in ("finetune-0", "finetune-1", "inference-0")} == {
        "finetune-0": "Bound",
        "finetune-1": "Bound",
        "inference-0": "Bound",
    }
    assert pods["inference-1"]["outlook"] == "wait" and "Queue/team-b" in pods["inference-1"]["reason"]
    assert pods["big-train"]["outlook"] == "never"


def test_strict_refuses_every_foreign_object_naming_the_first_kind_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(capsys, "-f", str(GITOPS), "--strict")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 7  # the Services are simulated (topology spread's system defaults read them)
    assert lines[0] == (
        f"error: {GITOPS / 'kustomization.yaml'} (document 1): kind: invalid value 'Kustomization' "
        "(kustomize.config.k8s.io/v1beta1): --strict takes only the kinds gpuq simulates: Node, Pod, "
        "Namespace, PriorityClass, Service, ReplicationController, Deployment, ReplicaSet, StatefulSet, "
        "Job, Queue, PodGroup, "
        "ElasticQuota, GPUResourceQuota, PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode, "
        "PodDisruptionBudget"
    )
    assert "Traceback" not in err


def test_a_pod_without_scheduler_name_is_reported_not_scheduled(capsys: pytest.CaptureFixture[str]) -> None:
    """As in a cluster: the apiserver sets default-scheduler, and gpuq-scheduler does not take it."""
    code, out, _ = _run(capsys, "-f", str(GITOPS), "-o", "json")
    assert code == 0
    notebook = next(p for p in json.loads(out)["pods"] if p["name"] == "notebook")
    assert notebook["phase"] == "Pending" and notebook["node"] is None and notebook["outlook"] is None
    assert notebook["reason"] == (
        "not scheduled by gpuq: schedulerName default-scheduler (the apiserver's default when "
        "spec.schedulerName is unset), not gpuq-scheduler"
    )


def test_scheduler_name_says_which_pods_simulate_schedules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unset = POD % ("unset", "")
    ours = POD % ("ours", "schedulerName: gpuq-scheduler, ")
    other = POD % ("other", "schedulerName: my-gpuq, ")
    path = _write(tmp_path, NODE, unset, ours, other)
    phases = {}
    for name in ("gpuq-scheduler", "default-scheduler", "my-gpuq"):
        code, out, _ = _run(capsys, "-f", path, "-o", "json", "--scheduler-name", name)
        assert code == 0
        phases[name] = {p["name"]: p["phase"] for p in json.loads(out)["pods"]}
    assert phases["gpuq-scheduler"] == {"ours": "Bound", "unset": "Pending", "other": "Pending"}
    assert phases["default-scheduler"] == {"ours": "Pending", "unset": "Bound", "other": "Pending"}
    assert phases["my-gpuq"] == {"ours": "Pending", "unset": "Pending", "other": "Bound"}


def test_a_volcano_job_without_scheduler_name_is_volcanos(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Volcano's job webhook sets an unset spec.schedulerName to volcano: its pods are not gpuq's."""
    job = (
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n"
        "spec: {tasks: [{name: w, replicas: 1, template: {spec: {containers: [{name: c}]}}}]}\n"
    )
    code, out, _ = _run(capsys, "-f", _write(tmp_path, NODE, job), "-o", "json")
    assert code == 0
    [pod] = json.loads(out)["pods"]
    assert pod["reason"] == "not scheduled by gpuq: schedulerName volcano, not gpuq-scheduler"


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        # kubectl apply: strict decoding error: unknown field "spec.schedulerNmae"
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            "spec: {schedulerNmae: gpuq-scheduler, containers: [{name: c}]}\n",
            "Pod/default/p: spec.schedulerNmae: unknown field",
        ),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ml}\n"
            "spec: {selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, "
            "spec: {schedulerNmae: gpuq-scheduler, containers: [{name: c}]}}}\n",
            "Deployment/ml/d: spec.template.spec.schedulerNmae: unknown field",
        ),
        (
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n"
            "spec: {tasks: [{name: w, replicas: 1, template: {spec: {containers: [{name: c, imagePullPolcy: "
            "Always}]}}}]}\n",
            "Job/default/j: spec.tasks[0].template.spec.containers[0].imagePullPolcy: unknown field",
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: n2, labelz: {a: b}}\n",
            "Node/n2: metadata.labelz: unknown field",
        ),
        (
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\nspec: {finalizerz: []}\n",
            "Namespace/ml: spec.finalizerz: unknown field",
        ),
        (
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: high\n",
            "PriorityClass/high: value: invalid value 'high': expected an integer",
        ),
        # json: cannot unmarshal array into Go struct field PodSpec.spec.nodeSelector
        (
            POD % ("p", "nodeSelector: [a], "),
            "Pod/default/p: spec.nodeSelector: invalid value ['a']: expected a mapping",
        ),
        (
            POD % ("p, labels: {version: 2}", ""),
            "Pod/default/p: metadata.labels[version]: invalid value 2: expected a string",
        ),
        (
            "apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: d}\nspec: {}\n",
            "Deployment/default/d: apiVersion: invalid value 'apps/v1beta1': expected apps/v1",
        ),
        (
            "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: d}\nspec: {}\n",
            "Deployment/default/d: apiVersion: invalid value 'extensions/v1beta1': expected apps/v1",
        ),
    ],
)
def test_built_in_kinds_are_held_to_the_apiservers_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: str, expected: str
) -> None:
    path = _write(tmp_path, NODE, document)
    code, _, err = _run(capsys, "-f", path)
    assert code == 2
    assert err == f"error: {path} (document 2): {expected}\n"


def test_fields_the_apiserver_knows_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fields of Kubernetes 1.36 a hand-written list would miss, and YAML that kubectl reads as strings
    (an unquoted timestamp), are accepted."""
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, creationTimestamp: 2024-01-01T00:00:00Z}\n"
        "spec:\n  schedulerName: gpuq-scheduler\n  hostUsers: false\n  schedulingGates: []\n"
        "  resources: {requests: {cpu: 1}}\n  os: {name: linux}\n"
        "  containers: [{name: c, resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}],"
        " resources: {requests: {cpu: 500m, memory: 1Gi}}}]\n"
    )
    code, out, err = _run(capsys, "-f", _write(tmp_path, NODE, pod), "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["pods"][0]["phase"] == "Bound"


def test_a_crd_of_a_simulated_kind_in_the_input_checks_its_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The input's Queue CRD (a newer Volcano's, say) is the one the apiserver would check Queues with."""
    crd = yaml.safe_load((REPO_ROOT / "deploy" / "crds" / "scheduling.volcano.sh_queues.yaml").read_text())
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["properties"]["priorityTier"] = {"type": "integer"}  # a field the shipped CRD lacks
    queue = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\n"
    queue += "spec: {priorityTier: 2}\n"
    without = _write(tmp_path, NODE, queue)
    code, _, err = _run(capsys, "-f", without)
    assert code == 2 and "Queue/q: spec.priorityTier: unknown field" in err
    with_crd = tmp_path / "with-crd.yaml"
    with_crd.write_text(yaml.safe_dump(crd) + "---\n" + NODE + "---\n" + queue)
    code, _, err = _run(capsys, "-f", str(with_crd), "-o", "json")
    assert (code, err) == (0, "")  # read, not skipped: no summary line


def test_a_kind_of_a_simulated_name_in_another_group_is_named_with_its_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = "apiVersion: example.com/v1\nkind: Queue\nmetadata: {name: q}\n"
    code, _, err = _run(capsys, "-f", _write(tmp_path, NODE, other))
    assert code == 0
    assert err.startswith("skipped 1 object: 1 Queue.example.com ")


def test_a_scheduler_configuration_given_to_f_gets_the_hint_to_use_config(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = _run(capsys, "-f", str(EXAMPLES / "configs"))
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 3
    assert all(
        line.endswith(
            "kind: missing: this is a scheduler configuration (Volcano format), not a Kubernetes object: "
            "pass it with --config FILE"
        )
        for line in lines
    )


EXAMPLE_FOLDERS = [
    *sorted(
        str(path.relative_to(REPO_ROOT))
        for path in EXAMPLES.rglob("*")
        if path.is_dir() and path.name != "configs" and any(path.glob("*.yaml"))
    ),
    "examples/specs",
]


@pytest.mark.parametrize("folder", EXAMPLE_FOLDERS)
def test_every_example_folder_runs(folder: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "-f", str(REPO_ROOT / folder), "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["pods"]


@pytest.mark.parametrize(
    ("config", "cluster"),
    [
        ("no-cards.yaml", "crossquota-gpu-node"),
        ("node-order-weight-2.yaml", "specs/capacity-card/example4-node-order.yaml"),
        ("strategy-fit.yaml", "resource-strategy-fit"),
    ],
)
def test_every_example_configuration_runs(
    config: str, cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(
        capsys, "-f", str(EXAMPLES / cluster), "--config", str(EXAMPLES / "configs" / config), "-o", "json"
    )
    assert (code, err) == (0, "")
    assert any(p["phase"] == "Bound" for p in json.loads(out)["pods"])


def _outcomes(out: dict[str, Any]) -> dict[tuple[str, str], tuple[str, str | None]]:
    return {(p["namespace"], p["name"]): (p["phase"], p["node"]) for p in out["pods"]}


def test_the_specs_folder_runs_each_capacity_card_scenario_as_its_own_file_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/specs is one cluster of the designs' worked examples: names are unique and each
    scenario's pods select its own nodes (gpuq.example/scenario). A card quota is its Queue's, so every
    capacity-card pod ends as in its own file. ElasticQuotas are not so separable: borrowing and
    preemption weigh every quota's min in the cluster, so the capacity-scheduling stories play out as
    written file by file (test_cli_spec_examples.py), and together as one cluster of seven quotas."""
    code, out, _ = _run(capsys, "-f", str(SPECS), "-o", "json")
    assert code == 0
    together = _outcomes(json.loads(out))
    alone: dict[tuple[str, str], tuple[str, str | None]] = {}
    for path in sorted((SPECS / "capacity-card").rglob("*.yaml")):
        code, out, _ = _run(capsys, "-f", str(path), "-o", "json")
        assert code == 0
        alone.update(_outcomes(json.loads(out)))
    assert {key: together[key] for key in alone} == alone
    assert len(alone) > 60
