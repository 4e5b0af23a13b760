"""gpuq's monitoring proven on a real Prometheus (Debian's package; see tests/e2e/prometheus.py).

``gpuq scheduler`` and ``gpuq webhook`` run as processes against the real control plane (the apiserver
calls the webhook over TLS), and a run creates bound, pending and preempted pods: a queue's card quota
filled and one card pod over it, a GPUResourceQuota at its worker limit, ElasticQuota borrowing taken
back by preemption, and a Queue the webhook denies. Prometheus scrapes both processes with the scrape
configuration the chart's ServiceMonitors imply and evaluates the chart's PrometheusRule itself.

Then, through Prometheus's HTTP API: the alerts the run should raise fire and the others stay
inactive; EVERY alert expression and EVERY dashboard panel query (read from the shipped files, Grafana
variables at "All") returns the expected shape, each selector in them matches live series, the
dashboard variables list what they should (the quota namespaces, not the release's: honorLabels), and
the new series carry the run's real values.

The chart's defaults wait 10-15 minutes before a quota or pending alert fires; the test renders the
chart with those two values (``monitoring.quotaThresholdFor``, ``monitoring.pendingFor``) at 5s, the
only change to what ships. ``promtool check rules`` checks both rule files.
"""

from __future__ import annotations

import base64
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq_k8s.certs import create_ca, issue_serving_certificate, write_key_pair
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.cluster_fixtures import (
    Cluster,
    SchedulerFactory,
    SchedulerProcess,
    eventually,
    node_of,
    pending_message,
)
from tests.e2e.controlplane.harness import ControlPlane, Kubectl, free_ports
from tests.e2e.manifests import documents, render
from tests.e2e.prometheus import Prometheus, promtool_check_rules, scrape_configs
from tests.e2e.url_webhook import configurations
from tests.testing import monitoring
from tests.testing.builders import MakeElasticQuota, MakeGPUResourceQuota, MakeQueue
from tests.testing.config import scheduler_config

pytestmark = pytest.mark.e2e

cluster = fixtures.cluster
run_scheduler = fixtures.run_scheduler

RELEASE_NAMESPACE = "gpuq-system"
SCHEDULER_JOB = "gpuq-scheduler-metrics"
WEBHOOK_JOB = "gpuq-webhook"
CARD = "NVIDIA-A100-SXM4-80GB"
GPU_NODE = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
CONFIG = scheduler_config(
    "name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: true, nodeOrderWeight: 1.0}",
    "name: capacity-scheduling",
    "name: gpu-quota",
)
SHORT_FOR = ("monitoring.quotaThresholdFor=5s", "monitoring.pendingFor=5s")
FIRING = {"GpuqGPUQuotaNearLimit", "GpuqQueueCardQuotaNearLimit", "GpuqPodsPendingTooLong"}


def chart(*settings: str) -> list[dict[str, Any]]:
    text = render.helm_template(render.find_helm(), ("monitoring.enabled=true", *settings))
    return documents(text)


@pytest.fixture
def webhook_process(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path: Path, cluster: Cluster
) -> Iterator[SchedulerProcess]:
    """``gpuq webhook`` as a process, registered for this test's namespace and labelled Queues only."""
    ca = create_ca("gpuq-e2e-monitoring-ca")
    write_key_pair(
        issue_serving_certificate(ca, ip_addresses=["127.0.0.1"]), tmp_path / "tls.crt", tmp_path / "tls.key"
    )
    (tmp_path / "config.yaml").write_text(CONFIG)
    port, metrics_port = free_ports(2)
    argv = [
        *(sys.executable, "-m", "gpuq_k8s.cli", "webhook", "--kubeconfig", str(control_plane.kubeconfig)),
        *("--tls-cert-file", str(tmp_path / "tls.crt"), "--tls-private-key-file", str(tmp_path / "tls.key")),
        *("--port", str(port), "--metrics-port", str(metrics_port), "--bind-address", "127.0.0.1"),
        *("--config", str(tmp_path / "config.yaml"), "--scheduler-name", f"gpuq-{cluster.test_id}"),
    ]
    process = SchedulerProcess(argv, tmp_path / "webhook.log", metrics_port).start()
    label = (f"gpuq-e2e-{cluster.test_id}", "true")
    prefix = f"gpuq-e2e-{cluster.test_id}"
    try:
        bundle = base64.b64encode(ca.certificate_pem()).decode()
        listing = {"apiVersion": "v1", "kind": "List", "items": configurations(port, bundle, prefix, label)}
        kubectl("create", "-f", "-", stdin=json.dumps(listing))
        kubectl("label", "namespace", cluster.namespace, f"{label[0]}=true")
        yield process
    finally:
        kubectl("delete", "validatingwebhookconfiguration", f"{prefix}-validate", "--ignore-not-found")
        kubectl("delete", "mutatingwebhookconfiguration", f"{prefix}-mutate", "--ignore-not-found")
        process.terminate()


