"""The flags every gpuq command shares, registered once, and the checks every process flag value gets.

Shared: ``--kubeconfig``/``--context`` (every command that reads a cluster), ``--bind-address`` and
``--metrics-port`` (the long-running processes), ``--log-level``/``--log-format`` (the same). A command
reads its flags once into a frozen options dataclass made of these groups (``SchedulerOptions``,
``WebhookOptions``, ``CertsOptions``) and runs with that, never with argparse's Namespace.

Values are parsed here, not by argparse's ``type=``: argparse answers a bad value with its usage and a
second line, while gpuq answers every flag error with one line naming the flag, the value and what was
expected (an :class:`~common.model.errors.InvalidValue`; the CLI exits 2 with it, design.md "Command
line"). The checks come in two steps: ``from_args`` reads the flags alone (types, ranges, combinations;
no I/O), then ``preflight`` holds them against this machine (files readable, ports free to listen on),
before the process connects to anything, so a mistake is one line at start and not a traceback later.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import math
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gpuq_k8s.common.model.errors import InvalidValue
from gpuq_k8s.common.process import logs

MAX_PORT: Final = 65535
ANY_ADDRESS: Final = "0.0.0.0"
PORT_EXPECTED: Final = f"a port number from 0 to {MAX_PORT} (0: any free port)"
SECONDS_EXPECTED: Final = "a positive number of seconds"
KUBECONFIG_HELP: Final = (
    "kubeconfig file (default: $KUBECONFIG, else a Pod's service account, else ~/.kube/config)"
)


# -- values -------------------------------------------------------------------------------------------
def integer(flag: str, raw: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``raw`` (the flag's text, or its default) as an integer within ``minimum``..``maximum``."""
    value: int
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    else:
        try:
            value = int(str(raw).strip())
        except ValueError:
            bounds = f" of at least {minimum}" if minimum is not None else ""
            raise InvalidValue(flag, raw, f"an integer{bounds}") from None
    if minimum is not None and value < minimum:
        raise InvalidValue(flag, value, f"at least {minimum}")
    if maximum is not None and value > maximum:
        raise InvalidValue(flag, value, f"at most {maximum}")
    return value


def port(flag: str, raw: object) -> int:
    """A TCP port to listen on; 0 lets the system pick a free one."""
    try:
        value = integer(flag, raw)
    except InvalidValue:
        raise InvalidValue(flag, raw, PORT_EXPECTED) from None
    if not 0 <= value <= MAX_PORT:
        raise InvalidValue(flag, value, PORT_EXPECTED)
    return value


def number(flag: str, raw: object, expected: str = "a number of seconds") -> float:
    """``raw`` as a finite number (checked further by whoever owns its rules, e.g. LeaseTimings)."""
    try:
        value = float(raw) if isinstance(raw, int | float) else float(str(raw).strip())
    except ValueError:
        raise InvalidValue(flag, raw, expected) from None
    if not math.isfinite(value):
        raise InvalidValue(flag, value, expected)
    return value


def seconds(flag: str, raw: object) -> float:
    """A positive, finite duration in seconds."""
    value = number(flag, raw, SECONDS_EXPECTED)
    if not value > 0:
        raise InvalidValue(flag, value, SECONDS_EXPECTED)
    return value


def choice(flag: str, raw: object, choices: tuple[str, ...], *, fold_case: bool = False) -> str:
    """One of ``choices`` (compared in upper case with ``fold_case``: the log levels)."""
    text = str(raw).upper() if fold_case else str(raw)
    if text not in choices:
        raise InvalidValue(flag, raw, ", ".join(choices[:-1]) + f" or {choices[-1]}")
    return text


def ip_address(flag: str, raw: str) -> str:
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        raise InvalidValue(flag, raw, "an IPv4 or IPv6 address") from None


