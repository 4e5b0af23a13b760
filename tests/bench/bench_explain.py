"""``gpuq simulate --explain`` at 5,000 pods and 500 nodes: peak RSS, wall and CPU time and JSON size
(prints figures; not a test).

    python tests/bench/bench_explain.py                 # 500 nodes, 5,000 pods, one run per mode
    python tests/bench/bench_explain.py --repeat 3      # best of 3 per mode (a shared machine is noisy)

Each mode runs the real command line in a fresh process (``gpuq simulate -f DIR -o json ...``, stdout
to a file) that reports its own peak RSS (``ru_maxrss``) and wall time from start to exit, imports
included: the reference run without ``--explain``, ``--explain`` (the pods left pending, the default)
and ``--explain=all`` (every pod: 2.5 million node entries). The target (issue 27): under 500 MB and
15 s with ``--explain``; before the change ``--explain`` explained every pod, held the whole report in
memory and took 3.4 GB, 35 s and 371 MB of JSON (the reference run 163 MB, 5.7 s).

The input is written as manifests, as a user's would be: 60 % GPU nodes of three card types (8 cards
each), 40 % CPU nodes; pods in ten namespaces, 30 % asking for cards through three team Queues whose
card quotas leave about a fifth of the GPU pods pending, some with node affinity or selectors.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

CARDS = ("NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4")
MODES = {"reference": [], "explain": ["--explain"], "explain=all": ["--explain=all"]}
TARGET_MB, TARGET_S = 500, 15.0


def _nodes(count: int) -> list[dict[str, Any]]:
    nodes = []
    for i in range(count):
        labels = {"kubernetes.io/hostname": f"node-{i:05d}", "zone": f"z{i % 4}"}
        allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
        if i % 5 < 3:
            labels["nvidia.com/gpu.product"] = CARDS[i % 3]
            labels["nvidia.com/gpu.memory"] = "81920"
            allocatable["nvidia.com/gpu"] = "8"
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"node-{i:05d}", "labels": labels},
                "status": {"allocatable": allocatable},
            }
        )
    return nodes


def _queues(gpu_pods: int) -> list[dict[str, Any]]:
    # About 1.6 cards per GPU pod; a quota of 0.8 of each team's share leaves some pending.
    share = max(1, int(gpu_pods * 1.6 / 3 / 3 * 0.8))
    return [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {
                "name": f"team-{t}",
                "annotations": {"volcano.sh/card.quota": json.dumps(dict.fromkeys(CARDS, share))},
            },
            "spec": {"capability": {"cpu": "100000", "memory": "1000Ti"}},
        }
        for t in range(3)
    ]


def _pods(count: int, rng: random.Random) -> list[dict[str, Any]]:
    pods = []
    for i in range(count):
        requests: dict[str, Any] = {"cpu": f"{rng.choice([250, 500, 1000, 2000])}m", "memory": "2Gi"}
        annotations = {"scheduling.volcano.sh/queue-name": f"team-{i % 3}"}
        spec: dict[str, Any] = {"schedulerName": "gpuq-scheduler"}
        if i % 10 < 3:
            requests["nvidia.com/gpu"] = str(rng.choice([1, 1, 2, 4]))
            annotations["volcano.sh/card.name"] = rng.choice([CARDS[0], CARDS[1], f"{CARDS[0]}|{CARDS[1]}"])
        elif i % 10 == 5:
            spec["nodeSelector"] = {"zone": f"z{i % 4}"}
        spec["containers"] = [{"name": "c", "resources": {"requests": requests}}]
        meta = {
            "name": f"p-{i:06d}",
            "namespace": f"ns-{i % 10}",
            "annotations": annotations,
            "creationTimestamp": f"2024-01-01T00:{i // 3600 % 60:02d}:{i // 60 % 60:02d}Z",
        }
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return pods


def write_input(directory: Path, nodes: int, pods: int, seed: int = 1) -> None:
    made = _pods(pods, random.Random(seed))
    gpu = sum(1 for p in made if "nvidia.com/gpu" in p["spec"]["containers"][0]["resources"]["requests"])
    (directory / "nodes.yaml").write_text(yaml.safe_dump_all(_nodes(nodes)))
    (directory / "queues.yaml").write_text(yaml.safe_dump_all(_queues(gpu)))
    (directory / "pods.yaml").write_text(yaml.safe_dump_all(made))


def _child(out_path: str, argv: list[str]) -> int:
    """Run the command line in this process, stdout to ``out_path``; print peak RSS and time as JSON."""
    start = time.perf_counter()
    from gpuq_k8s.cli import main  # noqa: PLC0415 - the imports are part of what is measured

    with open(out_path, "w", encoding="utf-8") as out:
        sys.stdout = out
        code = main(argv)
        out.flush()
        sys.stdout = sys.__stdout__
    elapsed = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    print(json.dumps({"code": code, "seconds": elapsed, "cpu": cpu, "peak_mb": usage.ru_maxrss / 1024}))
    return 0


def _measure(directory: Path, extra: list[str]) -> dict[str, Any]:
    out = directory / "out.json"
    argv = ["simulate", "-f", str(directory), "-o", "json", *extra]
    result = subprocess.run(
        [sys.executable, "-m", "tests.bench.bench_explain", "--child", str(out), "--", *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    figures["json_mb"] = out.stat().st_size / 1e6
    with out.open(encoding="utf-8") as handle:
        report = json.load(handle)
    figures["pending"] = sum(1 for p in report["pods"] if p["phase"] == "Pending")
    figures["explained"] = sum(1 for p in report["pods"] if "nodes" in p)
    out.unlink()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args.child, args.argv)
    print(
        f"load average {os.getloadavg()[0]:.1f}; {args.nodes} nodes, {args.pods} pods; best of {args.repeat}"
    )
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-explain-") as tmp:
        directory = Path(tmp)
        write_input(directory, args.nodes, args.pods)
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeat):
            for mode, extra in MODES.items():
                figures = _measure(directory, extra)
                if mode not in best or figures["seconds"] < best[mode]["seconds"]:
                    best[mode] = figures
        reference = best["reference"]
        for mode, f in best.items():
            print(
                f"{mode:12s} exit {f['code']}  {f['seconds']:6.2f} s (CPU {f['cpu']:5.2f} s)  "
                f"peak RSS {f['peak_mb']:7.1f} MB  JSON {f['json_mb']:7.1f} MB  pending {f['pending']}  "
                f"explained {f['explained']}  (x{f['seconds'] / reference['seconds']:.2f} time, "
                f"x{f['peak_mb'] / reference['peak_mb']:.2f} RSS of the reference)"
            )
        e = best["explain"]
        within = e["peak_mb"] < TARGET_MB and e["seconds"] < TARGET_S
        print(
            f"--explain: {e['peak_mb']:.0f} MB, {e['seconds']:.1f} s (CPU {e['cpu']:.1f} s); "
            f"target under {TARGET_MB} MB and {TARGET_S:.0f} s: {'met' if within else 'NOT met'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
