"""kube-scheduler's placement rules as pure functions (design.md "Placement rules"): one concept per
module; the plugins of ``scheduler/plugins`` are thin glue over them."""
