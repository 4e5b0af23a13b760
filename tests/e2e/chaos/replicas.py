"""Two ``gpuq scheduler`` replicas with leader election, supervised as a Deployment would be: a replica
that exits (killed, stopped, or on losing its Lease) is started again, with a new identity.

Every process gets its own identity (``replica-a-3``: slot a, third start), so the Lease's holder
always names one process, and its exit code is recorded: the codes of :data:`EXPECTED_EXITS` are
expected; anything else is a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gpuq_k8s.common.kube.status import call
from tests.e2e import cluster_fixtures as fixtures
from tests.e2e.chaos.workload import CONFIG, SCHEDULER
from tests.e2e.cluster_fixtures import SchedulerProcess
from tests.e2e.controlplane.harness import free_ports

LEASE_NAMESPACE: Final = "chaos-system"
LEASE_NAME: Final = "gpuq-chaos"
# Short enough that a SIGKILLed leader is replaced within seconds; the renew deadline leaves room
# for a renew that is slow on a loaded 2-core machine.
LEASE_DURATION: Final = "5"
RENEW_DEADLINE: Final = "3.5"
RETRY_PERIOD: Final = "0.5"
# 0: SIGTERM handled (Lease released); 1: Lease lost; -9: SIGKILL; -15: SIGTERM that came before the
# process installed its handler (stopped while still starting, before it could lead).
EXPECTED_EXITS: Final = frozenset({0, 1, -9, -15})
SLOTS: Final = ("a", "b")


@dataclass
class Replicas:
    kubeconfig: Path
    workdir: Path
    flush_interval: float
    # The chaos soak's by default; the day in the life (tests/e2e/day) runs its own.
    config: str = CONFIG
    scheduler: str = SCHEDULER
    lease_namespace: str = LEASE_NAMESPACE
    extra_args: tuple[str, ...] = ()
    lease: tuple[str, str, str] = (LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)  # duration, renew, retry
    processes: dict[str, SchedulerProcess] = field(default_factory=dict)
    identities: dict[str, str] = field(default_factory=dict)
    starts: Counter[str] = field(default_factory=Counter)
    exits: Counter[int] = field(default_factory=Counter)
    logs: list[Path] = field(default_factory=list)
    reaped: set[int] = field(default_factory=set)  # pids whose exit is recorded

    def start(self, slot: str) -> SchedulerProcess:
        self.starts[slot] += 1
        identity = self.identities[slot] = f"replica-{slot}-{self.starts[slot]}"
        (port,) = free_ports(1)
        config = self.workdir / "config.yaml"
        config.write_text(self.config)
        argv = [
            *fixtures.python_module("gpuq_k8s.cli"),
            "scheduler",
            *("--kubeconfig", str(self.kubeconfig), "--config", str(config)),
            *("--scheduler-name", self.scheduler, "--flush-interval", str(self.flush_interval)),
            *("--metrics-port", str(port), "--bind-address", "127.0.0.1"),
            *("--leader-elect", "--leader-elect-identity", identity),
            *("--leader-elect-resource-namespace", self.lease_namespace),
            *("--leader-elect-resource-name", LEASE_NAME),
            *("--leader-elect-lease-duration", self.lease[0]),
            *("--leader-elect-renew-deadline", self.lease[1]),
            *("--leader-elect-retry-period", self.lease[2]),
            *self.extra_args,
        ]
        log = self.workdir / f"{identity}.log"
        self.logs.append(log)
        process = self.processes[slot] = SchedulerProcess(argv, log, port).start()
        return process

    def start_all(self) -> None:
        for slot in SLOTS:
            self.start(slot)

    def _reap(self, slot: str) -> str | None:
        """Record the exit code of the slot's exited process (once); a message if unexpected."""
        process = self.processes[slot]
        popen = process.popen
        if popen is None or popen.returncode is None or popen.pid in self.reaped:
            return None
        self.reaped.add(popen.pid)
        code = popen.returncode
        self.exits[code] += 1
        if code in EXPECTED_EXITS:
            return None
        return f"{self.identities[slot]} exited with code {code}; log {process.log_path}"

    def revive(self) -> list[str]:
        """Start every replica that has exited; returns unexpected exits, as violation messages."""
        out = []
        for slot, process in list(self.processes.items()):
            if process.running:
                continue
            problem = self._reap(slot)
            if problem:
                out.append(problem)
            self.start(slot)
        return out

    async def kill(self, slot: str) -> None:
        """SIGKILL, then start again at once (the restart a Deployment makes)."""
        await asyncio.to_thread(self.processes[slot].kill)
        self._reap(slot)
        self.start(slot)

    async def stop(self, slot: str) -> None:
        """SIGTERM (the replica releases its Lease), then start again."""
        await asyncio.to_thread(self.processes[slot].terminate)
        self._reap(slot)
        self.start(slot)

    async def stop_all(self) -> list[str]:
        """SIGTERM every replica; unexpected exit codes as violation messages."""
        out = []
        for slot, process in self.processes.items():
            await asyncio.to_thread(process.terminate)
            problem = self._reap(slot)
            if problem:
                out.append(problem)
        return out

    async def holder(self, api: Any) -> str:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.lease_namespace}/leases/{LEASE_NAME}"
        with contextlib.suppress(Exception):
            reply = await call(api, "GET", path)
            if reply.ok:
                return str((reply.body.get("spec") or {}).get("holderIdentity") or "")
        return ""

    async def leader(self, api: Any) -> str | None:
        """The slot of the running replica that holds the Lease and is ready, if any."""
        holder = await self.holder(api)
        for slot, identity in self.identities.items():
            process = self.processes[slot]
            if identity == holder and process.running:
                code, _ = await asyncio.to_thread(process.get, "/readyz", 1.0)
                return slot if code == 200 else None
        return None

    async def cache_comparison(self, slot: str, timeout: float = 5.0) -> list[str]:
        """SIGUSR2 to the replica in ``slot``: the lines its cache debugger logs (the comparison's
        mismatches and summary, then its dump), without their timestamps; [] if none came in time."""
        process = self.processes[slot]
        if process.popen is None or not process.running:
            return []
        skip = len(process.log_path.read_text(errors="replace").splitlines())
        process.popen.send_signal(signal.SIGUSR2)
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.25)
            lines = process.log_path.read_text(errors="replace").splitlines()[skip:]
            found = [line.split(": ", 1)[-1] for line in lines if "cache " in line]
            if any(line.startswith("cache comparison") for line in found):
                await asyncio.sleep(0.25)  # the dump follows in the same step: let the file catch up
                lines = process.log_path.read_text(errors="replace").splitlines()[skip:]
                return [line.split(": ", 1)[-1] for line in lines if "gpuq.scheduler: cache " in line]
        return []

    def log_count(self, needle: str) -> int:
        """Lines containing ``needle`` over every replica's log, restarts included."""
        total = 0
        for path in self.logs:
            with contextlib.suppress(OSError):
                total += sum(needle in line for line in path.read_text(errors="replace").splitlines())
        return total
