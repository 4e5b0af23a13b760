"""``gpuq simulate`` expands workloads into the Pods (and PodGroup) their controllers would create
(scheduler/simulate/workloads.py), validates them strictly, and runs the capacity-card design's own
Volcano Job examples as the design says."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.cli import main
from gpuq_k8s.scheduler.simulate.workloads import expand
from tests.testing.builders import MakeNode, MakeQueue
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate, simulate_explained

EXAMPLES = REPO_ROOT / "examples"
JOBS = EXAMPLES / "specs" / "capacity-card" / "volcano-jobs"
NODE = MakeNode("n1").alloc(cpu="64", memory="256Gi", pods="110", **{"nvidia.com/gpu": "8"})
CONTAINER = {"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}
BAD_CPU = {"name": "c", "resources": {"requests": {"cpu": "lots"}}}


def _template(labels: Mapping[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels or {"app": "a"}}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"schedulerName": "gpuq-scheduler", "containers": [CONTAINER]}}


def _apps(kind: str, name: str, replicas: int | None = 2, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": "a"}}, "template": _template()}
    if replicas is not None:
        spec["replicas"] = replicas
    spec.update(extra)
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2024-05-01T10:00:00Z"},
        "spec": spec,
    }


def _volcano(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": "1234",
            "labels": {"team": "a"},
            "annotations": {"volcano.sh/card.request": '{"NVIDIA-A100": 3}'},
        },
        "spec": spec,
    }


def test_apps_workloads_become_their_replicas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = [
        NODE.obj(),
        _apps("Deployment", "web", 3),
        _apps("ReplicaSet", "rs", None),  # replicas defaults to 1
        _apps("StatefulSet", "db", 2),
    ]
    out = simulate(tmp_path, capsys, yaml.safe_dump_all(docs))
    pods = pods_by_name(out)
    assert sorted(pods) == ["db-0", "db-1", "rs-0", "web-0", "web-1", "web-2"]
    assert {p["namespace"] for p in pods.values()} == {"ml"}
    assert {p["phase"] for p in pods.values()} == {"Bound"}


def test_statefulset_ordinals_start_where_asked() -> None:
    made = expand(_apps("StatefulSet", "db", 2, ordinals={"start": 5}))
    assert [p["metadata"]["name"] for p in made if p["kind"] == "Pod"] == ["db-5", "db-6"]


def test_a_pod_made_from_a_template_keeps_its_metadata_and_the_workloads_time() -> None:
    """The StatefulSet itself is kept (topology spread's system defaults select by its selector) and
    owns the pod."""
    statefulset = _apps("StatefulSet", "db", 1)
    made = expand(statefulset)
    assert made == [
        statefulset,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "db-0",
                "namespace": "ml",
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "controller": True}
                ],
                "labels": {"app": "a"},
                "creationTimestamp": "2024-05-01T10:00:00Z",
            },
            "spec": {"schedulerName": "gpuq-scheduler", "containers": [CONTAINER]},
        },
    ]


def test_a_deployments_pods_are_owned_by_the_replicaset_its_controller_makes() -> None:
    """A Deployment's pods belong to a ReplicaSet ``<name>-<hash of the template>`` with the
    Deployment's selector; the same template names the same ReplicaSet."""
    deployment = _apps("Deployment", "web", 2)
    replicaset, *pods = expand(deployment)
    assert replicaset["kind"] == "ReplicaSet" and replicaset["metadata"]["name"].startswith("web-")
    assert replicaset["spec"]["selector"] == deployment["spec"]["selector"]
    assert replicaset["metadata"]["name"] == expand(_apps("Deployment", "web", 5))[0]["metadata"]["name"]
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": replicaset["metadata"]["name"],
        "controller": True,
    }
    assert [p["metadata"]["ownerReferences"] for p in pods] == [[owner], [owner]]


@pytest.mark.parametrize(
    ("parallelism", "completions", "expected"),
    [(None, None, 1), (3, None, 3), (3, 2, 2), (2, 5, 2), (0, 4, 0)],
)
def test_batch_job_runs_min_of_parallelism_and_completions(
    parallelism: int | None, completions: int | None, expected: int
) -> None:
    spec: dict[str, Any] = {"template": _template()}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": spec}
    assert [p["metadata"]["name"] for p in expand(job)] == [f"j-{i}" for i in range(expected)]


