"""``gpuq webhook --workers N``: N processes serving one HTTPS port, so admission scales over cores.

One Python process answers on one core (the GIL); the apiserver's admission calls are independent,
so more cores need more processes. The command forks N workers *before* any event loop or thread
exists; each is the whole webhook of a single process (its own informers and caches, its own TLS
context and certificate reloader) and opens the HTTPS port with ``SO_REUSEPORT``, so the kernel
spreads the apiserver's connections over the workers that are listening. A worker opens the port
only once its own caches have synced (as a single webhook does), so no connection ever reaches an
empty cache.

Worker ``k`` serves its metrics and probes on ``--metrics-port + k`` (worker 0 on ``--metrics-port``
itself, the port the chart's probes use). Only worker 0 renews certificates (``--renew-certificates``:
one renewer, one Lease holder per process, as with one worker).

The supervisor (the process the container runs) serves nothing. A worker that dies is not restarted
in place: the supervisor stops the others and exits non-zero, so the kubelet restarts the container
and its restart count shows it (a worker killed by a bug or the OOM killer is a fault to see, not to
hide; the other replicas keep answering meanwhile). SIGTERM and SIGINT are passed on to every worker,
each stops as a single webhook does, and the supervisor exits 0 once all have exited 0.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("gpuq.webhook")

EXIT_WORKER_DIED = 1
PR_SET_PDEATHSIG = 1
STOP_GRACE = 30.0  # seconds the workers get to finish requests in flight before SIGKILL


def supervise(workers: int, run_worker: Callable[[int], int]) -> int:
    """Fork ``workers`` processes running ``run_worker(index)`` (its return is the exit code) and wait.

    The exit code: 0 when every worker exited 0 after a stop signal; EXIT_WORKER_DIED (or the worker's
    own non-zero code) when a worker exited on its own, after the others were stopped.
    """
    children: dict[int, int] = {}
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        _signal_all(children, signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    supervisor = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    for index in range(workers):
        pid = os.fork()
        if pid == 0:  # the worker: the webhook of one process, then out without the parent's cleanup
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            code = 1
            try:
                # A supervisor killed outright (SIGKILL) takes its workers with it: no orphan keeps
                # serving the port from a stale process.
                prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
                if os.getppid() != supervisor:
                    os._exit(code)
                code = run_worker(index)
            except BaseException:
                log.exception("worker %d failed", index)
            finally:
                logging.shutdown()
                os._exit(code)
        children[pid] = index
    log.info("supervising %d webhook workers: %s", workers, ", ".join(map(str, children)))
    code = 0
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
        if pid not in children:
            continue
        index = children.pop(pid)
        exited = os.waitstatus_to_exitcode(status)
        if stopping and exited == 0:
            continue
        what = f"exit code {exited}" if exited >= 0 else f"signal {signal.Signals(-exited).name}"
        if not stopping:
            print(
                f"error: webhook worker {index} (pid {pid}) died ({what}); stopping the other workers",
                file=sys.stderr,
                flush=True,
            )
            stopping = True
            _signal_all(children, signal.SIGTERM)
            _kill_after(children, STOP_GRACE)
        else:
            log.warning("worker %d (pid %d) stopped with %s", index, pid, what)
        code = code or (exited if exited > 0 else EXIT_WORKER_DIED)
    return code


def _signal_all(children: dict[int, int], sig: int) -> None:
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _kill_after(children: dict[int, int], grace: float) -> None:
    """SIGKILL the workers still running after ``grace`` seconds (an alarm in the supervisor)."""

    def kill(signum: int, frame: FrameType | None) -> None:
        _signal_all(children, signal.SIGKILL)

    signal.signal(signal.SIGALRM, kill)
    signal.alarm(max(1, int(grace)))
