"""Cross quota: how much of a GPU node non-GPU ("CPU") pods may take, and where they should go.

Spec: ``crossquota.md`` (Volcano's ``crossquota`` plugin, PR #4551). A *GPU node* has an allocatable
resource matching one of the ``gpu-resource-names`` patterns; a *CPU pod* requests none. On a GPU
node the CPU pods together may use at most the node's *cross quota* of each ``quota-resources``
resource (predicate), and are steered by a most- or least-allocated score against that quota (node
order). Everything else passes the filter and scores 0.

One concept per module, each stating where upstream behaviour is kept on purpose (each pinned by a
test) and where gpuq deliberately differs (design.md Semantics 3, "Scheduler configuration"):

* :mod:`~common.model.crossquota.args`: the plugin arguments and GPU-node / CPU-pod classification;
* :mod:`~common.model.crossquota.node_quota`: a node's cross quota ("Configuration Priority");
* :mod:`~common.model.crossquota.pod`: the pod being scheduled and its scoring strategy annotation;
* :mod:`~common.model.crossquota.predicate`: the predicate over node rows ("Predicate Function");
* :mod:`~common.model.crossquota.score`: the node order ("Node Ordering Function").
"""
