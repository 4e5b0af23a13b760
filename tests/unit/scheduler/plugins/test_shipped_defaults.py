"""The configuration gpuq ships (deploy/base, deploy/cert-manager, the chart's values: one text, which
tests/unit/deploy/test_deploy_static.py ties to the built-in default) keeps the designs' promises:

- crossquota's ``gpu-resource-names`` covers every GPU resource card discovery knows (whole cards of
  any vendor, MIG instances, MPS replicas), so a MIG or MPS pod is a GPU pod, never held to the CPU
  pods' share of a GPU node (crossquota.md "Plugin Arguments": the names are regular expressions);
- capacity-card's preference (``A|B``: A first) decides where a card pod goes while the preferred
  card type has room, whatever resource-strategy-fit scores (capacity-card.md "Node Ordering"; the
  default ``nodeOrderWeight`` 100 against resource-strategy-fit's at most 10 x 100).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.common.model.cards.discovery import discover_cards
from gpuq_k8s.common.model.config import SchedulerConfig
from gpuq_k8s.common.model.crossquota.args import CrossQuotaArgs
from gpuq_k8s.common.model.resources import Resources
from tests.testing.builders import MakeNode, MakePod
from tests.testing.paths import REPO_ROOT
from tests.testing.simulate_text import pods_by_name, simulate_explained

DEPLOY = REPO_ROOT / "deploy"


def _config_map(path: Path) -> str:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    (config,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuq-scheduler-config"
    ]
    text: str = config["data"]["config.yaml"]
    return text


SHIPPED = {
    "deploy/base": _config_map(DEPLOY / "base" / "gpuq.yaml"),
    "deploy/cert-manager": _config_map(DEPLOY / "cert-manager" / "gpuq.yaml"),
    "chart values": yaml.safe_load((DEPLOY / "helm" / "gpuq" / "values.yaml").read_text())["scheduler"][
        "config"
    ],
}

# One node of each kind card discovery knows: whole NVIDIA and AMD cards, MIG instances, MPS replicas.
NODES = {
    "nvidia.com/gpu": MakeNode("a100").product("NVIDIA-A100").gpus(8),
    "amd.com/gpu": MakeNode("mi300").product("AMD-MI300X", "amd.com/gpu").gpus(8, "amd.com/gpu"),
    "nvidia.com/mig-1g.10gb": MakeNode("mig").product("NVIDIA-A100").alloc({"nvidia.com/mig-1g.10gb": "7"}),
    "nvidia.com/gpu.shared": MakeNode("mps")
    .product("NVIDIA-A100")
    .labels({"nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.replicas": "8"})
    .alloc({"nvidia.com/gpu.shared": "32"}),
}


def _crossquota(config: str) -> CrossQuotaArgs:
    (plugin,) = [p for p in SchedulerConfig.from_yaml(config).plugins if p.name == "crossquota"]
    assert isinstance(plugin.args, CrossQuotaArgs)
    return plugin.args


@pytest.mark.parametrize("where", sorted(SHIPPED))
@pytest.mark.parametrize("resource", sorted(NODES))
def test_crossquota_gpu_resource_names_cover_every_discovered_card(where: str, resource: str) -> None:
    node = NODES[resource].copy().alloc(cpu="96", memory="1Ti", pods="110").info()
    (card,) = discover_cards(node).cards
    assert card.resource == resource
    args = _crossquota(SHIPPED[where])
    assert args.is_gpu_node(node.allocatable)
    assert not args.is_cpu_pod(Resources({"cpu": 1000, resource: 1000}))


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: list[dict[str, Any]], where: str
) -> dict[str, Any]:
    cluster = _write(tmp_path, "cluster.yaml", yaml.safe_dump_all(docs))
    config = _write(tmp_path, "config.yaml", SHIPPED[where])
    return simulate_explained(capsys, "-f", cluster, "--config", config)


@pytest.mark.parametrize("where", sorted(SHIPPED))
def test_a_mig_pod_is_a_gpu_pod_not_held_to_the_cpu_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """A MIG pod asking more cpu than crossquota's 32 for CPU pods: a GPU pod, so it runs (with
    ``gpu-resource-names: nvidia.com/gpu`` it was refused with "cpu quota exceeded")."""
    node = NODES["nvidia.com/mig-1g.10gb"].copy().alloc(cpu="96", memory="1Ti", pods="110").obj()
    pod = (
        MakePod("notebook", "ml").scheduler("gpuq-scheduler").req(cpu="40").gpus(1, "nvidia.com/mig-1g.10gb")
    )
    pods = pods_by_name(_simulate(tmp_path, capsys, [node, pod.obj()], where))
    assert pods["notebook"]["phase"] == "Bound", pods["notebook"]["reason"]


def _card_nodes(used: dict[str, int], products: list[str]) -> list[dict[str, Any]]:
    """One 8-card node per product; ``used`` cards of a product taken by a running pod."""
    docs: list[dict[str, Any]] = []
    for product in products:
        name = product.lower()
        docs.append(
            MakeNode(name)
            .product(product)
            .labels({"nvidia.com/gpu.memory": "81920"})
            .alloc(cpu="96", memory="1Ti", pods="110")
            .gpus(8)
            .obj()
        )
        if used.get(product):
            running = MakePod(f"running-{name}", "ml").scheduler("gpuq-scheduler").req(cpu="1")
            docs.append(running.gpus(used[product]).node(name).obj())
    return docs


@pytest.mark.parametrize("where", sorted(SHIPPED))
def test_the_preferred_card_wins_while_it_has_room(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """The issue's case: ``NVIDIA-A100|NVIDIA-H100`` with the A100s free and the H100 node 6/8 used.
    resource-strategy-fit (MostAllocated) prefers the fuller H100 node by 875 to 125; the preference
    must still put the pod on the A100 (it went to the H100 with nodeOrderWeight 1.0: 925 vs 225)."""
    docs = _card_nodes({"NVIDIA-H100": 6}, ["NVIDIA-A100", "NVIDIA-H100"])
    pod = (
        MakePod("train", "ml")
        .scheduler("gpuq-scheduler")
        .req(cpu="1")
        .gpus(1)
        .card("NVIDIA-A100|NVIDIA-H100")
    )
    out = pods_by_name(_simulate(tmp_path, capsys, [*docs, pod.obj()], where))["train"]
    assert out["node"] == "nvidia-a100"
    scores = {name: node["scores"] for name, node in out["nodes"].items()}
    assert scores["nvidia-h100"]["resource-strategy-fit"] > scores["nvidia-a100"]["resource-strategy-fit"]


@pytest.mark.parametrize("where", sorted(SHIPPED))
def test_four_alternatives_keep_their_order_against_any_packing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """The documented reach of the default weights: four alternatives, each preferred one empty (its
    resource-strategy-fit score the lowest, 125) and each later one 7/8 used (the highest, 1000):
    the first alternative with room wins every time."""
    products = ["NVIDIA-A100", "NVIDIA-H100", "NVIDIA-L40S", "NVIDIA-T4"]
    card = "|".join(products)
    for first in range(len(products) - 1):
        used = {p: (8 if i < first else 7) for i, p in enumerate(products) if i != first}
        docs = _card_nodes(used, products)
        pod = MakePod("train", "ml").scheduler("gpuq-scheduler").req(cpu="1").gpus(1).card(card)
        case = tmp_path / str(first)
        case.mkdir()
        out = pods_by_name(_simulate(case, capsys, [*docs, pod.obj()], where))["train"]
        assert out["node"] == products[first].lower(), (first, out["nodes"])


@pytest.mark.parametrize("where", sorted(SHIPPED))
def test_without_room_on_the_preferred_card_the_next_one_takes_the_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    docs = _card_nodes({"NVIDIA-A100": 8, "NVIDIA-H100": 6}, ["NVIDIA-A100", "NVIDIA-H100"])
    pod = (
        MakePod("train", "ml")
        .scheduler("gpuq-scheduler")
        .req(cpu="1")
        .gpus(1)
        .card("NVIDIA-A100|NVIDIA-H100")
    )
    assert (
        pods_by_name(_simulate(tmp_path, capsys, [*docs, pod.obj()], where))["train"]["node"] == "nvidia-h100"
    )
