"""``gpuq scheduler``'s flags, read once into :class:`SchedulerOptions` (typed and checked), what
:class:`~scheduler.service.Service` runs with. The flags it shares with the other commands and their
checks are :mod:`common.process.flags`'."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Final

from gpuq_k8s.common.kube.informer import DEFAULT_INACTIVITY
from gpuq_k8s.common.kube.leader import LeaseTimings
from gpuq_k8s.common.model.pods import GPUQ_SCHEDULER
from gpuq_k8s.common.process import flags as shared
from gpuq_k8s.common.process.flags import ClusterOptions, LogOptions, ServingOptions
from gpuq_k8s.scheduler.kube.backend import DEFAULT_BIND_CONCURRENCY
from gpuq_k8s.scheduler.kube.loop import DEFAULT_MAX_UNSCHEDULABLE

METRICS_PORT: Final = 10259
FLUSH_INTERVAL: Final = 0.5


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """Every ``gpuq scheduler`` flag, typed; the defaults are the flags' (design.md "Command line").

    ``timings`` is checked by client-go's rules only with ``leader_elect`` (as before: without it no
    Lease is used); ``identity`` empty means ``hostname_uuid``, chosen when the service starts.
    """

    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    serving: ServingOptions = field(default_factory=lambda: ServingOptions(METRICS_PORT))
    log: LogOptions = field(default_factory=LogOptions)
    config: str | None = None
    scheduler_name: str = GPUQ_SCHEDULER
    leader_elect: bool = False
    lease_name: str = "gpuq-scheduler"
    lease_namespace: str = "kube-system"
    identity: str = ""
    timings: LeaseTimings = field(default_factory=LeaseTimings)
    bind_concurrency: int = DEFAULT_BIND_CONCURRENCY
    flush_interval: float = FLUSH_INTERVAL
    max_unschedulable_seconds: float = DEFAULT_MAX_UNSCHEDULABLE
    watch_inactivity_timeout: float = DEFAULT_INACTIVITY

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SchedulerOptions:
        """The flags alone, checked (no I/O); an InvalidValue (ConfigError for the Lease) names the
        first wrong one."""
        timings = LeaseTimings(
            shared.number("--leader-elect-lease-duration", args.leader_elect_lease_duration),
            shared.number("--leader-elect-renew-deadline", args.leader_elect_renew_deadline),
            shared.number("--leader-elect-retry-period", args.leader_elect_retry_period),
        )
        if args.leader_elect:
            timings.validate()
        return cls(
            cluster=ClusterOptions.from_args(args),
            serving=ServingOptions.from_args(args),
            log=LogOptions.from_args(args),
            config=args.config,
            scheduler_name=args.scheduler_name,
            leader_elect=args.leader_elect,
            lease_name=args.leader_elect_resource_name,
            lease_namespace=args.leader_elect_resource_namespace,
            identity=args.leader_elect_identity,
            timings=timings,
            bind_concurrency=shared.integer("--bind-concurrency", args.bind_concurrency, minimum=1),
            flush_interval=shared.seconds("--flush-interval", args.flush_interval),
            max_unschedulable_seconds=shared.seconds(
                "--max-unschedulable-seconds", args.max_unschedulable_seconds
            ),
            watch_inactivity_timeout=shared.seconds(
                "--watch-inactivity-timeout", args.watch_inactivity_timeout
            ),
        )

    def preflight(self) -> None:
        """The metrics port can be listened on (before anything connects)."""
        shared.check_listen("--metrics-port", self.serving.bind_address, self.serving.metrics_port)


def add_flags(parser: argparse.ArgumentParser) -> None:
    shared.add_cluster_flags(parser)
    parser.add_argument("--config", metavar="CONF.yaml", help="scheduler configuration (Volcano format)")
    parser.add_argument("--scheduler-name", default=GPUQ_SCHEDULER, help=f"default {GPUQ_SCHEDULER}")
    shared.add_serving_flags(
        parser,
        metrics_port=METRICS_PORT,
        metrics_help=f"/metrics, /livez, /readyz (default {METRICS_PORT})",
        bind_help=f"address of the metrics port (default {shared.ANY_ADDRESS})",
    )
    parser.add_argument("--leader-elect", action="store_true", help="run only while holding the Lease")
    parser.add_argument("--leader-elect-resource-name", default="gpuq-scheduler", help="Lease name")
    parser.add_argument("--leader-elect-resource-namespace", default="kube-system", help="Lease namespace")
    parser.add_argument("--leader-elect-identity", default="", help="holder identity (default hostname_uuid)")
    timings = LeaseTimings()
    parser.add_argument("--leader-elect-lease-duration", default=timings.lease_duration, metavar="SECONDS")
    parser.add_argument("--leader-elect-renew-deadline", default=timings.renew_deadline, metavar="SECONDS")
    parser.add_argument("--leader-elect-retry-period", default=timings.retry_period, metavar="SECONDS")
    parser.add_argument(
        "--bind-concurrency",
        default=DEFAULT_BIND_CONCURRENCY,
        metavar="N",
        help=f"binding requests in flight at most (default {DEFAULT_BIND_CONCURRENCY})",
    )
    parser.add_argument(
        "--flush-interval",
        default=FLUSH_INTERVAL,
        metavar="SECONDS",
        help=f"seconds between batched writes (default {FLUSH_INTERVAL:g})",
    )
    parser.add_argument(
        "--max-unschedulable-seconds",
        default=DEFAULT_MAX_UNSCHEDULABLE,
        metavar="SECONDS",
        help="retry a pod parked as unschedulable this long even without a relevant event "
        f"(kube-scheduler's podMaxInUnschedulablePodsDuration; default {DEFAULT_MAX_UNSCHEDULABLE:.0f})",
    )
    parser.add_argument(
        "--watch-inactivity-timeout",
        default=DEFAULT_INACTIVITY,
        metavar="SECONDS",
        help="re-establish a watch silent this long (no event, no bookmark) from its resourceVersion; "
        f"/readyz is 503 until it answers (default {DEFAULT_INACTIVITY:.0f})",
    )
    shared.add_log_flags(parser)
