"""Webhook metrics (design.md, "Metrics"), in a registry of their own so tests can build many apps.

Every name starts with ``gpuq_``; no ``_created`` series.

``kind`` is bounded to the kinds gpuq reviews plus ``other``: the label comes from the request and an
unbounded label would let any client grow the metric without limit.
"""

from __future__ import annotations

import functools
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuq_k8s.common.kube.metrics import register_build_info
from gpuq_k8s.common.model import kinds

REVIEWED_KINDS: Final = frozenset(
    k.kind for k in (kinds.POD, kinds.POD_GROUP, kinds.QUEUE, kinds.ELASTIC_QUOTA, kinds.GPU_RESOURCE_QUOTA)
)
OPERATIONS: Final = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
# Admission answers take tens of microseconds; the apiserver gives up after timeoutSeconds (10 s).
_BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0)


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        counter = functools.partial(Counter, registry=self.registry)
        self.requests = counter(
            "gpuq_admission_requests",
            "AdmissionReviews answered, by kind, operation and whether the object was allowed.",
            ["kind", "operation", "allowed"],
        )
        self.duration = Histogram(
            "gpuq_admission_request_duration_seconds",
            "Time from the request body read to the AdmissionReview answer.",
            ["endpoint"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.malformed = counter(
            "gpuq_admission_malformed_requests",
            "Request bodies answered with HTTP 4xx (not an AdmissionReview, too large, too slow).",
            ["reason"],
        )
        self.errors = counter(
            "gpuq_admission_internal_errors",
            "Reviews whose evaluation raised an unexpected error (answered as a denial; see the log).",
        )
        self.certificate_expiry = Gauge(
            "gpuq_admission_certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate in use, as a Unix time.",
            registry=self.registry,
        )
        self.certificate_reloads = counter(
            "gpuq_admission_certificate_reloads",
            "Serving certificate pairs loaded after a change (of the TLS Secret, or of the mounted files).",
        )
        register_build_info(self.registry)
        self._children: dict[tuple[str, str, bool], Counter] = {}
        self.validate_duration = self.duration.labels("validate")
        self.mutate_duration = self.duration.labels("mutate")

    def count(self, kind: str, operation: str, allowed: bool) -> None:
        key = (kind, operation, allowed)
        child = self._children.get(key)
        if child is None:
            child = self.requests.labels(
                kind if kind in REVIEWED_KINDS else "other",
                operation if operation in OPERATIONS else "other",
                "true" if allowed else "false",
            )
            if len(self._children) < 1024:
                self._children[key] = child
        child.inc()
