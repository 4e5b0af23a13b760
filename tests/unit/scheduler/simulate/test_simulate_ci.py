"""``gpuq simulate`` in CI (docs/simulate-in-ci.md): ``--fail-on pending|never|rejected`` exits 3 when a
pod ends so, naming it on stderr, after the report; ``--explain`` explains the pods left pending
(``--explain=all`` every pod) and writes its JSON pod by pod, exactly as one document would be."""

from __future__ import annotations

import json

import pytest

from gpuq_k8s.cli import EXIT_FAIL_ON, main
from gpuq_k8s.common.kube.config_file import read_config
from gpuq_k8s.scheduler.plugins import default_registry
from gpuq_k8s.scheduler.simulate.loader import load
from gpuq_k8s.scheduler.simulate.run import node_detail, prepare, report, run, write_json
from tests.testing.paths import REPO_ROOT

GITOPS = str(REPO_ROOT / "tests" / "fixtures" / "gitops")
EXAMPLE = str(REPO_ROOT / "examples" / "heterogeneous-cluster")
SKIPPED = (
    "skipped 7 objects: 2 ConfigMap, 1 Certificate, 1 CustomResourceDefinition, 1 Kustomization, "
    "1 Secret, 1 ServiceAccount (kinds gpuq does not simulate; --strict refuses them)"
)
# In the fixture: inference-1 waits for room in Queue/team-b, big-train can never fit Queue/team-a's
# card quota (and --admission rejects it), the notebook is the default scheduler's.
PENDING_LINE = "--fail-on pending: 2 pods left Pending: Pod/team-a/big-train, Pod/team-b/inference-1"
NEVER_LINE = "--fail-on never: 1 pod left Pending with outlook never: Pod/team-a/big-train"
REJECTED_LINE = "--fail-on rejected: 1 pod rejected by admission: Pod/team-a/big-train"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, list[str]]:
    code = main(["simulate", "-f", GITOPS, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.splitlines()


def test_without_fail_on_pending_pods_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys)
    assert (code, err) == (0, [SKIPPED])


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--fail-on", "pending"), PENDING_LINE),
        (("--fail-on", "never"), NEVER_LINE),
        (("--fail-on", "rejected", "--admission"), REJECTED_LINE),
    ],
)
def test_each_condition_exits_3_naming_the_pods_after_the_report(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], line: str
) -> None:
    code, out, err = _run(capsys, "-o", "json", *args)
    assert code == EXIT_FAIL_ON == 3
    assert err == [SKIPPED, line]
    assert json.loads(out)["pods"]  # the report is written as usual


def test_fail_on_is_repeatable_and_each_condition_met_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--fail-on", "never", "--fail-on", "pending", "--fail-on", "never")
    assert code == 3
    assert err == [SKIPPED, NEVER_LINE, PENDING_LINE]


def test_a_condition_no_pod_meets_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """With --admission big-train is rejected, not pending: nothing can never fit any more."""
    code, _, err = _run(capsys, "--admission", "--fail-on", "never")
    assert (code, err) == (0, [SKIPPED])
    code, _, err = _run(capsys, "--fail-on", "rejected", "--admission", "--scheduler-name", "nobody")
    assert code == 3  # rejection is admission's, whichever scheduler acts


def test_pods_gpuq_does_not_schedule_meet_no_condition(capsys: pytest.CaptureFixture[str]) -> None:
    """The notebook (default-scheduler) is Pending in the report, yet not gpuq's to place."""
    code, out, err = _run(capsys, "-o", "json", "--fail-on", "pending")
    notebook = next(p for p in json.loads(out)["pods"] if p["name"] == "notebook")
    assert notebook["phase"] == "Pending"
    assert "notebook" not in err[-1]
    # Acting as the default scheduler, the notebook is placed, and the pods left pending are
    # gpuq-scheduler's: another scheduler's, so no condition is met.
    code, out, err = _run(
        capsys, "-o", "json", "--fail-on", "pending", "--scheduler-name", "default-scheduler"
    )
    pods = {p["name"]: p["phase"] for p in json.loads(out)["pods"]}
    assert (pods["notebook"], pods["inference-1"]) == ("Bound", "Pending")
    assert (code, err) == (0, [SKIPPED])


def test_fail_on_rejected_without_admission_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--fail-on", "rejected")
    assert (code, out) == (2, "")
    assert err == ["error: --fail-on rejected: nothing is rejected without --admission: add --admission"]


def test_fail_on_refuses_an_unknown_condition(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "-f", GITOPS, "--fail-on", "late"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'late'" in capsys.readouterr().err


def test_explain_details_the_pending_pods_and_explain_all_every_pod(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "-f", EXAMPLE, "-o", "json", "--explain"]) == 0
    pending = json.loads(capsys.readouterr().out)
    assert main(["simulate", "-f", EXAMPLE, "-o", "json", "--explain=all"]) == 0
    every = json.loads(capsys.readouterr().out)
    explained = {p["name"] for p in pending["pods"] if "nodes" in p}
    assert explained == {"notebook-4"}  # big-train's pods never had an attempt: their group waits
    assert all(p["phase"] == "Pending" for p in pending["pods"] if "nodes" in p)
    assert {p["name"] for p in every["pods"] if "nodes" in p} > explained | {"finetune-0"}
    for pod in pending["pods"]:
        if "nodes" in pod:
            assert pod == next(p for p in every["pods"] if p["name"] == pod["name"])


def test_the_streamed_json_is_the_report_as_one_document() -> None:
    manifests = load([EXAMPLE])
    sim = prepare(manifests, read_config(None), default_registry(), explain=True)
    assert not isinstance(sim, list)
    run(sim)
    whole = report(sim, explain="all")
    pieces: list[str] = []
    write_json(report(sim), pieces.append, lambda entry: node_detail(sim, entry))
    assert "".join(pieces) == json.dumps(whole, indent=2) + "\n"
    assert any("nodes" in p for p in whole["pods"])
