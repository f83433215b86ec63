"""Build-stage timings on this machine: nvcc cold vs cached, and the CPU stages other than nvcc.

    python bench/build_bench.py                     # the TMA test kernel, 3 repeats
    python bench/build_bench.py --kernel tests/kernels/plain.cu --repeats 5 --json bench/results/build.json

Cold builds each use a fresh, empty cache directory; the cached figure is a cache hit of the same
solution. The static pipeline steps are timed on the same kernel: extraction from a model-style
response, the source policy, the artifact check of the built .so (readelf + objdump), and the SASS
census (cuobjdump, uncached and cached). Every figure is the median of its repeats.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ptxgym.cpu.build import BuildOutcome, build_solution
from ptxgym.cpu.extract import extract_code
from ptxgym.cpu.sass import sass_census
from ptxgym.cpu.screen import check_artifact, check_source
from ptxgym.cpu.toolchain import find_toolchain, libcuda_stub_symbols
from ptxgym.records.arch import get_arch
from ptxgym.records.schema import Solution

ROOT = Path(__file__).resolve().parents[1]


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def cache_dir(path: str) -> Iterator[None]:
    """Point PTXGYM_CACHE_DIR at ``path`` for the duration (ptxgym.records.settings reads it on every use)."""
    old = os.environ.get("PTXGYM_CACHE_DIR")
    os.environ["PTXGYM_CACHE_DIR"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PTXGYM_CACHE_DIR", None)
        else:
            os.environ["PTXGYM_CACHE_DIR"] = old


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", type=Path, default=ROOT / "tests" / "kernels" / "tma.cu")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--repeats", type=int, default=3, help="cold builds (each in a fresh cache)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    arch = get_arch(args.arch)
    source = args.kernel.read_text()
    start = time.perf_counter()
    toolchain = find_toolchain()
    discovery_s = time.perf_counter() - start
    solution = Solution.from_cuda_source(source, "bench", arch=arch.name)
    print(
        f"toolchain: nvcc {toolchain.nvcc_build} ({toolchain.source}), {os.cpu_count()} CPU cores; "
        f"kernel {args.kernel.name} for {arch.name}"
    )

    def build() -> BuildOutcome:
        return build_solution(solution, arch, toolchain=toolchain)

    colds = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="ptxgym-bench-") as cache, cache_dir(cache):
            start = time.perf_counter()
            outcome = build()
            colds.append(time.perf_counter() - start)
            if not outcome.ok:
                print(f"build failed: {outcome.message}", file=sys.stderr)
                return 1

    with tempfile.TemporaryDirectory(prefix="ptxgym-bench-") as cache, cache_dir(cache):
        so_path = build().so_path
        cached_s = median_time(build, 50)
        response = f"Here is the kernel.\n\n```cuda\n{source}```\n\nIt uses TMA."
        driver = libcuda_stub_symbols(toolchain)
        steps = {
            "extract": median_time(lambda: extract_code(response), 200),
            "policy (source)": median_time(lambda: check_source(source), 200),
            "artifact check (.so)": median_time(lambda: check_artifact(so_path, driver_names=driver), 10),
            "sass census (cuobjdump)": median_time(
                lambda: sass_census(so_path, arch, toolchain, use_cache=False), 5
            ),
            "sass census (cached)": median_time(lambda: sass_census(so_path, arch, toolchain), 50),
        }

    cold_s = statistics.median(colds)
    print(f"toolchain discovery (first call in a process): {discovery_s * 1000:.1f} ms")
    print(
        f"build cold   (median of {len(colds)}, fresh cache each): {cold_s:.3f} s  "
        f"[{', '.join(f'{c:.2f}' for c in colds)}]"
    )
    print(
        f"build cached (median of 50 cache hits): {cached_s * 1000:.2f} ms ({cold_s / cached_s:,.0f}x faster)"
    )
    print("static pipeline per step, excluding nvcc (median):")
    for name, seconds in steps.items():
        print(f"  {name:<26} {seconds * 1000:9.3f} ms")
    uncached = sum(v for k, v in steps.items() if k != "sass census (cached)")
    print(f"  {'total (uncached census)':<26} {uncached * 1000:9.3f} ms")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "kernel": args.kernel.name,
                    "arch": arch.name,
                    "nvcc": toolchain.nvcc_build,
                    "cpus": os.cpu_count(),
                    "discovery_s": discovery_s,
                    "cold_s": colds,
                    "cold_median_s": cold_s,
                    "cached_median_s": cached_s,
                    "steps_s": steps,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