async def test_alerts_and_dashboard_on_a_real_prometheus(
    cluster: Cluster,
    run_scheduler: SchedulerFactory,
    webhook_process: SchedulerProcess,
    kubectl: Kubectl,
    tmp_path: Path,
) -> None:
    rendered = chart(*SHORT_FOR)
    rules = monitoring.prometheus_rules(rendered)
    shipped = yaml.safe_load_all((render.DEPLOY / "monitoring" / "monitoring.yaml").read_text())
    shipped_rules = monitoring.prometheus_rules(shipped)
    for name, content in (("rules.yaml", rules), ("shipped-rules.yaml", shipped_rules)):
        (tmp_path / name).write_text(yaml.safe_dump(content))
        assert "SUCCESS: 8 rules found" in promtool_check_rules(tmp_path / name)

    # The expressions are the ones that ship; only the two `for:` values (and the text naming them) differ.
    def exprs(content: dict[str, Any]) -> list[tuple[str, str, Any]]:
        return [(r["alert"], r["expr"], r["labels"]) for g in content["groups"] for r in g["rules"]]

    assert exprs(rules) == exprs(shipped_rules)

    ns = cluster.namespace
    queue = f"q-{cluster.test_id}"
    await cluster.node(
        "a100", GPU_NODE, labels={"nvidia.com/gpu.product": CARD, "nvidia.com/gpu.memory": "81920"}
    )
    await webhook_process.wait_ready()
    scheduler = run_scheduler(f"gpuq-{cluster.test_id}", CONFIG)
    await scheduler.wait_ready()
    prometheus = Prometheus(
        tmp_path,
        scrape_configs(
            rendered,
            {"gpuq-scheduler": scheduler.metrics_port, "gpuq-webhook": webhook_process.metrics_port},
            RELEASE_NAMESPACE,
        ),
        rules,
    ).start()
    try:
        elastic = await _run(cluster, scheduler, webhook_process, kubectl, queue)

        def logs() -> str:
            return f"{scheduler.log()}\n{webhook_process.log()}\n{prometheus.log()}"

        await _check(prometheus, ns, elastic, queue, logs)
    finally:
        prometheus.stop()
    assert scheduler.terminate() == 0, scheduler.log()
    assert webhook_process.terminate() == 0, webhook_process.log()


async def _run(
    cluster: Cluster, scheduler: SchedulerProcess, webhook: SchedulerProcess, kubectl: Kubectl, queue: str
) -> tuple[str, str]:
    """The run: 2 card pods bound and one over the queue's card quota (pending); the GPUResourceQuota
    at maxWorkers; B's borrowing taken back from it by preemption (2 victims); a Queue denied."""
    ns, name = cluster.namespace, f"gpuq-{cluster.test_id}"
    label = f"gpuq-e2e-{cluster.test_id}"
    queues = "/apis/scheduling.volcano.sh/v1beta1/queues"
    good = MakeQueue(queue).label(label, "true").card_quota(json.dumps({CARD: 2})).weight(1).obj()
    await cluster.create(good, queues)

    async def denied() -> bool:
        bad = MakeQueue(f"bad-{cluster.test_id}").label(label, "true").card_quota('{"X": -1}').obj()
        result = kubectl("create", "-f", "-", stdin=json.dumps(bad), check=False)
        if result.returncode == 0:  # the apiserver had not loaded the configuration yet
            kubectl("delete", "queue", bad["metadata"]["name"])
            return False
        return "denied the request" in result.stderr

    await eventually(denied, 30, "the webhook denies a malformed card quota", webhook.log)
    quota = MakeGPUResourceQuota("gq", ns).total(
        requests={"tflops": "100000", "vram": "1000Gi"},
        limits={"tflops": "100000", "vram": "1000Gi"},
        maxWorkers=2,
    )
    await cluster.create(quota.obj(), f"/apis/tensor-fusion.ai/v1/namespaces/{ns}/gpuresourcequotas")
    ns_a, ns_b = await cluster.extra_namespace("a"), await cluster.extra_namespace("b")
    for space in (ns_a, ns_b):
        path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{space}/elasticquotas"
        await cluster.create(MakeElasticQuota("quota", space).min(cpu="4").max(cpu="8").obj(), path)
    card = {"volcano.sh/card.name": CARD, "scheduling.volcano.sh/queue-name": queue}
    for i in range(3):
        await cluster.pod(
            f"c-{i}",
            {"cpu": "1", "nvidia.com/gpu": "1"},
            limits={"nvidia.com/gpu": "1"},
            annotations=card,
            scheduler=name,
        )
    for i in range(4):
        await cluster.pod(f"b-{i}", {"cpu": "2"}, scheduler=name, namespace=ns_b)

    async def placed(space: str, count: int) -> bool:
        return sum(1 for p in (await cluster.pods(space)).values() if node_of(p)) == count

    await eventually(lambda: placed(ns, 2), 60, "two card pods bound", scheduler.log)
    await eventually(lambda: placed(ns_b, 4), 60, "B borrows: 4 x 2 cpu bound", scheduler.log)
    for i in range(2):
        await cluster.pod(f"a-{i}", {"cpu": "2"}, scheduler=name, namespace=ns_a)

    async def taken_back() -> bool:
        return len(await cluster.pods(ns_b)) == 2 and await placed(ns_a, 2)

    await eventually(taken_back, 60, "A's pods bound after two of B's were preempted", scheduler.log)
    message = await eventually(
        lambda: pending_message(cluster, "c-2", "quota"), 30, "c-2 refused: quota", scheduler.log
    )
    assert f"Queue/{queue}" in message, message
    return ns_a, ns_b


