"""``spec.nodeName`` as a filter (kube-scheduler's NodeName plugin, v1.36): a pod that names a node fits
only that node. A pod with ``spec.nodeName`` is bound already (kube-scheduler never queues it, nor does
gpuq); the rule matters where a pod is judged against nodes as it stands, as in kube-scheduler's
default profile.
"""

from __future__ import annotations

from typing import Final

# kube-scheduler's ErrReason.
DOES_NOT_MATCH: Final = "node(s) didn't match the requested node name"


def fits(pod_node_name: str, node_name: str) -> bool:
    """Whether a pod whose ``spec.nodeName`` is ``pod_node_name`` fits the node ``node_name``."""
    return not pod_node_name or pod_node_name == node_name