def test_volcano_job_becomes_tasks_times_replicas_and_its_podgroup() -> None:
    ps = {"name": "ps", "replicas": 1, "template": _template()}
    worker = {
        "replicas": 2,
        "minAvailable": 1,
        "template": _template(None, **{"volcano.sh/card.name": "NVIDIA-A100"}),
    }
    made = expand(_volcano(queue="team-a", tasks=[ps, worker]))
    group, *pods = made
    assert group == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "train-1234",
            "namespace": "ml",
            "annotations": {"volcano.sh/card.request": '{"NVIDIA-A100": 3}'},
            "labels": {"team": "a"},
        },
        # minAvailable defaults to the sum of the tasks' minAvailable (1 + 1); minResources are the
        # requests of those two pods.
        "spec": {
            "minMember": 2,
            "minTaskMember": {"ps": 1, "default1": 1},
            "queue": "team-a",
            "minResources": {"cpu": "2", "nvidia.com/gpu": "2"},
        },
    }
    assert [p["metadata"]["name"] for p in pods] == ["train-ps-0", "train-default1-0", "train-default1-1"]
    last = pods[-1]["metadata"]
    assert last["annotations"] == {
        "volcano.sh/card.name": "NVIDIA-A100",
        "scheduling.k8s.io/group-name": "train-1234",
        "volcano.sh/job-name": "train",
        "volcano.sh/queue-name": "team-a",
        "volcano.sh/task-spec": "default1",
        "volcano.sh/task-index": "1",
    }


def test_volcano_job_pods_take_the_jobs_scheduler_and_priority_class() -> None:
    own = _template()
    own["spec"] = {**own["spec"], "priorityClassName": "own"}
    tasks = [
        {"name": "a", "replicas": 1, "template": _template()},
        {"name": "b", "replicas": 1, "template": own},
    ]
    _, first, second = expand(_volcano(schedulerName="gpuq-scheduler", priorityClassName="high", tasks=tasks))
    assert (first["spec"]["schedulerName"], first["spec"]["priorityClassName"]) == ("gpuq-scheduler", "high")
    assert second["spec"]["priorityClassName"] == "own"


def test_volcano_job_min_resources_of_the_first_min_available_pods() -> None:
    tasks = [{"name": "w", "replicas": 4, "template": _template()}]
    group = expand(_volcano(minAvailable=3, tasks=tasks))[0]
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["queue"] == "default"
    assert group["spec"]["minResources"] == {"cpu": "3", "nvidia.com/gpu": "3"}


