"""kube-scheduler's placement rules as pure functions (design.md "Placement rules"), one concept per
module; the thin plugins over them are in ``scheduler/plugins``.

* :mod:`.label_selector`: ``metav1.LabelSelector`` semantics, shared by every rule that selects pods
  by label (PodDisruptionBudgets, inter-pod affinity, topology spread).
"""
