"""The differential test of issue 23: one seeded workload, scheduled once by kube-scheduler and once by
gpuq, each on an identical fresh control plane, every bind checked by an independent checker.

* :mod:`.workload`: the seeded generator (every placement rule kind, priorities, a PDB, gates);
* :mod:`.checker`: the rule checker (its own code, none of gpuq's model);
* :mod:`.run`: one run against a fresh control plane (kube-controller-manager's PV binder running),
  its pod watch history and final objects;
* :mod:`.compare`: the pods kube-scheduler bound and gpuq left pending, with their reasons;
* ``python -m tests.e2e.differential``: the script for larger seeds and sizes.
"""
