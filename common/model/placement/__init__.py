"""kube-scheduler's placement rules as pure functions (design.md "Placement rules"): one concept per
module, read by the thin plugins of ``scheduler/plugins`` named after kube-scheduler's."""
