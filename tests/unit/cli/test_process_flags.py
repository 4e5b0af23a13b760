"""Process flags (issue 22 "typed process options", issue 27 "Operations"; common/process/flags.py and the
commands' flags modules): every flag error of ``gpuq scheduler``, ``gpuq webhook`` and ``gpuq certs`` is
one line on stderr naming the flag and the value, exit 2, no traceback, checked by running the real CLI
in a subprocess; ``--log-format json`` makes every log line of the scheduler and of the webhook a JSON
object; and the checks behind them, one by one."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpuq_k8s.certs import create_ca, issue_serving_certificate
from gpuq_k8s.certs.files import write_key_pair
from gpuq_k8s.cli import _parser
from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.process import flags
from gpuq_k8s.common.process.logs import JsonFormatter
from gpuq_k8s.scheduler.flags import SchedulerOptions
from gpuq_k8s.webhook.flags import WebhookOptions
from tests.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
UNREACHABLE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""
SECRET = ["--tls-secret", "gpuq-webhook-tls", "--certs-namespace", "gpuq-system"]
FILES = ["--tls-cert-file", "{cert}", "--tls-private-key-file", "{key}"]
RENEW = [*SECRET, "--renew-certificates"]
NOT_THIS_HOST = "203.0.113.7"  # TEST-NET-3 (RFC 5737): never an address of this machine
FOREIGN = re.escape(repr(NOT_THIS_HOST))
ISSUE = ["certs", "issue", "--service", "s", "--namespace", "n", "--out-dir", "{dir}/out"]
# What each kind of mistake expects (regular expressions).
PORTS = r"a port number from 0 to 65535 \(0: any free port\)"
IN_USE = r"a port free on 0\.0\.0\.0 \(Address already in use\)"
NOT_MINE = r"an address of this host \(Cannot assign requested address\)"
NO_FILE = r"a readable file \(No such file or directory\)"
LEVELS = "DEBUG, INFO, WARNING or ERROR"
SECONDS = "a positive number of seconds"
IP = "an IPv4 or IPv6 address"


@dataclasses.dataclass
class Machine:
    """Files and ports the flags name: a serving pair, another pair's key, a file that is no PEM, a
    directory, and a port another process listens on (with the port below it free)."""

    tmp: Path
    busy: int

    def fill(self, text: str) -> str:
        return text.format(
            cert=self.tmp / "tls.crt",
            key=self.tmp / "tls.key",
            other_key=self.tmp / "other" / "tls.key",
            junk=self.tmp / "junk.pem",
            missing=self.tmp / "missing.pem",
            dir=self.tmp,
            busy=self.busy,
            below=self.busy - 1,
        )


def _bound(port: int) -> socket.socket | None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("0.0.0.0", port))
    except OSError:
        sock.close()
        return None
    return sock


def _listening_with_a_free_port_below() -> socket.socket:
    """A listening socket whose port has a free one below it, both under the ephemeral range: while the
    cases run, no outgoing connection of this machine can take the free one (the case of the second
    worker's metrics port needs it free)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in range(low - 1000, low - 1):
        held = _bound(port + 1)
        if held is None:
            continue
        below = _bound(port)
        if below is None:
            held.close()
            continue
        below.close()
        held.listen()
        return held
    raise AssertionError("no two free ports in a row below the ephemeral range")


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    tmp = tmp_path_factory.mktemp("machine")
    ca = create_ca("ca")
    write_key_pair(issue_serving_certificate(ca, dns_names=["localhost"]), tmp / "tls.crt", tmp / "tls.key")
    other = issue_serving_certificate(create_ca("other"), dns_names=["localhost"])
    write_key_pair(other, tmp / "other" / "tls.crt", tmp / "other" / "tls.key")
    (tmp / "junk.pem").write_text("not a certificate\n")
    (tmp / "kubeconfig").write_text(UNREACHABLE_KUBECONFIG)
    with _listening_with_a_free_port_below() as held:
        yield Machine(tmp, held.getsockname()[1])


def _gpuq(tmp: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuq_k8s.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        # No cluster to reach: a check that let a mistake through would end in a kubeconfig error.
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp), "PYTHONUNBUFFERED": "1"},
    )


