"""Side by side: gpuq, kube-scheduler and raw binders binding the same pending pods.

    python tests/bench/bench_side_by_side.py [--nodes 1000] [--pods 5000] [--repeats 2]
        [--contenders gpuq,kube-scheduler,raw,raw-gpuq,raw-aiohttp] [--workloads plain,anti,spread,preferred]

Every run gets an identical, fresh control plane (the e2e harness: etcd + kube-apiserver v1.36):
``--nodes`` fake Ready nodes without the not-ready taint (half of them A100 GPU nodes) and ``--pods``
pending pods, all created before the contender starts (tests/bench/bench_cluster.py's population).
The contenders then take turns (gpuq, kube-scheduler, raw, ..., gpuq, kube-scheduler, ...):

- ``gpuq``: ``gpuq scheduler`` with its default configuration (every plugin);
- ``kube-scheduler``: the v1.36 binary built by tests/e2e/controlplane/build.sh, one profile whose
  schedulerName is the pods', client qps/burst 5000/5000 (its default 50/100 would be the ceiling);
- ``raw``: no decisions at all, the ceiling of binding through kubernetes_asyncio: it lists the
  pending pods and the nodes and POSTs each pod's Binding (with the pod's uid; a 409 is a pod
  already bound) round-robin over the nodes, 64 in flight (``--raw-in-flight``); its client's
  connection pool holds 100 connections, more than that;
- ``raw-gpuq``: the same binder on the request path of gpuq's own writes (``common.kube.status.call``
  on gpuq's HTTP client, ``common/kube/http.py``): the ceiling with the client gpuq binds through;
- ``raw-aiohttp``: the same binder on a bare aiohttp session (orjson bodies, no client library):
  how far the Python client itself is the ceiling.

``--workloads`` (issue 23's placement rules; default ``plain``, none): nodes then carry
``kubernetes.io/hostname`` and ``topology.kubernetes.io/zone`` (8 zones) and every pending pod belongs to
an app of 100 pods with, over its app: ``anti`` required hostname anti-affinity, ``spread`` a
DoNotSchedule zone spread constraint (maxSkew 1), ``preferred`` preferred zone affinity (weight 100)
(tests/bench/bench_cluster.py ``placement_rules``). gpuq then runs its default configuration plus
``nodeorder`` (Volcano's default weights: podaffinity 2, podtopologyspread 2), as kube-scheduler's
default profile scores InterPodAffinity and PodTopologySpread with weight 2. Each workload's runs
alternate the contenders on a fresh control plane, and each workload gets its own summary.

``--dra`` (issue 26): DRA devices instead: slices of ``--dra-devices`` GPUs per node, pods each with a
ResourceClaimTemplate claim, kube-controller-manager's resource-claim-controller making the claims
(``--dra-timing``); gpuq and kube-scheduler only. See tests/bench/side_by_side_dra.py.

``--existing N`` creates N pods bound already (spec.nodeName set) before the pending ones: the cold start
(the printed "first bind ... after start" includes the contender's start-up and its initial lists).

``--takeover``: a standby taking over. Each contender runs as two replicas with leader election
(default timings: a 15 s Lease, renewed every 2 s): the leader, then the standby, which is left to
list and settle (its log says it waits for the Lease); then the leader is killed (SIGKILL: no release)
and the ``--pods`` pending pods are created. "first bind" is then counted from the kill: the Lease's
expiry, the standby's takeover and its first decision. The pods/s that follow cannot exceed the rate the
pods are created at (printed with them): a contender binding each pod as it comes shows that rate, so
a takeover's pods/s ratio against kube-scheduler understates gpuq where gpuq keeps up with creation
(a cold start's pending pods all exist before the start, and its rate is the contender's own).

Each contender's peak RSS (``VmHWM`` of /proc, read when its last pod is bound) is printed with its
figures.

A pod informer in this process stamps the moment each pod is first seen bound; the rate is pods/s
from the first bind to the last. The CPU figure is the contender process's own user+system time
(from /proc) from its first bind to its last, divided by the pods bound in between (steady state:
start-up, imports and the initial lists are left out); kube-apiserver's and etcd's CPU over the same
span is printed beside it (what each bound pod cost the control plane: the machine's cores are
shared, so a contender that costs the apiserver more per pod leaves it less room). Printed at the end: each
contender's rates and CPU per pod, and the ratios gpuq/raw and gpuq/kube-scheduler of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuq_k8s.common.kube.binding import binding_body
from gpuq_k8s.common.kube.client import new_api_client, through_call_api
from gpuq_k8s.common.kube.diff import Change
from gpuq_k8s.common.kube.informer import Informer
from gpuq_k8s.common.kube.status import call
from gpuq_k8s.common.model import kinds
from gpuq_k8s.common.model.config import DEFAULT_CONFIG_YAML
from tests.bench import side_by_side_dra
from tests.bench.bench_cluster import NAME, WORKLOADS, fresh_cluster, populate
from tests.e2e.cluster_fixtures import Cluster
from tests.e2e.controlplane.harness import ControlPlane, free_ports, kube_scheduler_config

CONTENDERS = ("gpuq", "kube-scheduler", "raw", "raw-gpuq", "raw-aiohttp")
PENDING = "spec.nodeName="


def peak_rss_mb(pid: int) -> float:
    """The high-water mark of ``pid``'s resident set (VmHWM), in MB; NaN once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (fields 14 and 15 of /proc/<pid>/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ the raw binders (run as children)