async def _check(
    prometheus: Prometheus, ns: str, elastic: tuple[str, str], queue: str, logs: Callable[[], str]
) -> None:

    async def settled() -> dict[str, tuple[str, str]] | None:
        states = prometheus.alert_states()
        firing = {n for n, (state, _) in states.items() if state == "firing"}
        return states if firing == FIRING else None

    states = await eventually(settled, 90, f"exactly {sorted(FIRING)} firing", logs)
    assert prometheus.targets_up() == {SCHEDULER_JOB: "up", WEBHOOK_JOB: "up"}
    for alert, (state, error) in states.items():
        assert not error, (alert, error)
        assert state == ("firing" if alert in FIRING else "inactive"), (alert, state)

    rules = monitoring.prometheus_rules(chart(*SHORT_FOR))
    dashboard = monitoring.load_dashboard()
    for query in monitoring.all_queries(rules, dashboard):
        # Each selector matches live series of its job: no query can be empty for want of a name.
        for selector in monitoring.selectors(query.expr):
            assert prometheus.query(selector.text), f"{query.source}: {selector.text} matches nothing"
        result = prometheus.query(query.expr)
        alert = query.source.removeprefix("alert ")
        if query.source.startswith("alert ") and alert not in FIRING:
            assert result == [], (query.source, result)  # the condition is false in this run
            continue
        assert result, f"{query.source}: empty\n{query.expr}"
        for sample in result:
            missing = query.labels - set(sample["metric"])
            assert not missing, f"{query.source}: {sample['metric']} lacks {sorted(missing)}"

    # The variables: the run's queue; the quota namespaces by the metrics' own label (honorLabels),
    # never the release namespace of the targets.
    values = {
        v.name: set(prometheus.api(f"label/{v.label}/values", **{"match[]": v.series}))
        for v in monitoring.variables(dashboard)
    }
    assert queue in values["queue"], values
    assert {ns, *elastic} <= values["namespace"], values
    assert RELEASE_NAMESPACE not in values["namespace"], values

    # The new series carry the run's real values.
    job = f'job="{SCHEDULER_JOB}"'
    assert prometheus.value(f'gpuq_queue_pending_pods{{{job}, queue_name="{queue}"}}') == 1
    assert prometheus.value(f"sum(gpuq_preemptions_total{{{job}}})") == 2
    # c-0, c-1, four of B, two of A: every bind, from first seen pending.
    assert prometheus.value(f"sum(gpuq_pod_scheduling_wait_seconds_count{{{job}}})") == 8
    wait = prometheus.value(f"sum(gpuq_pod_scheduling_wait_seconds_sum{{{job}}})")
    assert wait is not None and 0 < wait < 8 * 120
    p99 = prometheus.value(
        f"histogram_quantile(0.99, sum by (le) (gpuq_pod_scheduling_wait_seconds_bucket{{{job}}}))"
    )
    assert p99 is not None and math.isfinite(p99) and p99 > 0
    ratio = prometheus.value(
        f'gpuq_gpu_quota_usage_ratio{{{job}, namespace="{ns}", resource_type="workers"}}'
    )
    assert ratio == 1.0
    denials = prometheus.value(
        f'sum(gpuq_admission_requests_total{{job="{WEBHOOK_JOB}", kind="Queue", allowed="false"}})'
    )
    assert denials is not None and denials >= 1
    versions = {s["metric"]["job"]: s["metric"]["version"] for s in prometheus.query("gpuq_build_info")}
    assert set(versions) == {SCHEDULER_JOB, WEBHOOK_JOB} and len(set(versions.values())) == 1, versions
    # Nothing of kube-scheduler's vocabulary, and no _created series.
    names = set(prometheus.api("label/__name__/values"))
    assert not {n for n in names if n.endswith("_created")}, names
    assert {n for n in names if not n.startswith(("gpuq_", "volcano_queue_card_"))} <= {
        "up",
        "scrape_duration_seconds",
        "scrape_samples_scraped",
        "scrape_samples_post_metric_relabeling",
        "scrape_series_added",
        "ALERTS",
        "ALERTS_FOR_STATE",
    }, names