# id, argv, then the one line: the flag, its value (a regular expression) and what was expected.
FLAG_ERRORS: list[tuple[str, list[str], str, str, str]] = [
    # -- ports out of range, ports in use, addresses not of this host
    ("scheduler-metrics-port", ["scheduler", "--metrics-port", "99999"], "--metrics-port", "99999", PORTS),
    ("scheduler-metrics-port-text", ["scheduler", "--metrics-port", "ten"], "--metrics-port", "'ten'", PORTS),
    (
        "scheduler-metrics-port-in-use",
        ["scheduler", "--metrics-port", "{busy}"],
        "--metrics-port",
        "{busy}",
        IN_USE,
    ),
    (
        "scheduler-bind-address",
        ["scheduler", "--bind-address", NOT_THIS_HOST],
        "--bind-address",
        FOREIGN,
        NOT_MINE,
    ),
    ("webhook-port", ["webhook", *SECRET, "--port", "-1"], "--port", "-1", PORTS),
    (
        "webhook-metrics-port",
        ["webhook", *SECRET, "--metrics-port", "65536"],
        "--metrics-port",
        "65536",
        PORTS,
    ),
    (
        "webhook-workers-past-65535",
        ["webhook", *SECRET, "--workers", "3", "--metrics-port", "65534"],
        "--metrics-port",
        "65534",
        r"at most 65533 with --workers 3 \(worker k serves on --metrics-port \+ k\)",
    ),
    (
        "webhook-port-is-metrics-port",
        ["webhook", *SECRET, "--port", "9000", "--metrics-port", "9000"],
        "--port",
        "9000",
        "a port other than --metrics-port",
    ),
    (
        "webhook-metrics-port-in-use",
        ["webhook", *FILES, "--port", "0", "--metrics-port", "{busy}"],
        "--metrics-port",
        "{busy}",
        IN_USE,
    ),
    (
        "webhook-second-worker-port-in-use",
        ["webhook", *FILES, "--port", "0", "--workers", "2", "--metrics-port", "{below}"],
        "--metrics-port",
        "{busy}",
        IN_USE,
    ),
    (
        "webhook-https-port-in-use",
        ["webhook", *FILES, "--metrics-port", "0", "--port", "{busy}"],
        "--port",
        "{busy}",
        IN_USE,
    ),
    # -- missing or unreadable files
    (
        "webhook-cert-file-missing",
        ["webhook", "--tls-cert-file", "{missing}", "--tls-private-key-file", "{key}"],
        "--tls-cert-file",
        "'{missing}'",
        NO_FILE,
    ),
    (
        "webhook-key-file-missing",
        ["webhook", "--tls-cert-file", "{cert}", "--tls-private-key-file", "{missing}"],
        "--tls-private-key-file",
        "'{missing}'",
        NO_FILE,
    ),
    (
        "webhook-cert-file-a-directory",
        ["webhook", "--tls-cert-file", "{dir}", "--tls-private-key-file", "{key}"],
        "--tls-cert-file",
        "'{dir}'",
        r"a readable file \(Is a directory\)",
    ),
    (
        "webhook-cert-file-not-pem",
        ["webhook", "--tls-cert-file", "{junk}", "--tls-private-key-file", "{key}"],
        "--tls-cert-file",
        "'{junk}'",
        "a PEM certificate",
    ),
    (
        "webhook-key-of-another-certificate",
        ["webhook", "--tls-cert-file", "{cert}", "--tls-private-key-file", "{other_key}"],
        "--tls-private-key-file",
        "'{other_key}'",
        r"the PEM private key of --tls-cert-file \(KEY_VALUES_MISMATCH\)",
    ),
    (
        "certs-ca-file-missing",
        ["certs", "inject", "--ca-file", "{missing}"],
        "--ca-file",
        "'{missing}'",
        NO_FILE,
    ),
    (
        "certs-ca-key-missing",
        [*ISSUE, "--ca-cert", "{cert}", "--ca-key", "{missing}"],
        "--ca-key",
        "'{missing}'",
        NO_FILE,
    ),
    # -- log level and format
    ("scheduler-log-level", ["scheduler", "--log-level", "LOUD"], "--log-level", "'LOUD'", LEVELS),
    ("webhook-log-level", ["webhook", *SECRET, "--log-level", "verbose"], "--log-level", "'verbose'", LEVELS),
    ("scheduler-log-format", ["scheduler", "--log-format", "yaml"], "--log-format", "'yaml'", "text or json"),
    (
        "webhook-log-format",
        ["webhook", *SECRET, "--log-format", "yaml"],
        "--log-format",
        "'yaml'",
        "text or json",
    ),
    # -- durations and counts
    (
        "scheduler-flush-interval",
        ["scheduler", "--flush-interval", "0"],
        "--flush-interval",
        r"0\.0",
        SECONDS,
    ),
    (
        "scheduler-watch-inactivity-timeout",
        ["scheduler", "--watch-inactivity-timeout", "inf"],
        "--watch-inactivity-timeout",
        "inf",
        SECONDS,
    ),
    (
        "scheduler-max-unschedulable-seconds",
        ["scheduler", "--max-unschedulable-seconds", "5m"],
        "--max-unschedulable-seconds",
        "'5m'",
        SECONDS,
    ),
    (
        "scheduler-bind-concurrency",
        ["scheduler", "--bind-concurrency", "0"],
        "--bind-concurrency",
        "0",
        "at least 1",
    ),
    (
        "scheduler-lease-duration",
        ["scheduler", "--leader-elect", "--leader-elect-lease-duration", "5"],
        "flags: --leader-elect-lease-duration",
        r"5\.0",
        r"more than the renew deadline \(10s\)",
    ),
    (
        "webhook-workers",
        ["webhook", *SECRET, "--workers", "two"],
        "--workers",
        "'two'",
        "an integer of at least 1",
    ),
    (
        "webhook-cert-reload-interval",
        ["webhook", *SECRET, "--cert-reload-interval", "-1"],
        "--cert-reload-interval",
        r"-1\.0",
        SECONDS,
    ),
    (
        "webhook-max-body-bytes",
        ["webhook", *SECRET, "--max-body-bytes", "0"],
        "--max-body-bytes",
        "0",
        "at least 1",
    ),
    (
        "webhook-renew-interval",
        ["webhook", *RENEW, "--renew-interval", "soon"],
        "--renew-interval",
        "'soon'",
        "a number of seconds",
    ),
    # -- addresses
    (
        "webhook-certificate-ip",
        ["webhook", *SECRET, "--certificate-ip", "10.0.0"],
        "--certificate-ip",
        r"'10\.0\.0'",
        IP,
    ),
    ("certs-ip", [*ISSUE, "--ip", "::x"], "--ip", "'::x'", IP),
]


