"""The shipped alerts and dashboard, read statically against the metrics the code exports: every query
selects a gpuq job (kube-scheduler's series never mix in), names only metrics gpuq exports, and the
ServiceMonitors honour the metrics' own labels. tests/e2e/test_monitoring.py runs them on Prometheus."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gpuq_k8s.scheduler.metrics import SchedulerMetrics
from gpuq_k8s.webhook.metrics import WebhookMetrics
from tests.testing import monitoring

DEPLOY = monitoring.REPO / "deploy"
RENDERED = [d for d in yaml.safe_load_all((DEPLOY / "monitoring" / "monitoring.yaml").read_text()) if d]
BASE = [d for d in yaml.safe_load_all((DEPLOY / "base" / "gpuq.yaml").read_text()) if d]
RULES = monitoring.prometheus_rules(RENDERED)
DASHBOARD = monitoring.load_dashboard()
QUERIES = monitoring.all_queries(RULES, DASHBOARD)


def _samples(registry: CollectorRegistry) -> set[str]:
    """Every sample name a registry exposes (``_total``, ``_bucket``, ... included)."""
    names = set()
    for family in registry.collect():
        names |= {sample.name for sample in family.samples}
        if family.type == "histogram":
            names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "count", "sum")}
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "gauge":
            names.add(family.name)
    return names


def _jobs() -> dict[str, set[str]]:
    """Prometheus job (the Service a ServiceMonitor selects; the operator's default job label) ->
    the sample names its target exposes."""
    services = {d["metadata"]["name"]: d for d in BASE if d["kind"] == "Service"}
    exposes = {
        "gpuq-scheduler": _samples(SchedulerMetrics().registry),
        "gpuq-webhook": _samples(WebhookMetrics().registry),
    }
    jobs = {}
    for monitor in (d for d in RENDERED if d["kind"] == "ServiceMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [
            name
            for name, svc in services.items()
            if wanted.items() <= svc["metadata"]["labels"].items() and "metrics" in str(svc["spec"]["ports"])
        ]
        jobs[service] = exposes[wanted["app.kubernetes.io/name"]]
    return jobs


JOBS = _jobs()


def test_service_monitors_honour_the_metrics_labels() -> None:
    monitors = [d for d in RENDERED if d["kind"] == "ServiceMonitor"]
    assert len(monitors) == 2
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["honorLabels"] is True, monitor["metadata"]["name"]
    assert set(JOBS) == {"gpuq-scheduler-metrics", "gpuq-webhook"}


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.source)
def test_every_selector_names_a_gpuq_job_and_an_exported_metric(query: monitoring.Query) -> None:
    found = monitoring.selectors(query.expr)
    assert found, query
    for selector in found:
        job = selector.job
        assert job is not None, f"{query.source}: {selector.text} selects no job"
        operator, value = job
        jobs = value.split("|") if operator == "=~" else [value]
        assert operator in ("=", "=~") and set(jobs) <= set(JOBS), (query.source, selector.text)
        for name in monitoring.metric_names(selector):
            if name == "up":
                continue
            assert any(name in JOBS[j] for j in jobs), f"{query.source}: {name} is not exported by {jobs}"


def test_variables_select_gpuq_series_and_the_namespace_one_reads_the_metrics_own_label() -> None:
    found = {v.name: v for v in monitoring.variables(DASHBOARD)}
    assert set(found) == {"queue", "namespace"}
    assert found["queue"].label == "queue_name"
    assert found["namespace"].label == "namespace"
    for variable in found.values():
        (selector,) = monitoring.selectors(variable.series)
        assert selector.job == ("=", "gpuq-scheduler-metrics"), variable
        for name in monitoring.metric_names(selector):
            assert name in JOBS["gpuq-scheduler-metrics"], name
    # The quota series' namespace: never build_info or the scheduler's own series (the release's).
    names = monitoring.metric_names(monitoring.selectors(found["namespace"].series)[0])
    assert set(names) == {"gpuq_gpu_quota_usage_ratio", "gpuq_elastic_quota_used"}


def test_dashboard_covers_every_series_the_design_names() -> None:
    read = {n for q in QUERIES for s in monitoring.selectors(q.expr) for n in monitoring.metric_names(s)}
    for metric in (
        "volcano_queue_card_allocated",
        "volcano_queue_card_capacity",
        "volcano_queue_card_deserved",
        "gpuq_gpu_quota_usage_ratio",
        "gpuq_elastic_quota_used",
        "gpuq_elastic_quota_min",
        "gpuq_elastic_quota_max",
        "gpuq_scheduler_schedule_attempts_total",
        "gpuq_scheduler_scheduling_attempt_duration_seconds_bucket",
        "gpuq_scheduler_framework_extension_point_duration_seconds_bucket",
        "gpuq_scheduler_pending_pods",
        "gpuq_queue_pending_pods",
        "gpuq_pod_scheduling_wait_seconds_bucket",
        "gpuq_preemptions_total",
        "gpuq_build_info",
        "gpuq_admission_requests_total",
        "gpuq_admission_request_duration_seconds_bucket",
        "gpuq_admission_certificate_expiry_timestamp_seconds",
    ):
        assert metric in read, metric
    assert any('allowed="false"' in q.expr for q in QUERIES)  # denials


def test_queries_are_substituted_completely() -> None:
    for query in monitoring.panel_queries(DASHBOARD):
        assert "$" not in query.expr, query


def test_the_alerts_shipped() -> None:
    alerts = [q.source for q in monitoring.alert_queries(RULES)]
    assert alerts == [
        "alert GpuqGPUQuotaNearLimit",
        "alert GpuqQueueCardQuotaNearLimit",
        "alert GpuqPodsPendingTooLong",
        "alert GpuqSchedulingErrors",
        "alert GpuqInternalErrors",
        "alert GpuqSchedulerDown",
        "alert GpuqWebhookDown",
        "alert GpuqWebhookCertificateExpiring",
    ]


def _rule(name: str) -> dict[str, Any]:
    return next(r for g in RULES["groups"] for r in g["rules"] if r.get("alert") == name)


def test_down_alerts_watch_the_jobs_the_service_monitors_make() -> None:
    assert 'up{job="gpuq-scheduler-metrics"}' in _rule("GpuqSchedulerDown")["expr"]
    assert 'up{job="gpuq-webhook"}' in _rule("GpuqWebhookDown")["expr"]
