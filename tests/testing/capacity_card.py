"""The capacity-card engine's shared fixtures: a pending pod of queue team-a, the card nodes (two A100
nodes, an H100 and a T4 node, a CPU node) and their catalog, and a QueueLedger with cards already
allocated."""

from __future__ import annotations

from gpuq_k8s.common.model.capacity_card.ledger import QueueLedger
from gpuq_k8s.common.model.cards.catalog import CardCatalog
from gpuq_k8s.common.model.cards.discovery import NodeCards, discover_cards
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.common.model.resources import Resources
from tests.testing.builders import MakeNode, MakePod

# Template (copy before use): a pending pod of queue team-a in namespace ml asking 1 cpu and 1Gi.
POD = MakePod("p", "ml").queue("team-a").req(cpu="1", memory="1Gi")

A1 = discover_cards(MakeNode("a1").product("NVIDIA-A100").alloc(cpu="64").gpus(4).info())
A2 = discover_cards(MakeNode("a2").product("NVIDIA-A100").alloc(cpu="64").gpus(4).info())
H1 = discover_cards(MakeNode("h1").product("NVIDIA-H100").alloc(cpu="64").gpus(8).info())
T1 = discover_cards(MakeNode("t1").product("NVIDIA-T4").alloc(cpu="64").gpus(4).info())
CPU_NODE = NodeCards("c1")
NODES = [A1, A2, H1, T1, CPU_NODE]
CATALOG = CardCatalog.build(NODES)


def card_pod(pod: MakePod, card_name: str | None, gpu: int) -> PodInfo:
    """``pod`` asking ``gpu`` cards (none when 0) of the types ``card_name`` (any when None)."""
    pod = pod if card_name is None else pod.card(card_name)
    return (pod.gpus(gpu) if gpu else pod).info()


def ledger_with(allocated: dict[str, int]) -> QueueLedger:
    ledger = QueueLedger("team-a")
    ledger.reserve("ml/existing", Resources({k: v * 1000 for k, v in allocated.items()}))
    return ledger