@pytest.fixture(scope="module")
def flag_error_runs(machine: Machine) -> dict[str, tuple[str, str, int]]:
    """Every case's (stdout, stderr, exit code), the processes run a few at a time: each spends most of
    its second importing, and none gets as far as listening or connecting."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = {case[0]: pool.submit(_run, machine, *case[1]) for case in FLAG_ERRORS}
        return {name: run.result() for name, run in runs.items()}


@pytest.mark.parametrize("case", FLAG_ERRORS, ids=[c[0] for c in FLAG_ERRORS])
def test_a_flag_error_is_one_line_and_exit_2(
    case: tuple[str, list[str], str, str, str],
    machine: Machine,
    flag_error_runs: dict[str, tuple[str, str, int]],
) -> None:
    name, _, flag, value, expected = case
    out, err, code = flag_error_runs[name]
    assert code == 2, err
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    prefix = "gpuq certs: " if name.startswith("certs-") else "error: "
    line = f"{prefix}{flag}: invalid value {machine.fill(value)}: expected {expected}"
    assert re.fullmatch(line, err.rstrip("\n")), (line, err)
    assert out == "", out  # nothing done: no certificate written, nothing printed


@pytest.mark.parametrize("command", [["scheduler"], ["webhook", *SECRET]], ids=["scheduler", "webhook"])
def test_a_config_file_that_cannot_be_read_is_one_line_and_exit_2(
    command: list[str], machine: Machine
) -> None:
    out, err, code = _run(machine, *command, "--config", "{missing}")
    assert (code, out) == (2, "")
    assert err == f"error: {machine.tmp / 'missing.pem'}: cannot read: No such file or directory\n"


def _run(machine: Machine, *argv: str) -> tuple[str, str, int]:
    kubeconfig = str(machine.tmp / "kubeconfig")
    process = _gpuq(machine.tmp, *(machine.fill(a) for a in argv), "--kubeconfig", kubeconfig)
    try:
        out, err = process.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    return out, err, process.returncode


# -- JSON logs --------------------------------------------------------------------------------------


def _log_lines_until_stopped(process: subprocess.Popen[str], wanted: tuple[str, ...]) -> list[str]:
    """stderr's lines until every text of ``wanted`` was logged, then SIGTERM (a clean stop, exit 0)."""
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if all(any(w in seen_line for seen_line in lines) for w in wanted):
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen.wait(60)
    process.send_signal(signal.SIGTERM)
    code = process.wait(60)
    reader.join(10)
    assert seen.is_set(), lines
    assert code == 0, lines
    return lines


