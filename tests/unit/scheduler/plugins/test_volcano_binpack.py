"""binpack (common/model/binpack.py, scheduler/plugins/binpack.py): the formula against hand-computed
values, the arguments, and the cases of Volcano's ``pkg/scheduler/plugins/binpack/binpack_test.go``
through ``gpuq simulate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuq_k8s.common.model import binpack
from gpuq_k8s.common.model.errors import ConfigError
from tests.testing.config import config_text
from tests.testing.volcano_scenarios import pod, refused, simulate_scenario, volcano_node, volcano_pod

GPU = "nvidia.com/gpu"
FOO = "example.com/foo"

# binpack_test.go TestNode: the arguments of its two cases.
CASE1 = {
    "binpack.weight": 10,
    "binpack.cpu": 2,
    "binpack.memory": 3,
    "binpack.resources": "nvidia.com/gpu, example.com/foo",
    "binpack.resources.nvidia.com/gpu": 7,
    "binpack.resources.example.com/foo": 8,
}
CASE2 = {
    "binpack.weight": 1,
    "binpack.cpu": 1,
    "binpack.memory": 1,
    "binpack.resources": "nvidia.com/gpu",
    "binpack.resources.nvidia.com/gpu": 23,
}


# The test's tier: predicates and binpack (its arguments given per test).
TIER = "predicates, binpack"
ACTIONS = "enqueue, allocate"


def _cluster() -> list[dict[str, Any]]:
    """TestNode's nodes and its two bound pods: p1 (1 cpu, 1Gi) on n1, p2 (1.5 cpu) on n3."""
    return [
        volcano_node("n1", "2", "4Gi").obj(),
        volcano_node("n2", "4", "16Gi", {GPU: "4"}).obj(),
        volcano_node("n3", "2", "4Gi", {FOO: "16"}).obj(),
        volcano_pod("c1", "p1", "1", "1Gi", node="n1").obj(),
        volcano_pod("c1", "p2", "1.5", "0Gi", node="n3").obj(),
    ]


def _scores(out: dict[str, Any], name: str) -> dict[str, float | None]:
    """binpack's score per node for pod ``name``; None where the node was filtered out."""
    nodes = pod(out, name)["nodes"]
    return {n: (None if v["filtered"] else v["scores"]["binpack"]) for n, v in nodes.items()}


# -- the formula ------------------------------------------------------------------------------------


def test_score_by_hand() -> None:
    """cpu 2 of 4 used, the pod asks 1 (weight 2): 3/4*2 = 1.5; memory 1Gi of 16Gi used + 1Gi (weight
    3): 2/16*3 = 0.375; (1.5 + 0.375) / 5 * 100 * 10 = 375."""
    args = binpack.BinpackArgs.parse(CASE1)
    terms = binpack.terms_for(args, {"cpu": 1000, "memory": 2**30, "pods": 1}, {"cpu": 0, "memory": 1})
    allocatable = np.array([[4000, 16 * 2**30]], dtype=np.int64)
    used = np.array([[2000, 2**30]], dtype=np.int64)
    assert binpack.score_nodes(args, terms, allocatable, used).tolist() == [375.0]


def test_overflow_scores_zero_and_missing_resource_keeps_its_weight() -> None:
    """A resource that would go over makes the node 0; one the node lacks scores 0 with its weight
    (cpu 1/2*1 = 0.5, gpu 0 of weight 23: 0.5 / 24 * 100)."""
    args = binpack.BinpackArgs.parse(CASE2)
    terms = binpack.terms_for(args, {"cpu": 1000, GPU: 1000}, {"cpu": 0, GPU: 1})
    allocatable = np.array([[2000, 0], [1000, 0]], dtype=np.int64)
    used = np.array([[0, 0], [500, 0]], dtype=np.int64)
    scores = binpack.score_nodes(args, terms, allocatable, used)
    assert scores.tolist() == [0.5 / 24 * 100, 0.0]


