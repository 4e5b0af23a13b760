"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's ``leaderelection`` does it.

- A candidate reads the Lease every ``retry_period``, at most every ``STANDBY_READ_PERIOD``; it takes
  it when the Lease is free (no holder) or when the holder has not renewed for ``lease_duration``,
  measured on *our* clock from the moment we first saw the record change (client-go's
  ``observedTime``), so clock skew between replicas does not matter. Where client-go's candidate reads
  every 2-4.4 s (the retry period, jittered), ours sees a renewal within 0.5 s of it and reads again
  at the moment the Lease expires by that count: a standby takes over from a dead holder 15.0-15.5 s
  after its last renewal with the default timings, where client-go's takes 15-23.8 s. Never sooner:
  the count starts when we saw the renewal, which is after it was made.
- Every write is a PUT carrying the resourceVersion read (optimistic concurrency): of two candidates
  racing for an expired Lease exactly one succeeds, the other gets a Conflict and stays standby.
- The leader renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it has lost the
  lease (another replica may take it after ``lease_duration``) and must stop acting at once, so
  ``renew_deadline < lease_duration`` leaves a margin in which two replicas never both act. Every
  Lease request times out within ``renew_deadline / 2`` (a hung renew is a failed one, not a wait),
  and :meth:`LeaderElector.writes_allowed` measures the deadline itself, at the moment a write is
  sent: writes stop at the deadline even while a renew is still in flight.
- On a clean shutdown the leader releases the Lease (empty holder, 1 s duration) so a standby takes
  over within one ``STANDBY_READ_PERIOD`` instead of waiting for expiry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from gpuq_k8s.common.kube.errors import Conflict, NotFound, RequestFailed
from gpuq_k8s.common.kube.status import Reply, call
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.errors import ConfigError

log = logging.getLogger(__name__)

# A standby reads the Lease at least this often (seconds), whatever the retry period: the sooner it
# sees the holder's renewals, the sooner after the holder's end it may take over (never before: the
# lease duration counts from the moment it saw the last renewal). Two reads a second of one object.
STANDBY_READ_PERIOD: Final = 0.5


@dataclass(frozen=True, slots=True)
class LeaseTimings:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def validate(self) -> None:
        """client-go's rules: duration > deadline > retry * 1.2 (JitterFactor), all positive."""
        if self.retry_period <= 0:
            raise ConfigError(
                "--leader-elect-retry-period", self.retry_period, "a positive duration", "flags"
            )
        if self.renew_deadline <= self.retry_period * 1.2:
            raise ConfigError(
                "--leader-elect-renew-deadline",
                self.renew_deadline,
                f"more than 1.2 x the retry period ({self.retry_period * 1.2:g}s)",
                "flags",
            )
        if self.lease_duration <= self.renew_deadline:
            raise ConfigError(
                "--leader-elect-lease-duration",
                self.lease_duration,
                f"more than the renew deadline ({self.renew_deadline:g}s)",
                "flags",
            )


def micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(
    identity: str, duration: float, now: float, previous: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The spec we write to hold the Lease: a takeover bumps ``leaseTransitions`` and ``acquireTime``."""
    previous = previous or {}
    held = previous.get("holderIdentity") == identity
    transitions = int(previous.get("leaseTransitions") or 0)
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, round(duration)),
        "acquireTime": previous.get("acquireTime")
        if held and previous.get("acquireTime")
        else micro_time(now),
        "renewTime": micro_time(now),
        "leaseTransitions": transitions if held or not previous else transitions + 1,
    }


@dataclass(eq=False)
class LeaderElector:
    api_client: Any
    _: KW_ONLY
    namespace: str
    name: str
    identity: str
    timings: LeaseTimings = LeaseTimings()
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    leading: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    lost: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    # Set once the first try at the Lease is answered (taken or not); ``acquired_at`` is when (on
    # ``clock``) the write that took it was answered: anything listed after that holds every write
    # the previous holder made while it held the Lease.
    attempted: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    acquired_at: float = field(default=0.0, init=False)
    transitions: int = field(default=0, init=False)
    # The Lease spec as last seen, and when (on ``clock``) it was first seen so: client-go's observedTime.
    _observed_spec: Mapping[str, Any] | None = field(default=None, init=False)
    _observed_at: float = field(default=0.0, init=False)
    _renewed_at: float = field(default=0.0, init=False)  # on ``clock``: our last successful write

    def __post_init__(self) -> None:
        self.timings.validate()

    @property
    def path(self) -> str:
        return kinds.LEASE.object_path(self.namespace, self.name)

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set() and not self.lost.is_set()

    def writes_allowed(self) -> bool:
        """Leading, and the Lease renewed less than ``renew_deadline`` ago (checked per write)."""
        return self.is_leader and self.clock() - self._renewed_at < self.timings.renew_deadline

    async def run(self) -> None:
        """Acquire, then renew until the lease is lost (sets :attr:`lost` and returns) or cancelled."""
        retry = self.timings.retry_period
        while not await self._try():
            self.attempted.set()
            await asyncio.sleep(self.standby_wait())
        self.acquired_at = self.clock()
        self.attempted.set()
        log.info("became leader of Lease %s/%s as %s", self.namespace, self.name, self.identity)
        self.leading.set()
        while True:
            await asyncio.sleep(retry)
            if not await self._try() and self.clock() - self._renewed_at >= self.timings.renew_deadline:
                log.error("failed to renew Lease %s/%s within the renew deadline", self.namespace, self.name)
                self.lost.set()
                return

    def standby_wait(self) -> float:
        """How long a standby waits before reading the Lease again: the retry period, at most
        :data:`STANDBY_READ_PERIOD`, and no later than the moment the holder's Lease expires by our
        count (client-go reads on its jittered retry period only, up to 4.4 s past the expiry)."""
        wait = min(self.timings.retry_period, STANDBY_READ_PERIOD)
        spec = self._observed_spec or {}
        holder = spec.get("holderIdentity")
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.timings.lease_duration)
            remaining = self._observed_at + duration - self.clock()
            if 0 < remaining < wait:
                wait = remaining
        return wait

    async def _try(self) -> bool:
        try:
            async with asyncio.timeout(self.timings.renew_deadline / 2):
                return await self._try_acquire_or_renew()
        except (RequestFailed, TimeoutError) as err:  # TimeoutError: the deadline above
            log.warning("Lease %s/%s: %s", self.namespace, self.name, err or type(err).__name__)
            return False

    async def _try_acquire_or_renew(self) -> bool:
        started = self.clock()  # a renewal counts from when it was sent, not when it was answered
        now_wall = self.wall_clock()
        current = await call(self.api_client, "GET", self.path)
        if isinstance(current.error, NotFound):
            body = self._lease(lease_spec(self.identity, self.timings.lease_duration, now_wall, None))
            reply = await call(self.api_client, "POST", self.path.rsplit("/", 1)[0], body)
            return self._accept(reply, started)
        if not current.ok:
            log.warning("Lease %s/%s: %s", self.namespace, self.name, current.message)
            return False
        spec = current.body.get("spec") or {}
        meta = current.body.get("metadata") or {}
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self.clock()
        holder = str(spec.get("holderIdentity") or "")
        duration = float(spec.get("leaseDurationSeconds") or self.timings.lease_duration)
        if holder and holder != self.identity and self._observed_at + duration > self.clock():
            return False
        body = self._lease(
            lease_spec(self.identity, self.timings.lease_duration, now_wall, spec),
            resource_version=str(meta.get("resourceVersion") or ""),
        )
        if holder != self.identity:
            self.transitions += 1
        return self._accept(await call(self.api_client, "PUT", self.path, body), started)

    def _lease(self, spec: Mapping[str, Any], resource_version: str | None = None) -> dict[str, Any]:
        """Our Lease object with ``spec``; a write over an existing one carries the resourceVersion
        read (optimistic concurrency: of two racing writers one gets a Conflict)."""
        metadata = {"name": self.name, "namespace": self.namespace}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        lease = {"apiVersion": kinds.LEASE.api_version, "kind": kinds.LEASE.kind}
        return {**lease, "metadata": metadata, "spec": spec}

    def _accept(self, reply: Reply, started: float) -> bool:
        if not reply.ok:
            if not isinstance(reply.error, Conflict):
                log.warning("Lease %s/%s not written: %s", self.namespace, self.name, reply.message)
            return False
        self._observed_spec = reply.body.get("spec") or {}
        self._observed_at = self.clock()
        self._renewed_at = started
        return True

    async def release(self) -> None:
        """Give the Lease up if we hold it (clean shutdown); best-effort."""
        if not self.leading.is_set():
            return
        self.leading.clear()
        try:
            current = await call(self.api_client, "GET", self.path)
            spec = current.body.get("spec") or {}
            if not current.ok or spec.get("holderIdentity") != self.identity:
                return
            meta = current.body.get("metadata") or {}
            now = micro_time(self.wall_clock())
            body = self._lease(
                {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now},
                resource_version=str(meta.get("resourceVersion") or ""),
            )
            reply = await call(self.api_client, "PUT", self.path, body)
            if reply.ok:
                log.info("released Lease %s/%s", self.namespace, self.name)
        except RequestFailed as err:
            log.warning("Lease %s/%s not released: %s", self.namespace, self.name, err)