# -- against this machine (preflight) ----------------------------------------------------------------
def readable_file(flag: str, path: str | Path) -> bytes:
    """The bytes of the file ``path`` names; an InvalidValue naming ``flag`` when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise InvalidValue(flag, str(path), f"a readable file ({_reason(err)})") from None


def listen_error(port_flag: str, host: str, port_number: int, err: OSError) -> InvalidValue:
    """What a failed listen on ``host:port_number`` means for the flags that chose them."""
    reason = _reason(err)
    if isinstance(err, socket.gaierror) or err.errno == errno.EADDRNOTAVAIL:
        return InvalidValue("--bind-address", host, f"an address of this host ({reason})")
    if err.errno == errno.EADDRINUSE:
        return InvalidValue(port_flag, port_number, f"a port free on {host} ({reason})")
    return InvalidValue(port_flag, port_number, f"a port this process may listen on at {host} ({reason})")


def check_listen(port_flag: str, host: str, port_number: int, *, reuse_port: bool = False) -> None:
    """Bind (and release at once) every address ``host:port_number`` resolves to, with the socket options the
    server listens with (SO_REUSEADDR, and SO_REUSEPORT where the server uses it), so a port in use or an
    address that is not this host's is an InvalidValue at start. Port 0 (any free port) always fits.

    The server's own listen can still lose a race for the port; it reports through :func:`listen_error`
    too. Kept by hand: no library checks a port without serving on it, and this is a dozen lines.
    """
    if port_number == 0:
        return
    try:
        addresses = socket.getaddrinfo(
            host or None, port_number, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as err:
        raise listen_error(port_flag, host, port_number, err) from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as asyncio listens
            try:
                sock.bind(address)
            except OSError as err:
                raise listen_error(port_flag, host, port_number, err) from None


def _reason(err: OSError) -> str:
    """The system's words for ``err`` (asyncio's bind errors wrap them in a longer sentence)."""
    if isinstance(err, socket.gaierror):
        return str(err.strerror or err)
    if err.errno:
        return os.strerror(err.errno)
    return str(err)


# -- the shared groups ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """``--kubeconfig`` and ``--context``: which cluster (common/kube/client.py's order when neither)."""

    kubeconfig: str | None = None
    context: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ClusterOptions:
        return cls(kubeconfig=args.kubeconfig or None, context=args.context or None)


@dataclass(frozen=True, slots=True)
class ServingOptions:
    """``--bind-address`` and ``--metrics-port`` (``/metrics``, ``/livez``, ``/readyz``)."""

    metrics_port: int
    bind_address: str = ANY_ADDRESS

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServingOptions:
        return cls(port("--metrics-port", args.metrics_port), str(args.bind_address))


@dataclass(frozen=True, slots=True)
class LogOptions:
    """``--log-level`` (DEBUG, INFO, WARNING or ERROR, any case) and ``--log-format`` (text or json)."""

    level: str = "INFO"
    format: str = logs.TEXT

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LogOptions:
        return cls(
            choice("--log-level", args.log_level, logs.LEVELS, fold_case=True),
            choice("--log-format", args.log_format, logs.FORMATS),
        )

    def configure(self) -> None:
        logs.configure(self.format, self.level)


# -- registration -----------------------------------------------------------------------------------
def add_cluster_flags(parser: argparse.ArgumentParser, kubeconfig_help: str = KUBECONFIG_HELP) -> None:
    parser.add_argument("--kubeconfig", metavar="P", help=kubeconfig_help)
    parser.add_argument("--context", metavar="C", help="the kubeconfig context to use")


def add_serving_flags(
    parser: argparse.ArgumentParser, *, metrics_port: int, metrics_help: str, bind_help: str
) -> None:
    parser.add_argument("--metrics-port", default=metrics_port, metavar="PORT", help=metrics_help)
    parser.add_argument("--bind-address", default=ANY_ADDRESS, metavar="ADDRESS", help=bind_help)


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    parser.add_argument(
        "--log-format", default=logs.TEXT, help="text, or json: one JSON object a line (default text)"
    )