def test_arguments_from_binpack_test_go_test_arguments() -> None:
    """binpack_test.go TestArguments, except example.com/foo: -3 (upstream makes it 1; gpuq refuses)."""
    arguments: dict[str, Any] = {**CASE1, "binpack.cpu": 5, "binpack.memory": 2}
    arguments["binpack.resources.nvidia.com/gpu"] = 7
    arguments["binpack.resources.example.com/foo"] = 1
    args = binpack.BinpackArgs.parse(arguments)
    assert args.weight == 10
    assert args.resource_weights == {"cpu": 5, "memory": 2, GPU: 7, FOO: 1}
    with pytest.raises(ConfigError, match=r"binpack.resources.example.com/foo: invalid value -3"):
        binpack.BinpackArgs.parse({**arguments, "binpack.resources.example.com/foo": -3})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"binpack.weigth": 1}, "binpack.weigth: invalid value 1: expected one of the binpack arguments"),
        ({"binpack.cpu": 1.5}, "binpack.cpu: invalid value 1.5: expected an integer"),
        ({"binpack.resources.x/y": 2}, "expected a weight for a resource listed in binpack.resources"),
        ({"binpack.resources": "cpu"}, "expected extended resources only (cpu: use binpack.cpu)"),
        ({"binpack.weight": -1}, "binpack.weight: invalid value -1"),
    ],
)
def test_invalid_arguments_are_refused_by_name(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        binpack.BinpackArgs.parse(arguments)
    assert message in str(err.value)


def test_weight_zero_switches_scoring_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """binpack.weight 0: no node-order function (upstream: "binpack weight is zero, skip")."""
    objects = [*_cluster(), volcano_pod("c1", "p", "1", "1Gi").obj()]
    out = simulate_scenario(
        tmp_path,
        capsys,
        config_text(TIER, actions=ACTIONS, arguments={"binpack": {"binpack.weight": 0}}),
        objects,
    )
    assert all("binpack" not in v["scores"] for v in pod(out, "p")["nodes"].values())


def test_unknown_argument_stops_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(
        tmp_path, capsys, config_text(TIER, actions=ACTIONS, arguments={"binpack": {"binpack.cpus": 1}})
    )
    assert "binpack.cpus" in err


# -- binpack_test.go TestNode, through gpuq simulate -------------------------------------------------
# Upstream scores each pending pod against every node with p1 on n1 and p2 on n3; here each probe pod
# is scheduled alone on that cluster and --explain gives binpack's score of every node it fits on. A
# node upstream scores 0 because the pod would not fit is filtered out here (None).


@pytest.mark.parametrize(
    ("arguments", "probe", "expected"),
    [
        # case 1 ("single job", weights 10 / cpu 2 / memory 3 / gpu 7 / foo 8)
        (CASE1, ("1", "1Gi", {}), {"n1": 700.0, "n2": 137.5, "n3": None}),
        (CASE1, ("1.5", "0Gi", {}), {"n1": None, "n2": 375.0, "n3": None}),
        (CASE1, ("2", "10Gi", {GPU: "2"}), {"n1": None, "n2": 531.25, "n3": None}),
        # case 2 ("single job", weights 1 / 1 / 1 / gpu 23)
        (CASE2, ("1", "1Gi", {}), {"n1": 75.0, "n2": 15.625, "n3": None}),
        (CASE2, ("1.5", "0Gi", {}), {"n1": None, "n2": 37.5, "n3": None}),
        (CASE2, ("2", "10Gi", {GPU: "2"}), {"n1": None, "n2": 50.5, "n3": None}),
    ],
    ids=["case1-p1", "case1-p2", "case1-p3", "case2-p1", "case2-p2", "case2-p3"],
)
def test_binpack_test_go_test_node(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    arguments: dict[str, Any],
    probe: tuple[str, str, dict[str, str]],
    expected: dict[str, float | None],
) -> None:
    cpu, memory, extended = probe
    pending = volcano_pod("c1", "probe", cpu, memory).req(extended).obj()
    out = simulate_scenario(
        tmp_path,
        capsys,
        config_text(TIER, actions=ACTIONS, arguments={"binpack": arguments}),
        [*_cluster(), pending],
    )
    scores = _scores(out, "probe")
    assert scores.keys() == expected.keys()
    for node, want in expected.items():
        got = scores[node]
        assert (got is None) == (want is None), (node, got)
        if want is not None and got is not None:
            assert abs(got - want) < 1e-8, (node, got, want)
    best = max((s, n) for n, s in expected.items() if s is not None)
    assert pod(out, "probe")["node"] in {n for n, s in expected.items() if s == best[0]}


def test_binpack_test_go_p4_scored_by_the_model() -> None:
    """TestNode case 1, p4 (3 cpu, 4Gi, example.com/foo 3) on n2: 173.076923076. n2 has no foo, so
    the predicates filter it out before binpack scores; the formula is checked on the model."""
    args = binpack.BinpackArgs.parse(CASE1)
    requests = {"cpu": 3000, "memory": 4 * 2**30, FOO: 3000, "pods": 1}
    columns = {"cpu": 0, "memory": 1, FOO: 2}
    terms = binpack.terms_for(args, requests, columns)
    allocatable = np.array([[4000, 16 * 2**30, 0]], dtype=np.int64)
    used = np.zeros((1, 3), dtype=np.int64)
    assert abs(binpack.score_nodes(args, terms, allocatable, used)[0] - 173.076923076) < 1e-8


def test_few_rows_form_gives_the_same_bits() -> None:
    """The row cache mixes the vectorised and the plain-Python forms: they must agree bit for bit."""
    rng = np.random.default_rng(7)
    args = binpack.BinpackArgs.parse(CASE1)
    allocatable = rng.integers(0, 64_000, size=(200, 4)).astype(np.int64)
    used = (allocatable * rng.random((200, 4))).astype(np.int64)
    allocatable[::17, 2] = 0  # nodes without the GPU column
    for requests in ({"cpu": 1500, "memory": 3 * 2**30, "pods": 1}, {"cpu": 250, GPU: 2000, FOO: 1000}):
        terms = binpack.terms_for(args, requests, {"cpu": 0, "memory": 1, GPU: 2, FOO: 3, "pods": 9})
        vectorised = binpack.score_nodes(args, terms, allocatable, used).tolist()
        few = binpack.score_rows(args, terms, zip(allocatable.tolist(), used.tolist(), strict=True))
        assert few == vectorised
