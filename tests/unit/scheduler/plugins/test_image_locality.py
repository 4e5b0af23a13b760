"""ImageLocality (scheduler/plugins/image_locality.py over common/model/placement/image_locality.py),
``nodeorder``'s ``imagelocality.weight``. Ported from kube-scheduler v1.36
``framework/plugins/imagelocality/image_locality_test.go``: TestImageLocalityPriority (each case's
scores, through the plugin's vectorised Score) and TestNormalizedImageName."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.model.nodes import NodeInfo
from gpuq_k8s.common.model.pod_spec import normalized_image_name
from gpuq_k8s.scheduler.framework.cycle_state import CycleState
from gpuq_k8s.scheduler.plugins.image_locality import ImageLocality
from tests.testing.builders import MakeNode, MakePod
from tests.testing.config import config_text
from tests.testing.scheduler import make_scheduler

MB = 1024 * 1024

Image = tuple[tuple[str, ...], int]  # (names, size in MB)


def image_node(name: str, *images: Image) -> MakeNode:
    node = MakeNode(name).alloc(cpu="4", pods="10")
    node._obj["status"]["images"] = [{"names": list(names), "sizeBytes": size * MB} for names, size in images]
    return node


NODE_403002000 = (
    (("gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"), 40),
    (("gcr.io/300:latest", "gcr.io/300:v1"), 300),
    (("gcr.io/2000:latest",), 2000),
)
NODE_25010 = ((("gcr.io/250:latest",), 250), (("gcr.io/10:latest", "gcr.io/10:v1"), 10))
NODE_60040900 = ((("gcr.io/600:latest",), 600), (("gcr.io/40:latest",), 40), (("gcr.io/900:latest",), 900))
NODE_300600900 = ((("gcr.io/300:latest",), 300), (("gcr.io/600:latest",), 600), (("gcr.io/900:latest",), 900))
NODE_400030 = ((("gcr.io/4000:latest",), 4000), (("gcr.io/30:latest",), 30))
NODE_203040 = ((("gcr.io/20:latest",), 20), (("gcr.io/30:latest",), 30), (("gcr.io/40:latest",), 40))


def pod(*images: str, init: tuple[str, ...] = (), volumes: tuple[str, ...] = ()) -> MakePod:
    made = MakePod("p")
    spec: dict[str, Any] = made._obj["spec"]
    spec["containers"] = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "image": image} for i, image in enumerate(init)]
    if volumes:
        spec["volumes"] = [{"name": f"v{i}", "image": {"reference": ref}} for i, ref in enumerate(volumes)]
    return made


Nodes = list[tuple[str, tuple[Image, ...]]]

# TestImageLocalityPriority: (name, pod, nodes (name, images), expected scores)
CASES: list[tuple[str, MakePod, Nodes, list[int]]] = [
    ("two images spread on two nodes, prefer the larger image one", pod("gcr.io/40", "gcr.io/250"),
     [("node1", NODE_403002000), ("node2", NODE_25010)], [0, 5]),
    ("two images on one node, prefer this node", pod("gcr.io/40", "gcr.io/300"),
     [("node1", NODE_403002000), ("node2", NODE_25010)], [7, 0]),
    ("if exceed limit, use limit", pod("gcr.io/10", "gcr.io/4000"),
     [("node1", NODE_400030), ("node2", NODE_25010)], [100, 0]),
    ("if exceed limit, use limit (with node which has no images present)", pod("gcr.io/10", "gcr.io/4000"),
     [("node1", NODE_400030), ("node2", NODE_25010), ("node3", ())], [66, 0, 0]),
    ("pod with multiple large images, node2 is preferred", pod("gcr.io/300", "gcr.io/600", "gcr.io/900"),
     [("node1", NODE_60040900), ("node2", NODE_300600900), ("node3", ())], [32, 36, 0]),
    ("pod with multiple small images", pod("gcr.io/30", "gcr.io/40"),
     [("node1", NODE_203040), ("node2", NODE_400030)], [1, 0]),
    ("pod with ImageVolume", pod("gcr.io/30", volumes=("gcr.io/300",)),
     [("node1", NODE_300600900), ("node2", NODE_400030)], [12, 0]),
    ("include InitContainers: two images spread on two nodes, prefer the larger image one",
     pod("gcr.io/30", init=("gcr.io/300",)), [("node1", NODE_403002000), ("node2", NODE_203040)], [6, 0]),
]  # fmt: skip


def _plugin(nodes: Nodes, weight: int = 1) -> tuple[ImageLocality, list[int]]:
    config = config_text(
        "priority, gang",
        ["predicates", "nodeorder"],
        arguments={"nodeorder": {"imagelocality.weight": weight}},
    )
    sched, _ = make_scheduler(config=config)
    for name, images in nodes:
        sched.set_node(image_node(name, *images).info())
    plugin = sched.framework.plugin(plugin_names.IMAGE_LOCALITY)
    assert isinstance(plugin, ImageLocality)
    return plugin, [sched.cluster.row_of[name] for name, _ in nodes]


@pytest.mark.parametrize(("name", "pod", "nodes", "expected"), CASES, ids=[c[0] for c in CASES])
def test_image_locality_priority(name: str, pod: MakePod, nodes: Nodes, expected: list[int]) -> None:
    plugin, rows = _plugin(nodes)
    scores = plugin.score(CycleState(), pod.info(), np.ones(len(rows), dtype=np.bool_))
    assert [int(scores[row]) for row in rows] == expected


def test_the_weight_multiplies_and_zero_builds_no_scorer() -> None:
    _, made, nodes, expected = CASES[4]
    plugin, rows = _plugin(nodes, weight=3)
    scores = plugin.score(CycleState(), made.info(), np.ones(len(rows), dtype=np.bool_))
    assert [int(scores[row]) for row in rows] == [3 * e for e in expected]
    config = config_text(
        "priority, gang", ["predicates", "nodeorder"], arguments={"nodeorder": {"imagelocality.weight": 0}}
    )
    sched, _ = make_scheduler(config=config)
    assert sched.framework.plugin(plugin_names.IMAGE_LOCALITY) is None


def test_images_follow_the_nodes() -> None:
    """A node that loses an image, or leaves, no longer counts for it (its spread shrinks too)."""
    plugin, rows = _plugin([("node1", NODE_400030), ("node2", NODE_400030)])
    big = pod("gcr.io/4000", "gcr.io/x").info()
    feasible = np.ones(2, dtype=np.bool_)
    assert [int(plugin.score(CycleState(), big, feasible)[r]) for r in rows] == [100, 100]
    cluster = plugin.handle.cluster
    cluster.set_node(image_node("node2", (("gcr.io/30:latest",), 30)).info())
    # 4000M x 1/2 = 2000M: the max for two containers.
    assert [int(plugin.score(CycleState(), big, feasible)[r]) for r in rows] == [100, 0]
    cluster.remove_node("node2")
    assert int(plugin.score(CycleState(), big, feasible)[rows[0]]) == 100


# TestNormalizedImageName
NAMES = [
    ("add :latest postfix 1", "root", "root:latest"),
    ("add :latest postfix 2", "gcr.io:5000/root", "gcr.io:5000/root:latest"),
    ("keep it as is 1", "root:tag", "root:tag"),
    ("keep it as is 2", "root@sha256:" + "a" * 64, "root@sha256:" + "a" * 64),
]


@pytest.mark.parametrize(("name", "given", "normalized"), NAMES, ids=[c[0] for c in NAMES])
def test_normalized_image_name(name: str, given: str, normalized: str) -> None:
    assert normalized_image_name(given) == normalized


def test_a_malformed_image_list_names_the_node_and_field() -> None:
    obj = MakeNode("n1").obj()
    obj["status"]["images"] = [{"names": ["a"], "sizeBytes": "big"}]
    with pytest.raises(InvalidValue, match=r"Node/n1: status.images\[0\].sizeBytes: invalid value 'big'"):
        NodeInfo.from_dict(obj)
