"""A real Prometheus for the e2e tests: Debian's ``prometheus`` binary (.ci/run installs the package and
never starts its service) on loopback, with a generated configuration and a temporary storage directory.

The scrape configuration is derived from the chart's ServiceMonitors as prometheus-operator derives it:
the job is the selected Service's name, ``honor_labels`` and the path come from the endpoint, and the
target carries the labels Kubernetes service discovery would give it (the release namespace among
them), so ``honorLabels`` is tested for what it is for. Only the targets are static (127.0.0.1).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.controlplane.harness import free_ports

SCRAPE_INTERVAL = "1s"
EVALUATION_INTERVAL = "1s"


def binary(name: str) -> str:
    found = shutil.which(name)
    assert found, (
        f"{name} not found: install Debian's prometheus package (.ci/run does: apt-get install prometheus)"
    )
    return found


def scrape_configs(
    documents: Sequence[Mapping[str, Any]], targets: Mapping[str, int], namespace: str
) -> list[dict[str, Any]]:
    """One scrape job per ServiceMonitor in ``documents``; ``targets`` maps a Service's
    ``app.kubernetes.io/name`` (its ServiceMonitor's selector) to the loopback port serving it."""
    services = [d for d in documents if d.get("kind") == "Service"]
    jobs = []
    for monitor in (d for d in documents if d.get("kind") == "ServiceMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [
            s
            for s in services
            if wanted.items() <= (s["metadata"].get("labels") or {}).items()
            and any(p.get("name") == "metrics" for p in s["spec"]["ports"])
        ]
        (endpoint,) = monitor["spec"]["endpoints"]
        name = service["metadata"]["name"]
        jobs.append(
            {
                "job_name": name,
                "honor_labels": bool(endpoint.get("honorLabels", False)),
                "metrics_path": endpoint.get("path", "/metrics"),
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{targets[wanted['app.kubernetes.io/name']]}"],
                        # What kubernetes_sd + the operator's relabelling attach to every target.
                        "labels": {"namespace": namespace, "service": name, "endpoint": endpoint["port"]},
                    }
                ],
            }
        )
    return jobs


@dataclass
class Prometheus:
    directory: Path
    scrape: list[dict[str, Any]]
    rules: Mapping[str, Any]
    port: int = 0
    popen: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.directory / "prometheus.log"

    def start(self, timeout: float = 60.0) -> Prometheus:
        (self.port,) = free_ports(1)
        rules = self.directory / "rules.yaml"
        rules.write_text(yaml.safe_dump(dict(self.rules), sort_keys=False))
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": EVALUATION_INTERVAL},
            "rule_files": [str(rules)],
            "scrape_configs": self.scrape,
        }
        path = self.directory / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [
            binary("prometheus"),
            f"--config.file={path}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ]
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.popen.poll() is None, f"prometheus exited:\n{self.log()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"prometheus not ready after {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()

    def log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def api(self, path: str, **params: str | Sequence[str]) -> Any:
        """GET /api/v1/<path>; the ``data`` of a successful answer (a failed one fails the test)."""
        query = urllib.parse.urlencode(params, doseq=True)
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{query}"
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as err:
            raise AssertionError(
                f"{path} {params}: HTTP {err.code} {err.read().decode(errors='replace')}"
            ) from None
        assert body.get("status") == "success", (path, params, body)
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector (a scalar answer fails: every shipped query is a vector)."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return list(data["result"])

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        assert len(result) <= 1, (expr, result)
        return float(result[0]["value"][1]) if result else None

    def alert_states(self) -> dict[str, tuple[str, str]]:
        """alert name -> (state: inactive, pending or firing; the rule's last evaluation error)."""
        states = {}
        for group in self.api("rules", type="alert")["groups"]:
            for rule in group["rules"]:
                states[rule["name"]] = (rule["state"], rule.get("lastError") or "")
        return states

    def targets_up(self) -> dict[str, str]:
        return {t["labels"]["job"]: t["health"] for t in self.api("targets")["activeTargets"]}


def promtool_check_rules(path: Path) -> str:
    result = subprocess.run(
        [binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"promtool check rules {path}:\n{result.stdout}{result.stderr}"
    return result.stdout
