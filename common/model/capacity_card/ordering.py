"""Node ordering: which node a multi-card pod prefers (capacity-card.md "Node Ordering").

A pod whose ``volcano.sh/card.name`` lists two or more alternatives scores a node
``100 * 0.5**i * nodeOrderWeight`` for the i-th alternative the node has (its most preferred one),
so ``A100|H100|T4`` with weight 2.0 scores 200, 100 and 50; a single card type scores 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from gpuq_k8s.common.model.cards.catalog import CardCatalog

# Upstream's "Node Ordering" base score for the preferred card type.
BASE_SCORE: Final = 100.0

FloatArray = npt.NDArray[np.float64]


def card_type_scores(alternatives: Sequence[str], catalog: CardCatalog, weight: float) -> FloatArray:
    """Per card type id: ``100 * 0.5**i * nodeOrderWeight`` for the i-th alternative, else 0.

    spec "Node Ordering": only multi-card requests (two or more alternatives) score; ``i`` counts
    every alternative as written, including ones no node has.
    """
    scores = np.zeros(len(catalog.names), dtype=np.float64)
    if len(alternatives) < 2:
        return scores
    for i, name in reversed(list(enumerate(alternatives))):
        index = catalog.id_of(name)
        if index is not None:
            scores[index] = BASE_SCORE * 0.5**i * weight
    return scores


def node_order_scores(
    alternatives: Sequence[str], catalog: CardCatalog, has: npt.NDArray[np.bool_], weight: float
) -> FloatArray:
    """The "Node Ordering" score of every node: its most preferred alternative's score, else 0."""
    per_card = card_type_scores(alternatives, catalog, weight)
    if not per_card.any() or has.shape[0] == 0:
        return np.zeros(has.shape[0], dtype=np.float64)
    result: FloatArray = (has * per_card).max(axis=1)
    return result
