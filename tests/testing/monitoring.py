"""The monitoring gpuq ships, as queries: the alert rules of the chart's PrometheusRule and the Grafana
dashboard's panel targets and variables (deploy/helm/gpuq/dashboards/gpuq.json), with Grafana's
template variables substituted, and the vector selectors in them (PromQL read just far enough to find
them). tests/unit/deploy/test_monitoring_static.py checks them against the metrics the code exports;
tests/e2e/test_monitoring.py runs them on a real Prometheus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests.testing.paths import REPO_ROOT

REPO: Final = REPO_ROOT
DASHBOARD: Final = REPO / "deploy" / "helm" / "gpuq" / "dashboards" / "gpuq.json"
# Grafana's values for a whole-run look: "All" of a multi-value variable is its allValue (.*).
RATE_INTERVAL: Final = "2m"
# name{matchers} (the name may be absent: {__name__=~"..."}); matcher values never hold braces here.
_SELECTOR: Final = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\{([^{}]*)\}")
_MATCHER: Final = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_LEGEND: Final = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
_ALERT_LABEL: Final = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")
_LABEL_VALUES: Final = re.compile(r"^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$")


@dataclass(frozen=True, slots=True)
class Query:
    """One shipped PromQL expression and the labels every sample of its result must carry."""

    source: str  # "alert GpuqPodsPendingTooLong", "panel 3 (GPU quota usage) A"
    expr: str
    labels: frozenset[str]


@dataclass(frozen=True, slots=True)
class Selector:
    metric: str  # "" when only __name__ matchers name it
    matchers: Mapping[str, tuple[str, str]]  # label -> (operator, value)
    text: str

    @property
    def job(self) -> tuple[str, str] | None:
        return self.matchers.get("job")


def selectors(expr: str) -> list[Selector]:
    found = []
    for match in _SELECTOR.finditer(expr):
        matchers = {m.group(1): (m.group(2), m.group(3)) for m in _MATCHER.finditer(match.group(2))}
        found.append(Selector(match.group(1) or "", matchers, match.group(0)))
    return found


def metric_names(selector: Selector) -> list[str]:
    """The metric names a selector reads: its name, or the alternatives of an ``__name__=~"a|b"``."""
    if selector.metric:
        return [selector.metric]
    operator, value = selector.matchers.get("__name__", ("", ""))
    return value.split("|") if operator in ("=", "=~") and value else []


def prometheus_rules(documents: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A Prometheus rules file (``groups:``) holding the groups of every PrometheusRule."""
    groups = [
        group
        for doc in documents
        if doc and doc.get("kind") == "PrometheusRule"
        for group in doc["spec"]["groups"]
    ]
    return {"groups": groups}


def alert_queries(rules: Mapping[str, Any]) -> list[Query]:
    """Every alert's expression; the labels its annotations name (``$labels.x``) must be on it."""
    queries = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            text = " ".join(str(v) for v in (rule.get("annotations") or {}).values())
            labels = frozenset(_ALERT_LABEL.findall(text))
            queries.append(Query(f"alert {rule['alert']}", str(rule["expr"]).strip(), labels))
    return queries


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def grafana_values(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Each template variable at "All" (its allValue), plus Grafana's interval variables."""
    values = {"__rate_interval": RATE_INTERVAL, "__interval": "15s", "__range": RATE_INTERVAL}
    for variable in dashboard["templating"]["list"]:
        if variable.get("type") == "query":
            values[variable["name"]] = str(variable.get("allValue") or ".*")
    return values


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Grafana's ``$name`` and ``${name}`` (longest names first, so $__rate_interval is not $__r...)."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${{{name}}}", values[name]).replace(f"${name}", values[name])
    return expr


def panel_queries(dashboard: Mapping[str, Any], values: Mapping[str, str] | None = None) -> list[Query]:
    """Every panel target, substituted; the labels its legend shows (``{{x}}``) must be on each sample."""
    values = grafana_values(dashboard) if values is None else values
    return [
        Query(
            f"panel {panel['id']} ({panel['title']}) {target['refId']}",
            substitute(target["expr"], values),
            frozenset(_LEGEND.findall(str(target.get("legendFormat") or ""))),
        )
        for panel in dashboard["panels"]
        for target in panel.get("targets") or ()
    ]


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    series: str  # the series selector of label_values(series, label)
    label: str


def variables(dashboard: Mapping[str, Any]) -> list[Variable]:
    found = []
    for variable in dashboard["templating"]["list"]:
        if variable.get("type") != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = _LABEL_VALUES.match(str(query).strip())
        assert match, f"variable {variable['name']}: not label_values(series, label): {query}"
        found.append(Variable(variable["name"], match.group(1).strip(), match.group(2)))
    return found


def all_queries(rules: Mapping[str, Any], dashboard: Mapping[str, Any]) -> Sequence[Query]:
    return [*alert_queries(rules), *panel_queries(dashboard)]
