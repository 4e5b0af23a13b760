"""kube-scheduler's scheduling framework as gpuq runs it: one interface per extension point, statuses,
cycle state, the plugin registry and the runtime that runs the plugins (design.md "Layout")."""
