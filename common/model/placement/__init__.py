"""kube-scheduler's placement rules as pure functions (design.md "Placement rules"): label selectors,
inter-pod affinity, topology spread. The plugins in ``scheduler/plugins`` are thin glue over them."""
