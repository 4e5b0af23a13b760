"""kube-scheduler's placement rules as pure functions (design.md "Placement rules"): one concept per
module (label selectors, inter-pod affinity, topology spread, node ports, volumes, ...), read by the
thin plugins of ``scheduler/plugins`` named after kube-scheduler's."""
