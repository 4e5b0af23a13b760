"""DRA device selectors per second with the two maintained Python CEL libraries (the choice in
common/model/devices/cel_env.py and docs/design.md "DRA devices").

Run: ``python tests/bench/bench_cel.py [--devices 2000] [--repeat 3]``. Prints selector evaluations per
second (best of N rounds) for four typical selectors over NVIDIA-style devices, each evaluation
including the device's activation, and the ratio:

* ``cel-expr-python`` (Google's cel-cpp): gpuq's environment as the allocator uses it, with
  Kubernetes' ``quantity``/``semver`` as protobuf-typed custom functions;
* ``cel-python`` (pure Python): the same expressions, ``quantity`` and ``compareTo`` as custom
  functions over plain integers (cheaper than Kubernetes' semantics, so its figure is an upper bound).

The issue's figures on this machine: 125,000-170,000/s for cel-expr-python, about 1,800/s for
cel-python. Importing this module does nothing; only ``main()`` measures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from gpuq_k8s.common.model.devices.cel_env import VersionText, compile_selector, device_data

SELECTORS = {
    "driver": 'device.driver == "gpu.nvidia.com"',
    "class": 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"',
    "product": 'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")',
    "memory >= 40Gi": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
}


def devices(count: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(gpuq device data, plain JSON device) pairs."""
    out = []
    for i in range(count):
        product = "NVIDIA H100 80GB HBM3" if i % 2 else "NVIDIA A100-SXM4-80GB"
        attrs = {"type": "gpu", "productName": product, "uuid": f"GPU-{i:08d}", "index": i % 8}
        memory = 80 * 2**30
        gpuq = device_data(
            "gpu.nvidia.com",
            False,
            {**attrs, "driverVersion": VersionText("550.54.15")},
            {"memory": Fraction(memory)},
        )
        plain = {
            "driver": "gpu.nvidia.com",
            "allowMultipleAllocations": False,
            "attributes": {"gpu.nvidia.com": attrs},
            "capacity": {"gpu.nvidia.com": {"memory": memory}},
        }
        out.append((gpuq, plain))
    return out


def rate(repeat: int, count: int, run: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return count / best


def cel_expr_python(expression: str, pool: list[tuple[dict[str, Any], dict[str, Any]]], repeat: int) -> float:
    selector = compile_selector(expression, "bench", "bench")
    evaluate = selector.evaluate

    def run() -> None:
        for data, _ in pool:
            evaluate(data)

    return rate(repeat, len(pool), run)


def cel_python(expression: str, pool: list[tuple[dict[str, Any], dict[str, Any]]], repeat: int) -> float:
    import celpy  # noqa: PLC0415 - a dev-only dependency of this benchmark
    import celpy.adapter  # noqa: PLC0415

    def quantity(text: Any) -> Any:
        return celpy.celtypes.IntType(
            int(Fraction(str(text).replace("Gi", "")) * (2**30 if "Gi" in str(text) else 1))
        )

    def compare_to(a: Any, b: Any) -> Any:
        return celpy.celtypes.IntType((a > b) - (a < b))

    env = celpy.Environment()
    program = env.program(env.compile(expression), functions={"quantity": quantity, "compareTo": compare_to})
    sample = pool[: max(1, len(pool) // 20)]  # about 1,800/s: a slice of the devices is enough

    def run() -> None:
        for _, plain in sample:
            program.evaluate({"device": celpy.adapter.json_to_cel(plain)})

    return rate(repeat, len(sample), run)


def main(argv: list[str] | None = None) -> dict[str, tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    pool = devices(args.devices)
    results = {}
    print(f"DRA selectors over {args.devices} devices, evaluations per second (best of {args.repeat})")
    print(f"{'selector':<26} {'cel-expr-python':>16} {'cel-python':>12} {'ratio':>8}")
    for name, expression in SELECTORS.items():
        fast = cel_expr_python(expression, pool, args.repeat)
        slow = cel_python(expression, pool, args.repeat)
        results[name] = (fast, slow)
        print(f"{name:<26} {fast:>16,.0f} {slow:>12,.0f} {fast / slow:>7.0f}x")
    return results


if __name__ == "__main__":
    main()
