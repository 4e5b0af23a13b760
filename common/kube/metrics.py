"""What the scheduler's and the webhook's metric registries share (design.md "Metrics"): no
``_created`` series, and ``gpuq_build_info{version}``."""

from __future__ import annotations

import importlib.metadata

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics

disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide: counters, histograms


def gpuq_version() -> str:
    """The installed distribution's version."""
    try:
        return importlib.metadata.version("gpuq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def register_build_info(registry: CollectorRegistry) -> None:
    """``gpuq_build_info{version} 1`` in ``registry``."""
    info = Gauge("gpuq_build_info", "Always 1; the running gpuq version.", ["version"], registry=registry)
    info.labels(gpuq_version()).set(1)