# Each process logs at start, then retries its informers against an API server that is not there.
PROCESSES = {
    "scheduler": (["scheduler", "--metrics-port", "0"], ("metrics and probes on", "retrying in")),
    "webhook": (
        ["webhook", *FILES, "--port", "0", "--metrics-port", "0"],
        ("admission rules", "retrying in"),
    ),
    "webhook-2-workers": (
        ["webhook", *FILES, "--port", "0", "--metrics-port", "0", "--workers", "2"],
        ("supervising 2 webhook workers", "metrics and probes on", "retrying in"),
    ),
}
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) [\w.]+: .+")


@pytest.mark.parametrize("log_format", ["json", "text"])
@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_log_lines_are_json_objects_with_log_format_json(
    name: str, log_format: str, machine: Machine
) -> None:
    argv, wanted = PROCESSES[name]
    args = [machine.fill(a) for a in argv]
    kubeconfig = str(machine.tmp / "kubeconfig")
    lines = _log_lines_until_stopped(
        _gpuq(machine.tmp, *args, "--kubeconfig", kubeconfig, "--log-format", log_format), wanted
    )
    assert len(lines) >= len(wanted)
    if log_format == "text":
        # A record's lines: its first as TEXT_LINE, then the rest of a multi-line message (a traceback).
        assert all(TEXT_LINE.fullmatch(line) for line in lines if any(w in line for w in wanted)), lines
        assert not any(line.startswith("{") for line in lines), lines
        return
    entries = [json.loads(line) for line in lines]
    assert all(isinstance(e, dict) and {"ts", "level", "logger", "msg"} <= e.keys() for e in entries), lines
    assert {e["level"] for e in entries} <= {"debug", "info", "warning", "error"}
    assert any(e["level"] == "warning" and "retrying in" in e["msg"] for e in entries)


def test_an_exception_is_one_json_line_with_its_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("gpuq", logging.ERROR, __file__, 1, "failed %s", ("x",), sys.exc_info())
    text = JsonFormatter().format(record)
    assert "\n" not in text
    entry = json.loads(text)
    assert entry["msg"] == "failed x" and entry["level"] == "error"
    assert entry["exc"].startswith("Traceback") and "ValueError: boom" in entry["exc"]


# -- the checks, one by one -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"), [("0", 0), ("65535", 65535), (8080, 8080), (" 443 ", 443)], ids=str
)
def test_ports_in_range(raw: object, value: int) -> None:
    assert flags.port("--port", raw) == value


