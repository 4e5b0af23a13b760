"""Settings every test shares.

Hypothesis: the suite runs on a shared 2-core CI machine next to kube-apiserver and etcd, where a
property's first examples can be slow for reasons that are not the code's (a loaded machine, a cold
import). Hypothesis's wall-clock checks (the per-example ``deadline``, the ``too_slow`` and
``large_base_example`` health checks) would then fail a correct property, so they are off for the whole
suite; what a property asserts, and how many examples it runs, is unchanged.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "gpuq",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)
settings.load_profile("gpuq")