async def bind_all(
    pods: list[tuple[str, str, str]],
    nodes: list[str],
    post: Callable[[str, dict[str, Any]], Awaitable[int]],
    in_flight: int,
) -> None:
    """POST every pod's Binding, round-robin over ``nodes``, ``in_flight`` at a time; 409 = already bound."""
    gate = asyncio.Semaphore(in_flight)
    failures: list[str] = []

    async def one(pod: tuple[str, str, str], node: str) -> None:
        namespace, name, uid = pod
        body = binding_body(namespace, name, uid, node)
        async with gate:
            status = await post(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body)
        if not (200 <= status < 300 or status == 409):
            failures.append(f"{namespace}/{name}: HTTP {status}")

    await asyncio.gather(*(one(pod, node) for pod, node in zip(pods, itertools.cycle(nodes), strict=False)))
    if failures:
        raise SystemExit(f"{len(failures)} bindings failed, first: {failures[0]}")


def pending_of(listing: dict[str, Any], scheduler: str) -> list[tuple[str, str, str]]:
    return [
        (p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"])
        for p in listing.get("items") or []
        if (p.get("spec") or {}).get("schedulerName") == scheduler
    ]


async def raw_client_binder(kubeconfig: str, scheduler: str, in_flight: int, *, own: bool = False) -> None:
    """The binder through kubernetes_asyncio's ``ApiClient.call_api`` (``raw``), or through the request
    path of gpuq's own writes, ``common.kube.status.call`` on its HTTP client (``raw-gpuq``)."""
    api = await new_api_client(kubeconfig)
    try:
        listing = await call(api, "GET", "/api/v1/pods", query=[("fieldSelector", PENDING)])
        nodes = [n["metadata"]["name"] for n in (await call(api, "GET", "/api/v1/nodes")).body["items"]]

        async def post_own(path: str, body: dict[str, Any]) -> int:
            return (await call(api, "POST", path, body)).status

        async def post_call_api(path: str, body: dict[str, Any]) -> int:
            json = "application/json"
            status, _ = await through_call_api(
                api, "POST", path, body=body, content_type=json, query=[], timeout=30.0
            )
            return status

        post = post_own if own else post_call_api
        await bind_all(pending_of(dict(listing.body), scheduler), nodes, post, in_flight)
    finally:
        await api.close()


async def raw_aiohttp_binder(kubeconfig: str, scheduler: str, in_flight: int) -> None:
    """The binder on a bare aiohttp session: client certificate from the kubeconfig, bytes in, bytes out."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    server = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    workdir = Path(tempfile.mkdtemp(prefix="gpuq-raw-"))
    for name, key in (("ca", "certificate-authority-data"), ("crt", "client-certificate-data")):
        (workdir / name).write_bytes(base64.b64decode(server.get(key) or user.get(key)))
    (workdir / "key").write_bytes(base64.b64decode(user["client-key-data"]))
    context = ssl.create_default_context(cafile=str(workdir / "ca"))
    context.load_cert_chain(workdir / "crt", workdir / "key")
    base = server["server"]
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    connector = aiohttp.TCPConnector(limit=in_flight, ssl=context)
    async with aiohttp.ClientSession(base, connector=connector, headers=headers) as session:

        async def get(path: str, **params: str) -> dict[str, Any]:
            async with session.get(path, params=params) as reply:
                decoded: dict[str, Any] = orjson.loads(await reply.read())
                return decoded

        async def post(path: str, body: dict[str, Any]) -> int:
            async with session.post(path, data=orjson.dumps(body)) as reply:
                await reply.read()
                return reply.status

        pods = pending_of(await get("/api/v1/pods", fieldSelector=PENDING), scheduler)
        nodes = [n["metadata"]["name"] for n in (await get("/api/v1/nodes"))["items"]]
        await bind_all(pods, nodes, post, in_flight)


# ------------------------------------------------------------------ one run


@dataclass(frozen=True)
class Result:
    workload: str
    contender: str
    bound: int
    rate: float
    cpu_per_pod: float
    first_bind: float
    plane_cpu_per_pod: float  # kube-apiserver + etcd, over the same span
    peak_rss_mb: float  # the contender's (the standby's, with --takeover)
    # --takeover: the pending pods' creation rate (pods/s). They are created after the kill, so a
    # contender binding each as it comes shows this rate, not its own: its pods/s is capped here.
    arrival_rate: float = float("nan")


# gpuq's configuration for the placement workloads: its default one with Volcano's nodeorder (default
# weights), so the preferred terms and the system default spreading are scored as kube-scheduler does.
PLACEMENT_CONFIG = DEFAULT_CONFIG_YAML + "  - name: nodeorder\n"


def contender_argv(
    contender: str,
    plane: ControlPlane,
    workdir: Path,
    args: argparse.Namespace,
    workload: str = "plain",
    *,
    replica: str = "",
) -> list[str]:
    """The command line of ``contender``; ``replica`` (--takeover) names one of two replicas with
    leader election."""
    if contender == "gpuq":
        (port,) = free_ports(1)
        with_config: list[str] = []
        if workload in WORKLOADS and workload != "plain":  # --dra's runs: the default configuration
            path = workdir / "gpuq-scheduler.conf"
            path.write_text(PLACEMENT_CONFIG)
            with_config = ["--config", str(path)]
        profile = ["-m", "cProfile", "-o", args.profile] if args.profile else []
        election = ["--leader-elect", "--leader-elect-resource-namespace", "default"]
        election = [*election, "--leader-elect-identity", replica] if args.leader_elect or replica else []
        return [
            *(
                sys.executable,
                *profile,
                "-m",
                "gpuq_k8s.cli",
                "scheduler",
                "--kubeconfig",
                str(plane.kubeconfig),
            ),
            *("--scheduler-name", NAME, "--metrics-port", str(port), "--bind-address", "127.0.0.1"),
            *(["--bind-concurrency", str(args.bind_concurrency)] if args.bind_concurrency else []),
            *election,
            *with_config,
        ]
    if contender == "kube-scheduler":
        config = kube_scheduler_config(plane.kubeconfig, NAME, qps=5000)
        if replica or args.leader_elect:  # client-go's default timings, as gpuq's
            config["leaderElection"] = {
                "leaderElect": True,
                "resourceLock": "leases",
                "resourceNamespace": "default",
                "resourceName": "bench-kube-scheduler",
            }
        path = workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        return [str(plane.binaries.kube_scheduler), f"--config={path}", "--secure-port=0", "-v=1"]
    binder = {"raw": "asyncio", "raw-gpuq": "gpuq"}.get(contender, "aiohttp")
    return [
        sys.executable,
        __file__,
        *("--binder", binder, "--kubeconfig", str(plane.kubeconfig)),
        *("--raw-in-flight", str(args.raw_in_flight)),
    ]


async def run_once(contender: str, args: argparse.Namespace, workload: str = "plain") -> Result:
    pending = 0 if args.takeover else args.pods  # --takeover: created once the leader is killed
    async with fresh_cluster(args.nodes, pending, args.existing, workload) as (plane, api, workdir):
        return await contend(contender, args, plane, api, workdir, workload=workload)


async def lease_holder(api: Any, name: str) -> str:
    reply = await call(api, "GET", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}")
    return str((reply.body.get("spec") or {}).get("holderIdentity") or "") if reply.ok else ""


async def until(probe: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"--takeover: {what} not within {timeout:.0f}s")
        await asyncio.sleep(0.2)


async def take_over(
    contender: str, args: argparse.Namespace, plane: ControlPlane, api: Any, workdir: Path, *, workload: str
) -> tuple[subprocess.Popen[bytes], float, float]:
    """--takeover: the leader and a settled standby; the leader killed, then the pending pods created.
    Returns the standby, the moment of the kill and the pending pods' creation rate (pods/s)."""
    lease = "gpuq-scheduler" if contender == "gpuq" else "bench-kube-scheduler"
    # Logged once a replica's caches are in and it waits for the Lease (gpuq; client-go's elector).
    standing_by = b"waiting for Lease" if contender == "gpuq" else b"Attempting to acquire leader lease"
    logs = {r: workdir / f"{contender}-{r}.log" for r in ("leader", "standby")}

    def start(replica: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            contender_argv(contender, plane, workdir, args, workload, replica=replica),
            stdout=logs[replica].open("wb"),
            stderr=subprocess.STDOUT,
        )

    async def held() -> bool:
        return bool(await lease_holder(api, lease))

    async def settled() -> bool:
        return standing_by in logs["standby"].read_bytes()

    leader = start("leader")
    await until(held, args.timeout, "the leader takes the Lease")
    standby = start("standby")
    await until(settled, args.timeout, "the standby lists and waits for the Lease")
    await asyncio.sleep(3)  # past its first tries at the Lease
    leader.kill()
    killed = time.monotonic()
    leader.wait(30)
    began = time.monotonic()
    await populate(Cluster(api, "bench", "bench"), 0, args.pods, workload=workload)
    return standby, killed, args.pods / max(time.monotonic() - began, 1e-9)


async def contend(
    contender: str,
    args: argparse.Namespace,
    plane: ControlPlane,
    api: Any,
    workdir: Path,
    *,
    workload: str = "plain",
) -> Result:
    process: subprocess.Popen[bytes] | None = None
    try:
        bound_at: dict[str, float] = {}
        done = asyncio.Event()
        cpu_at_first = cpu_at_last = 0.0
        plane_at_first = plane_at_last = 0.0

        def plane_cpu() -> float:
            return sum(cpu_seconds(pid) for pid in plane.pids.values())

        def on_pod(change: Change) -> None:
            nonlocal cpu_at_first, cpu_at_last, plane_at_first, plane_at_last
            if change.type == "delete" or not (change.obj.get("spec") or {}).get("nodeName"):
                return
            if not change.key[1].startswith("p"):
                return  # one of the --existing pods, bound before the contender started
            if change.key[1] not in bound_at:
                bound_at[change.key[1]] = time.monotonic()
                if process is not None and process.poll() is None:
                    cpu_at_last = cpu_seconds(process.pid)
                    if len(bound_at) == 1:
                        cpu_at_first = cpu_at_last
                # The control plane's CPU at the first and the last bind (and every 100th, in case
                # the run times out): three more /proc reads per bind would load this process.
                if len(bound_at) == 1 or len(bound_at) % 100 == 0 or len(bound_at) >= args.pods:
                    plane_at_last = plane_cpu()
                    if len(bound_at) == 1:
                        plane_at_first = plane_at_last
                if len(bound_at) >= args.pods:
                    done.set()

        watcher = Informer(api, kinds.POD, handlers=[on_pod])
        watch_task = asyncio.create_task(watcher.run())
        await watcher.synced.wait()
        arrival = float("nan")
        wall_started = time.time()
        if args.takeover:
            process, started, arrival = await take_over(
                contender, args, plane, api, workdir, workload=workload
            )
        else:
            log = (workdir / f"{contender}.log").open("wb")
            started = time.monotonic()
            wall_started = time.time()
            process = subprocess.Popen(
                contender_argv(contender, plane, workdir, args, workload),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            await asyncio.wait_for(done.wait(), timeout=args.timeout)
        except TimeoutError:
            print(f"{contender}: timeout, {len(bound_at)} of {args.pods} bound", flush=True)
        if process.poll() is None and bound_at:
            cpu_at_last = cpu_seconds(process.pid)
        rss = peak_rss_mb(process.pid)
        watch_task.cancel()
        times = sorted(bound_at.values())
        span = times[-1] - times[0] if len(times) >= 2 else float("nan")
        result = Result(
            workload,
            contender,
            len(times),
            (len(times) - 1) / span if len(times) >= 2 else 0.0,
            (cpu_at_last - cpu_at_first) / max(len(times) - 1, 1),
            times[0] - started if times else float("nan"),
            (plane_at_last - plane_at_first) / max(len(times) - 1, 1),
            rss,
            arrival,
        )
        print(
            f"{workload:>9} {contender:>15}: {result.bound} bound, "
            f"{result.rate:.0f} pods/s (first bind to last), "
            f"{1000 * result.cpu_per_pod:.2f} ms CPU per bound pod (steady state), "
            f"kube-apiserver + etcd {1000 * result.plane_cpu_per_pod:.2f} ms, "
            f"first bind {result.first_bind:.1f}s after {'the kill' if args.takeover else 'start'}, "
            f"peak RSS {result.peak_rss_mb:.0f} MB; load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        if contender == "gpuq" and not args.takeover:
            print(
                f"{workload:>9} {contender:>15}: {start_phases(workdir / 'gpuq.log', wall_started)}",
                flush=True,
            )
        if args.takeover:
            print(
                f"{workload:>9} {contender:>15}: pending pods created at {arrival:.0f}/s after the kill; "
                f"bound at {result.rate / arrival:.0%} of it (near 100%: capped by creation, not by "
                "the contender)",
                flush=True,
            )
        return result
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)


# gpuq's start as its log tells it (scheduler/service.py's lines; logging's default time format).
_START_LINES: Final = (("metrics and probes on", "metrics port"), ("caches synced", "caches synced"))


def start_phases(log: Path, started: float) -> str:
    """When gpuq's log says its metrics port opened (imports and set-up done) and its caches were
    synced (lists and feed done), in seconds after the process was started (wall clock ``started``)."""
    at: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        for text, what in _START_LINES:
            if text in line and what not in at:
                stamp, _, millis = line[:23].partition(",")
                try:
                    at[what] = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
                except ValueError:
                    continue
    if len(at) < len(_START_LINES):
        return f"start phases not found in {log}"
    port, synced = at["metrics port"] - started, at["caches synced"] - started
    return (
        f"metrics port {port:.2f}s after start, caches synced {synced:.2f}s"
        f" ({synced - port:.2f}s of lists and feed)"
    )


def summary(results: list[Result]) -> None:
    for workload in dict.fromkeys(r.workload for r in results):
        print(f"\nworkload {workload}")
        summary_of([r for r in results if r.workload == workload])


def summary_of(results: list[Result]) -> None:
    print("contender        pods/s (each run)          median  ms CPU/pod (median)  apiserver+etcd")
    medians: dict[str, float] = {}
    for contender in dict.fromkeys(r.contender for r in results):
        mine = [r for r in results if r.contender == contender]
        medians[contender] = statistics.median(r.rate for r in mine)
        rates = ", ".join(f"{r.rate:.0f}" for r in mine)
        cpu = 1000 * statistics.median(r.cpu_per_pod for r in mine)
        plane = 1000 * statistics.median(r.plane_cpu_per_pod for r in mine)
        print(f"{contender:<16} {rates:<26} {medians[contender]:6.0f}  {cpu:<19.2f}  {plane:.2f}")
    gpuq = medians.get("gpuq")
    if gpuq:
        for other in ("raw", "raw-gpuq", "raw-aiohttp", "kube-scheduler"):
            if medians.get(other):
                print(f"ratio gpuq/{other}: {gpuq / medians[other]:.2f}")
    firsts = {c: statistics.median(r.first_bind for r in results if r.contender == c) for c in medians}
    for contender, first in firsts.items():
        rss = statistics.median(r.peak_rss_mb for r in results if r.contender == contender)
        print(f"{contender}: first bind {first:.1f}s (median), peak RSS {rss:.0f} MB (median)")
    if "gpuq" in firsts and firsts.get("kube-scheduler"):
        print(f"first bind gpuq/kube-scheduler: {firsts['gpuq'] / firsts['kube-scheduler']:.2f}")
    arrivals = [r.arrival_rate for r in results if r.arrival_rate == r.arrival_rate]  # not nan
    if arrivals:
        print(
            f"--takeover: pending pods created at {statistics.median(arrivals):.0f}/s (median): a "
            "contender's pods/s near it is capped by creation, and a ratio of such rates understates "
            "the faster one"
        )


async def main(args: argparse.Namespace) -> None:
    if args.dra:  # issue 26's DRA mode: tests/bench/side_by_side_dra.py
        if args.contenders == ",".join(CONTENDERS):
            args.contenders = "gpuq,kube-scheduler"
        if args.takeover or args.existing or args.workloads != "plain":
            raise SystemExit("--dra: no --takeover, --existing or --workloads with it")
        await side_by_side_dra.main(args, contend, summary)
        return
    contenders = args.contenders.split(",")
    unknown = [c for c in contenders if c not in CONTENDERS]
    if unknown:
        raise SystemExit(
            f"--contenders: unknown {', '.join(unknown)}: expected some of {', '.join(CONTENDERS)}"
        )
    workloads = args.workloads.split(",")
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        raise SystemExit(
            f"--workloads: unknown {', '.join(unknown)}: expected some of {', '.join(WORKLOADS)}"
        )
    results = []
    for workload in workloads:
        for repeat in range(args.repeats):
            for contender in contenders:
                print(f"{workload}: run {repeat + 1}/{args.repeats}: {contender}", flush=True)
                results.append(await run_once(contender, args, workload))
    summary(results)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument(
        "--workloads", default="plain", help=f"some of {','.join(WORKLOADS)} (issue 23's placement rules)"
    )
    parser.add_argument("--bind-concurrency", type=int, default=0, help="gpuq's (default: its own default)")
    parser.add_argument(
        "--existing", type=int, default=0, help="pods bound before the contender starts (cold start)"
    )
    parser.add_argument("--raw-in-flight", type=int, default=64, help="the raw binders' requests in flight")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--profile", metavar="FILE", help="run gpuq under cProfile, stats to FILE")
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help="gpuq and kube-scheduler with leader election, as deployed (Leases in default, free)",
    )
    parser.add_argument(
        "--takeover",
        action="store_true",
        help="a standby taking over: first bind counted from the leader's kill (gpuq, kube-scheduler)",
    )
    parser.add_argument(
        "--dra",
        action="store_true",
        help="DRA: every pod with a template claim, slices of --dra-devices GPUs per node "
        "(tests/bench/side_by_side_dra.py; gpuq and kube-scheduler)",
    )
    parser.add_argument("--dra-devices", type=int, default=8, help="--dra: GPUs per node")
    parser.add_argument(
        "--dra-timing",
        choices=side_by_side_dra.TIMINGS,
        default="claims-first",
        help="--dra: every claim made before the contender starts, or the controller beside it",
    )
    parser.add_argument("--binder", choices=("asyncio", "gpuq", "aiohttp"), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.binder:
        if arguments.binder == "aiohttp":
            asyncio.run(raw_aiohttp_binder(arguments.kubeconfig, NAME, arguments.raw_in_flight))
        else:
            own = arguments.binder == "gpuq"
            asyncio.run(raw_client_binder(arguments.kubeconfig, NAME, arguments.raw_in_flight, own=own))
    else:
        asyncio.run(main(arguments))
