"""ImageLocality (kube-scheduler's scorer of that name): nodes that hold the pod's images score higher
(:mod:`common.model.placement.image_locality`), weighted by ``nodeorder``'s ``imagelocality.weight``
(Volcano's default 1; 0 builds no scorer).

Which rows hold each image and how many live nodes hold it are kept as a
:class:`~scheduler.cluster.state.ClusterListener` from the nodes' ``status.images``; the score of a pod's
image list is computed once over all rows and kept until a node comes, goes or changes its images (a
pod of a workload asks the same images as its siblings). A pod whose images no node holds scores 0
everywhere without a pass over the rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Final

import numpy as np

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.placement.image_locality import priority, scaled_image_score
from gpuq_k8s.common.model.pods import PodInfo
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.framework.interfaces import BoolArray, FloatArray, Handle, ScorePlugin

# Image lists remembered; beyond this the cache starts over.
_MAX_CLASSES: Final = 256


class ImageLocality(ScorePlugin):
    name = plugin_names.IMAGE_LOCALITY

    def __init__(self, handle: Handle, weight: int = 1) -> None:
        super().__init__(handle)
        self.weight = weight
        self._rows_of: dict[str, set[int]] = {}  # image name -> rows holding it
        self._size: dict[str, int] = {}  # image name -> size (as the first node reporting it said)
        self._held: dict[int, NodeInfo] = {}  # row -> the node whose images the row counts
        self._scores: dict[tuple[tuple[str, ...], int], FloatArray] = {}
        self._generation = 0
        self._scored_at = -1
        handle.cluster.subscribe(self)

    # -- ClusterListener ----------------------------------------------------------------------------
    def node_changed(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        before = self._held.pop(row, None)
        if before is not None:
            for image in before.images:
                rows = self._rows_of[image]
                rows.discard(row)
                if not rows:
                    del self._rows_of[image], self._size[image]
        if new is not None:
            self._held[row] = new
            for image, size in new.images.items():
                self._rows_of.setdefault(image, set()).add(row)
                self._size.setdefault(image, size)
        self._generation += 1

    def pod_added(self, pod: PodInfo, row: int) -> None:
        pass

    def pods_added(self, pods: Sequence[PodInfo], rows: Sequence[int]) -> None:
        pass

    def pod_removed(self, pod: PodInfo, row: int) -> None:
        pass

    # -- scoring ------------------------------------------------------------------------------------
    def score(self, state: CycleState, pod: PodInfo, feasible: BoolArray) -> FloatArray:
        cluster = self.handle.cluster
        n = cluster.n
        if self._scored_at != self._generation or len(self._scores) >= _MAX_CLASSES:
            self._scores.clear()
            self._scored_at = self._generation
        key = (pod.images, pod.container_count)
        scores = self._scores.get(key)
        if scores is None or scores.shape[0] != n:
            scores = self._scores[key] = self._compute(pod, n)
        return scores

    def _compute(self, pod: PodInfo, n: int) -> FloatArray:
        cluster = self.handle.cluster
        all_nodes = cluster.node_count
        alive = cluster.alive
        sums = np.zeros(n, dtype=np.int64)
        for image, times in Counter(pod.images).items():
            # Live nodes only: a node deleted under its pods (a ghost row) holds nothing any more.
            holding = [row for row in self._rows_of.get(image, ()) if row < n and alive[row]]
            if holding:
                sums[holding] += times * scaled_image_score(self._size[image], len(holding), all_nodes)
        weighted: FloatArray = (priority(sums, pod.container_count) * self.weight).astype(np.float64)
        return weighted