@pytest.mark.parametrize("raw", ["65536", "-1", "1e3", "", "0x50", True], ids=repr)
def test_ports_out_of_range_or_not_numbers(raw: object) -> None:
    with pytest.raises(InvalidValue) as err:
        flags.port("--port", raw)
    assert err.value.field == "--port" and err.value.expected == flags.PORT_EXPECTED


@pytest.mark.parametrize("raw", ["0", "-3", "nan", "inf", "-inf", "1s"])
def test_durations_are_positive_finite_seconds(raw: str) -> None:
    with pytest.raises(InvalidValue, match=r"--x: invalid value .*: expected a positive number of seconds"):
        flags.seconds("--x", raw)
    assert flags.seconds("--x", "0.25") == 0.25
    assert flags.number("--x", "-2") == -2.0  # a number only; its rules are its owner's (LeaseTimings)


def test_log_levels_in_any_case() -> None:
    assert flags.choice("--log-level", "debug", ("DEBUG", "INFO"), fold_case=True) == "DEBUG"
    with pytest.raises(InvalidValue, match="expected DEBUG or INFO"):
        flags.choice("--log-level", "TRACE", ("DEBUG", "INFO"), fold_case=True)
    with pytest.raises(InvalidValue):
        flags.choice("--log-format", "JSON", ("text", "json"))  # formats keep their case


def test_a_port_in_use_and_a_foreign_address_are_refused_before_listening() -> None:
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(InvalidValue) as err:
            flags.check_listen("--metrics-port", "127.0.0.1", port)
        assert (err.value.field, err.value.value) == ("--metrics-port", port)
        flags.check_listen("--metrics-port", "127.0.0.1", 0)  # any free port
    flags.check_listen("--metrics-port", "127.0.0.1", port)  # released: free again
    with pytest.raises(InvalidValue) as err:
        flags.check_listen("--metrics-port", NOT_THIS_HOST, 8080)
    assert (err.value.field, err.value.value) == ("--bind-address", NOT_THIS_HOST)


def test_a_port_shared_with_so_reuseport_is_checked_as_the_workers_listen() -> None:
    """``--workers``: the HTTPS port is opened with SO_REUSEPORT by every worker; a webhook already
    serving it that way (same user) leaves it open to another such listener, not to a plain one."""
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        flags.check_listen("--port", "127.0.0.1", port, reuse_port=True)
        with pytest.raises(InvalidValue):
            flags.check_listen("--port", "127.0.0.1", port)


def test_a_file_that_cannot_be_read_names_its_flag(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    assert flags.readable_file("--f", tmp_path / "f") == b"x"
    for path, reason in ((tmp_path / "none", "No such file or directory"), (tmp_path, "Is a directory")):
        with pytest.raises(InvalidValue, match=re.escape(f"--f: invalid value '{path}'")) as err:
            flags.readable_file("--f", path)
        assert err.value.expected == f"a readable file ({reason})"


def test_each_worker_serves_its_metrics_port_and_only_the_first_renews() -> None:
    args = _parser().parse_args(["webhook", *RENEW, "--workers", "3", "--metrics-port", "9100"])
    options = WebhookOptions.from_args(args)
    assert options.certificates.renewal is not None
    workers = [options.for_worker(k) for k in range(3)]
    assert [w.serving.metrics_port for w in workers] == [9100, 9101, 9102]
    assert [w.certificates.renewal is not None for w in workers] == [True, False, False]
    assert options.for_worker(0) == options
    any_port = WebhookOptions.from_args(_parser().parse_args(["webhook", *SECRET, "--metrics-port", "0"]))
    assert any_port.for_worker(1).serving.metrics_port == 0


def test_the_options_keep_the_flags_defaults() -> None:
    """Options built in code (tests, benchmarks) and from no flags at all are the same."""
    assert SchedulerOptions.from_args(_parser().parse_args(["scheduler"])) == SchedulerOptions()
    parsed = WebhookOptions.from_args(_parser().parse_args(["webhook", *SECRET]))
    assert dataclasses.replace(parsed, certificates=WebhookOptions().certificates) == WebhookOptions()