def test_volcano_job_gang_is_scheduled_against_its_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 A100 asked by a job whose queue has 4: the PodGroup stays Pending and can never fit."""
    node = MakeNode("a100").alloc(cpu="64", memory="256Gi", pods="110", **{"nvidia.com/gpu": "8"})
    node = node.product("NVIDIA-A100")
    queue = MakeQueue("team-a").card_quota('{"NVIDIA-A100": 4}').capability(cpu="100", memory="1Ti")
    job = _volcano(queue="team-a", tasks=[{"name": "w", "replicas": 8, "template": _template()}])
    job["metadata"]["annotations"] = {"volcano.sh/card.request": '{"NVIDIA-A100": 8}'}
    out = simulate(tmp_path, capsys, yaml.safe_dump_all([node.obj(), queue.obj(), job]))
    assert out["podGroups"] == [{"namespace": "ml", "name": "train-1234", "phase": "Pending"}]
    pods = pods_by_name(out)
    assert len(pods) == 8
    assert {p["outlook"] for p in pods.values()} == {"never"}
    assert "NVIDIA-A100 limit 4 would have to be at least 8" in pods["train-w-0"]["reason"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            _apps("Deployment", "web", -1),
            "Deployment/ml/web: spec.replicas: invalid value -1: expected a non-negative integer",
        ),
        (
            _apps("Deployment", "web", 1, selector={"matchLabels": {"app": "b"}}),
            "Deployment/ml/web: spec.selector.matchLabels.app: invalid value 'b': "
            "expected to match spec.template.metadata.labels",
        ),
        (
            _apps("StatefulSet", "db", 1, template={"spec": {}}),
            "StatefulSet/ml/db: spec.template.spec.containers: invalid value None: "
            "expected a non-empty list of containers",
        ),
        (
            {**_apps("ReplicaSet", "rs", 1), "apiVersion": "extensions/v1beta1"},
            "ReplicaSet/ml/rs: apiVersion: invalid value 'extensions/v1beta1': expected apps/v1",
        ),
        (
            {"apiVersion": "batch/v2", "kind": "Job", "metadata": {"name": "j"}, "spec": {}},
            "Job/default/j: apiVersion: invalid value 'batch/v2': expected batch/v1",
        ),
        (
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "j"},
                "spec": {"parallelism": "2", "template": _template()},
            },
            # the apiserver's decoding (json: cannot unmarshal string into ... of type int32)
            "Job/default/j: spec.parallelism: invalid value '2': expected an integer",
        ),
        (
            _volcano(tasks=[]),
            "Job/ml/train: spec.tasks: invalid value []: expected a non-empty list of tasks",
        ),
        (_apps("Deployment", "web", 1, replica=3), "Deployment/ml/web: spec.replica: unknown field"),
        ({**_apps("ReplicaSet", "rs", 1), "extra": 1}, "ReplicaSet/ml/rs: extra: unknown field"),
        (
            _apps("StatefulSet", "db", 1, template={**_template(), "labels": {}}),
            "StatefulSet/ml/db: spec.template.labels: unknown field",
        ),
        (
            _volcano(tasks=[{"name": "w", "replica": 1, "template": _template()}]),
            "Job/ml/train: spec.tasks[0].replica: unknown field",
        ),
        (_volcano(queu="q", tasks=[]), "Job/ml/train: spec.queu: unknown field"),
        (
            _volcano(tasks=[{"name": "w", "replicas": 1, "template": _template()}] * 2),
            "Job/ml/train: spec.tasks[1].name: invalid value 'w': expected a name no other task has",
        ),
        (
            _volcano(tasks=[{"name": "w", "replicas": 1, "minAvailable": 2, "template": _template()}]),
            "Job/ml/train: spec.tasks[0].minAvailable: invalid value 2: expected at most replicas (1)",
        ),
        (
            _volcano(minAvailable=5, tasks=[{"name": "w", "replicas": 2, "template": _template()}]),
            "Job/ml/train: spec.minAvailable: invalid value 5: "
            "expected at most the sum of the tasks' replicas",
        ),
        (
            _apps(
                "Deployment",
                "web",
                1,
                template={"metadata": {"labels": ["app"]}, "spec": {"containers": [CONTAINER]}},
            ),
            "Deployment/ml/web: spec.template.metadata.labels: invalid value ['app']: expected a mapping",
        ),
        (
            _volcano(
                tasks=[
                    {
                        "name": "w",
                        "replicas": 1,
                        "template": {"metadata": {"annotations": 5}, "spec": {"containers": [CONTAINER]}},
                    }
                ]
            ),
            "Job/ml/train: spec.tasks[0].template.metadata.annotations: invalid value 5: expected a mapping",
        ),
        (
            _apps("Deployment", "web", 100_000_000),
            "Deployment/ml/web: spec.replicas: invalid value 100000000: "
            "expected at most 100000 pods in one workload (simulate's bound)",
        ),
        (
            _volcano(
                tasks=[
                    {"name": "w", "replicas": 60_000, "template": _template()},
                    {"name": "v", "replicas": 60_000, "template": _template()},
                ]
            ),
            "Job/ml/train: spec.tasks[*].replicas: invalid value 120000: "
            "expected at most 100000 pods in one workload (simulate's bound)",
        ),
        (
            _volcano(
                tasks=[
                    {"name": "w", "replicas": 1, "template": _template()},
                    {"name": "v", "replicas": 1, "template": {"spec": {"containers": [BAD_CPU]}}},
                ]
            ),
            "Job/ml/train: spec.tasks[1].template.spec container c requests[cpu]: invalid value 'lots': "
            "expected a Kubernetes quantity such as 500m, 2, 1.5, 64Gi or 1e3",
        ),
    ],
)
def test_malformed_workloads_are_one_line_errors(
    doc: dict[str, Any], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all([NODE.obj(), doc]))
    assert main(["simulate", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {path} (document 2): {message}\n"


def test_a_made_podgroup_is_held_to_the_crd_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _volcano(queue="team-a", tasks=[{"name": "w", "replicas": 1, "template": _template()}])
    job["spec"]["priorityClassName"] = 7  # the PodGroup's spec.priorityClassName is a string
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all([NODE.obj(), job]))
    assert main(["simulate", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert "made from Job/ml/train: PodGroup/ml/train-1234: spec.priorityClassName" in err


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"team": None}, "metadata.labels[team]: invalid value None: expected a label value"),
        ({1: "a"}, "metadata.labels: invalid value 1: expected a label key"),
    ],
)
def test_a_made_podgroups_labels_are_checked_as_the_apiserver_does(
    labels: dict[Any, Any], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job's labels go to its PodGroup; a label that is not a string is a problem, not a crash."""
    job = _volcano(tasks=[{"name": "w", "replicas": 1, "template": _template()}])
    job["metadata"]["labels"] = labels
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all([NODE.obj(), job]))
    assert main(["simulate", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: {path} (document 2), made from Job/ml/train: PodGroup/ml/train-1234: {message}"
    )


# -- the capacity-card design's own Volcano Job examples -------------------------------------------


def test_design_example1_job_enqueues_and_runs_its_four_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    out = simulate_explained(capsys, "-f", str(JOBS / "example1-basic-quota.yaml"))
    pods = pods_by_name(out)
    assert sorted(pods) == [f"training-default0-{i}" for i in range(4)]
    assert {(p["phase"], p["cardType"]) for p in pods.values()} == {("Bound", "NVIDIA-A100")}
    assert out["podGroups"] == [{"namespace": "default", "name": "training", "phase": "Running"}]
    queue = out["queues"][0]
    assert (queue["name"], queue["allocated"]["NVIDIA-A100"], queue["capability"]["NVIDIA-A100"]) == (
        "vj1-team-a",
        4,
        5,
    )


def test_design_example2_job_takes_a100_first_then_h100(capsys: pytest.CaptureFixture[str]) -> None:
    out = simulate_explained(capsys, "-f", str(JOBS / "example2-multi-card.yaml"))
    pods = pods_by_name(out)
    placed = [pods[f"flexible-training-default0-{i}"]["cardType"] for i in range(4)]
    assert placed == ["NVIDIA-A100"] * 2 + ["NVIDIA-H100"] * 2
    third = pods["flexible-training-default0-2"]["nodes"]["vj2-a100-1"]["filtered"]
    assert (
        "quota exceeded in Queue/vj2-team-a for NVIDIA-A100: requested 1, available 0, used 2, limit 2"
        in third
    )


def test_design_example3_sixteen_pods_share_four_a100_by_mps(capsys: pytest.CaptureFixture[str]) -> None:
    out = simulate_explained(capsys, "-f", str(JOBS / "example3-mps.yaml"))
    pods = pods_by_name(out)
    assert len(pods) == 16
    assert {(p["node"], p["cardType"]) for p in pods.values()} == {
        ("vj3-a100-mps", "NVIDIA-A100/mps-80g*1/8")
    }
    assert out["queues"][0]["allocated"] == {"NVIDIA-A100/mps-80g*1/8": 16}


def test_design_example4_job_scores_a100_200_h100_100_t4_50(capsys: pytest.CaptureFixture[str]) -> None:
    config = str(EXAMPLES / "configs" / "node-order-weight-2.yaml")
    out = simulate_explained(capsys, "-f", str(JOBS / "example4-node-order.yaml"), "--config", config)
    pods = pods_by_name(out)
    nodes = pods["multi-card-training-default0-0"]["nodes"]
    assert {name: n["scores"].get("capacity-card") for name, n in nodes.items()} == {
        "vj4-a100-1": 200,
        "vj4-h100-1": 100,
        "vj4-t4-1": 50,
    }
    assert {p["node"] for p in pods.values()} == {"vj4-a100-1"}
