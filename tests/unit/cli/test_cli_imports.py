"""``gpuq scheduler`` loads the scheduler's modules only (issue 29: every module imported is part of a
cold start): not simulate and its reports, admission, the webhook, the certificates or rich. The other
sub-commands still parse and run (tests/unit/cli/test_cli_output.py, the simulate tests)."""

from __future__ import annotations

import subprocess
import sys

# Sub-command modules a scheduler never uses.
OTHERS = (
    "gpuq_k8s.scheduler.simulate",
    "gpuq_k8s.admission",
    "gpuq_k8s.webhook",
    "gpuq_k8s.certs",
    "gpuq_k8s.tables",
    "rich",
    "cryptography",
)

PROBE = """
import runpy, sys
sys.argv = ["gpuq", *sys.argv[1:]]
try:
    runpy.run_module("gpuq_k8s.cli", run_name="__main__")
except SystemExit as stop:
    print("exit", stop.code, file=sys.stderr)
print("\\n".join(sorted(sys.modules)))
"""


def loaded(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True, timeout=60
    )
    assert "exit 0" in done.stderr, done.stderr
    return set(done.stdout.split())


def _others(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == o or m.startswith(o + ".") for o in OTHERS))


def test_the_scheduler_sub_command_loads_no_other_sub_commands_modules() -> None:
    modules = loaded("scheduler", "--help")
    assert "gpuq_k8s.scheduler.service" in modules
    assert _others(modules) == []


def test_the_full_command_line_still_has_every_sub_command() -> None:
    modules = loaded("--help")
    assert {"gpuq_k8s.webhook.command", "gpuq_k8s.certs.command"} <= modules
