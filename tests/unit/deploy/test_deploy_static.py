"""Static checks of deploy/ and the Dockerfile (no docker engine and no cluster needed): the security
posture, probes and grace periods the issue requires, the scheduler config. The dashboard and alerts:
test_monitoring_static.py.
The server-side checks are in tests/e2e/test_deploy.py and test_rbac.py."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gpuq_k8s.certs.flags import CertsOptions
from gpuq_k8s.cli import _parser
from gpuq_k8s.common.model import annotations as ann
from gpuq_k8s.common.model.config import DEFAULT_CONFIG_YAML, SchedulerConfig
from gpuq_k8s.scheduler.flags import SchedulerOptions
from gpuq_k8s.webhook.flags import WebhookOptions
from tests.testing.paths import REPO_ROOT

REPO = REPO_ROOT
DEPLOY = REPO / "deploy"
BASE = [d for d in yaml.safe_load_all((DEPLOY / "base" / "gpuq.yaml").read_text()) if d]
VALUES = yaml.safe_load((DEPLOY / "helm" / "gpuq" / "values.yaml").read_text())


def objects(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in BASE if d["kind"] == kind}


WORKLOADS = {**objects("Deployment"), **{f"job/{k}": v for k, v in objects("Job").items()}}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_pods_run_restricted(name: str) -> None:
    pod = WORKLOADS[name]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert pod["serviceAccountName"].startswith("gpuq-")


@pytest.mark.parametrize(("name", "grace"), [("gpuq-scheduler", 30), ("gpuq-webhook", 20)])
def test_deployments_probe_and_shut_down_gracefully(name: str, grace: int) -> None:
    spec = objects("Deployment")[name]["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_scheduler_runs_with_leader_election_in_its_namespace() -> None:
    args = objects("Deployment")["gpuq-scheduler"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-elect" in args and "--leader-elect-resource-namespace=gpuq-system" in args
    assert "--config=/etc/gpuq/config/config.yaml" in args


@pytest.mark.parametrize("name", ["gpuq-scheduler", "gpuq-webhook"])
def test_both_processes_read_the_one_config_map_and_roll_when_it_changes(name: str) -> None:
    """design.md Semantics 10: one ConfigMap, mounted into both Deployments and passed as --config; the
    same checksum of it on both pod templates, so a changed configuration restarts both."""
    template = objects("Deployment")[name]["spec"]["template"]
    (container,) = template["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["config"]["configMap"] == {"name": "gpuq-scheduler-config"}
    assert f"--config={mounts['config']}/config.yaml" in container["args"]
    config = objects("ConfigMap")["gpuq-scheduler-config"]["data"]["config.yaml"]
    digest = hashlib.sha256(VALUES["scheduler"]["config"].encode()).hexdigest()
    assert template["metadata"]["annotations"]["checksum/config"] == digest
    assert config == VALUES["scheduler"]["config"]


def test_scheduler_config_is_the_built_in_default_and_valid() -> None:
    config = objects("ConfigMap")["gpuq-scheduler-config"]["data"]["config.yaml"]
    assert config.strip() == DEFAULT_CONFIG_YAML.strip() == VALUES["scheduler"]["config"].strip()
    assert SchedulerConfig.from_yaml(config).plugins


def test_webhooks_exclude_their_own_namespace() -> None:
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        (hook,) = objects(kind)["gpuq-webhook"]["webhooks"]
        (expression,) = hook["namespaceSelector"]["matchExpressions"]
        assert expression["operator"] == "NotIn" and {"gpuq-system", "kube-system"} <= set(
            expression["values"]
        )


def _hooks(tree: str) -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / tree / "gpuq.yaml").read_text()) if d]
    kinds = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
    return {d["kind"]: d["webhooks"][0] for d in docs if d["kind"] in kinds}


@pytest.mark.parametrize("tree", ["base", "cert-manager"])
def test_only_what_gpuq_governs_reaches_the_webhooks(tree: str) -> None:
    """Issue 12: one matchCondition lets through the custom resources and the governed Pods only: gpuq's
    schedulerName or an annotation gpuq reads (the code's own annotation names); no GPU-request clause
    while the schedulerName mutation is off."""
    hooks = _hooks(tree)
    assert set(hooks) == {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    for kind, hook in hooks.items():
        (condition,) = hook["matchConditions"]
        expression = condition["expression"]
        assert condition["name"] == "gpuq-governed", kind
        # DRA claims and templates users create, never the claims generated for a Pod (issue 26); then
        # custom resources: all but the UPDATE of one being deleted (finalizers come off while gpuq is down).
        assert " ".join(expression.split()).startswith(
            'request.resource.group == "resource.k8s.io" ? !has(object.metadata.ownerReferences) || '
            'object.metadata.ownerReferences.all(o, o.kind != "Pod") : '
            'request.resource.group != "" ? request.operation != "UPDATE" || '
            "!has(object.metadata.deletionTimestamp) : ("
        ), kind
        # scheduler.name empty: "<fullname>-scheduler", gpuq-scheduler for the release gpuq render.py renders.
        assert VALUES["scheduler"]["name"] == ""
        assert 'object.spec.schedulerName == "gpuq-scheduler"' in expression, kind
        for key in (ann.CARD_NAME, ann.GROUP_NAME, ann.QUEUE_NAME, ann.CROSSQUOTA_SCORING_STRATEGY):
            assert f'"{key}"' in expression, (kind, key)
        prefixes = [
            p
            for p in ("tensor-fusion.ai/", "volcano.sh/resource-strategy-")
            if f'k.startsWith("{p}")' in expression
        ]
        prefixed = (
            *ann.TENSOR_FUSION_ANNOTATIONS,
            ann.RESOURCE_STRATEGY_SCORING_TYPE,
            ann.RESOURCE_STRATEGY_WEIGHT,
        )
        for key in prefixed:
            assert any(key.startswith(p) for p in prefixes), (kind, key)
        assert "nvidia.com/gpu" not in expression, kind  # setSchedulerName is off by default
        pods = [r for r in hook["rules"] if r["apiGroups"] == [""]]
        assert pods == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
    # Fail: a governed object is never admitted unchecked; the scope keeps an outage to gpuq's objects.
    # Ignore: the mutation only fills conveniences, and the validation after it does not rely on them.
    assert hooks["ValidatingWebhookConfiguration"]["failurePolicy"] == "Fail"
    assert hooks["MutatingWebhookConfiguration"]["failurePolicy"] == "Ignore"
    validated = {g for r in hooks["ValidatingWebhookConfiguration"]["rules"] for g in r["apiGroups"]}
    assert validated == {
        "",
        "scheduling.volcano.sh",
        "scheduling.x-k8s.io",
        "tensor-fusion.ai",
        "resource.k8s.io",
    }
    (claims,) = [
        r for r in hooks["ValidatingWebhookConfiguration"]["rules"] if r["apiGroups"] == ["resource.k8s.io"]
    ]
    assert claims["operations"] == ["CREATE"]  # their spec is immutable
    assert claims["resources"] == ["resourceclaims", "resourceclaimtemplates"]


def test_secrets_are_touched_only_by_the_certificate_writers_and_only_their_own() -> None:
    """The scheduler never touches a Secret. The certificate Job and the webhook (which renews its
    certificates) may, through namespaced Roles only, and only the two certificate Secrets by name
    (create cannot be limited by name)."""
    bound = {
        b["roleRef"]["name"]: b["subjects"][0]["name"]
        for b in [*objects("ClusterRoleBinding").values(), *objects("RoleBinding").values()]
    }
    roles = {**objects("ClusterRole"), **objects("Role")}
    for role, account in bound.items():
        rules = [rule for rule in roles[role]["rules"] if "secrets" in rule.get("resources", [])]
        if account == "gpuq-scheduler":
            assert not rules, role
        for rule in rules:
            assert role in objects("Role"), f"{role}: Secrets through a ClusterRole"
            assert rule["verbs"] == ["create"] or (
                set(rule["resourceNames"]) <= {"gpuq-webhook-tls", "gpuq-webhook-ca"}
            ), (role, rule)


DOCKERFILE = (REPO / "Dockerfile").read_text()
INSTRUCTIONS = [
    line.split(None, 1)
    for line in re.sub(r"\\\n", " ", DOCKERFILE).splitlines()
    if line and not line.startswith("#")
]


def test_dockerfile_is_pinned_slim_non_root_and_fetches_nothing_remote() -> None:
    """Checked statically: no docker engine runs on the test machines."""
    bases = [args for op, args in INSTRUCTIONS if op == "FROM"]
    assert bases and all(re.match(r"python:3\.11\.\d+-slim", b) for b in bases), bases
    users = [args for op, args in INSTRUCTIONS if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert users[-1].split(":")[0].isdigit()  # runAsNonRoot can only verify a numeric uid
    assert not [args for op, args in INSTRUCTIONS if op == "ADD"]
    assert "PYTHONDONTWRITEBYTECODE=1" in DOCKERFILE
    assert INSTRUCTIONS[-2][0] == "ENTRYPOINT" and "gpuq" in INSTRUCTIONS[-2][1]


# Maps whose keys are the user's (resources, labels, selectors): one row for the whole map.
_OPAQUE = {
    "scheduler.resources",
    "webhook.resources",
    "monitoring.dashboard.labels",
    "monitoring.serviceMonitorLabels",
    "certManager.issuerRef",
    "scheduler.nodeSelector",
    "webhook.nodeSelector",
    "certs.resources",
    *(
        f"{component}.{key}"
        for component in ("scheduler", "webhook", "certs")
        for key in ("securityContext", "containerSecurityContext")
    ),
}


def _value_keys(values: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in _OPAQUE:
            keys += _value_keys(value, f"{path}.")
        else:
            keys.append(path)
    return keys


def test_chart_readme_documents_every_value_and_the_schema_every_key() -> None:
    chart = DEPLOY / "helm" / "gpuq"
    table = (chart / "README.md").read_text().split("## Values", 1)[1]
    documented = re.findall(r"^\| `([^`]+)` \|", table, flags=re.M)
    assert documented == _value_keys(VALUES)
    schema = json.loads((chart / "values.schema.json").read_text())
    for key in documented:
        node = schema
        for part in key.split("."):
            assert part in node.get("properties", {}), f"{key}: not in values.schema.json"
            node = node["properties"][part]


@pytest.mark.parametrize("tree", ["base", "cert-manager"])
def test_every_process_gets_arguments_its_options_accept_and_logs_json(tree: str) -> None:
    """The chart's arguments are read by the same code as a user's (common/process/flags.py): each
    container's args parse and check (no I/O) into its command's options, and both long-running
    processes log JSON lines (issue 27: the webhook logged plain text)."""
    docs = [d for d in yaml.safe_load_all((DEPLOY / tree / "gpuq.yaml").read_text()) if d]
    options: dict[str, Any] = {}
    for doc in docs:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            args = _parser().parse_args(container["args"])
            read: dict[str, Callable[[argparse.Namespace], object]] = {
                "scheduler": SchedulerOptions.from_args,
                "webhook": WebhookOptions.from_args,
                "certs": CertsOptions.from_args,
            }
            options[args.command] = read[args.command](args)
    assert set(options) == ({"scheduler", "webhook", "certs"} if tree == "base" else {"scheduler", "webhook"})
    assert options["scheduler"].log.format == options["webhook"].log.format == "json"
    assert options["scheduler"].log.format == VALUES["scheduler"]["logFormat"]
    assert options["webhook"].log.format == VALUES["webhook"]["logFormat"]
    assert options["webhook"].serving.metrics_port == VALUES["webhook"]["metricsPort"]
    assert options["scheduler"].leader_elect and options["scheduler"].timings.lease_duration == 15


def test_chart_readme_and_notes_links_work_in_the_packaged_chart() -> None:
    """Issue 27: a link relative to the repository (../../../docs/install.md) breaks inside the packaged
    chart (`helm show readme`, Artifact Hub). Every link of the README is absolute, to a file of this
    repository at the chart's home (Chart.yaml), as is every URL of the NOTES."""
    chart = DEPLOY / "helm" / "gpuq"
    home = yaml.safe_load((chart / "Chart.yaml").read_text())["home"]
    readme = (chart / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    urls = re.findall(
        r"https://github\.com/\S+?(?=[\s),]|$)", (chart / "templates" / "NOTES.txt").read_text()
    )
    assert links and urls
    for link in [*links, *urls]:
        assert link.startswith(f"{home}/blob/main/"), link
        assert (REPO / link.removeprefix(f"{home}/blob/main/").split("#")[0]).is_file(), link
