"""The trusted wall clock of a call while builds run beside it in the same interpreter (CPU host).

    python bench/wall_gil.py --calls 3000 --build-threads 2 --out bench/results/wall_gil.txt

The local evaluator measures every timed call's wall in the env's own process (``trusted/session.py``,
``_call``), where the builds of other envs run on threads (``pipeline.run_batch``, one thread per env
with ``ptxgym eval --concurrency``). The interpreter's lock is shared: a thread back from a blocking call
(the reply's read) waits for it while another runs Python. This bench drives a real native runner on the
CPU (its host-blob path: ``--host-blobs``, the trusted side's ``NativeHandle``, the worker protocol) with
a trivial candidate (``c = a + alpha * b`` over 1024 floats), ``--calls`` round trips a row, each call's
wall taken as the session takes it (command sent to reply read), 1 ms apart, under:

* ``idle``: nothing else runs;
* ``python all the time``: one thread parsing a SASS listing without pause (the mechanism at its worst);
* ``builds, scan in this process``: ``--build-threads`` threads building distinct expert-GEMM variants
  one after another (real nvcc), the backstop's scan in this process (``PTXGYM_SCAN_HELPERS=0``);
* ``builds, scan in helpers``: the same with the scan in helper processes (``cpu/scan_helpers.py``, the
  default).

With ``--exchange`` every row's calls alternate between that Python read and the timed exchange
(``trusted/exchange.py``: the command, the reply and the clock in one C call off the interpreter's lock,
the wall ``Session._call`` takes since the twentieth session), and each row prints both, side by side
under the same background. The two build rows run ``--rounds`` times, their order alternating. Per row:
median, quartiles, p90, p99 and maximum of the wall (ms), and for the build rows the builds that ended
while the calls ran and their interpreter CPU (the building thread's ``thread_time``); a build thread's
failure is printed in its row (and the script exits 1). On a host with few cores the builds' compilers
also take CPU from the runner and the timing thread: the difference between the two build rows is the
interpreter's lock alone. A GPU call's wall has the same round trip inside it (plus the GPU's work), so
what the rows add to the round trip they add to a timed call's wall, and to the overhead the wall
cross-check must allow.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from provenance import commit
from throughput import candidate

from ptxgym.cpu.sass import dump_sass, parse_sass
from ptxgym.cpu.toolchain import find_toolchain
from ptxgym.evaluation.protocol import ApplySandbox, Attach, Call, Load, ScalarArg, TensorArg, VmmBlob, VmmRun
from ptxgym.evaluation.runner import jail as runner_jail
from ptxgym.evaluation.runner.build import build_host_library, build_runner, plan
from ptxgym.evaluation.trusted.native_worker import NativeHandle, NativeSpec
from ptxgym.pipeline import Pipeline, Submission
from ptxgym.records.tasks import get_task

N = 1024
PAGE = 4096
RUN = 3 * N * 4

SOURCE = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
using tvm::ffi::TensorView;
void run(TensorView a, TensorView b, TensorView c, double alpha) {
  const float* x = static_cast<const float*>(a.data_ptr());
  const float* y = static_cast<const float*>(b.data_ptr());
  float* z = static_cast<float*>(c.data_ptr());
  for (int64_t i = 0; i < a.numel(); ++i) z[i] = x[i] + float(alpha) * y[i];
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
"""


def runner(binary: Path, so: Path, work: Path) -> tuple[NativeHandle, list[int]]:
    """A runner attached to a one-run host blob, sandboxed, with the candidate loaded."""
    handle = NativeHandle(NativeSpec(binary, 0, None, runner_jail.cupti_files(plan().cupti_lib)), work)
    handle.hello = handle.receive(30.0)
    fds = [os.memfd_create("ptxgym-bench-run0")]
    os.ftruncate(fds[0], RUN)

    def t(role: str, off: int) -> TensorArg:
        return TensorArg(role=role, offset=off, shape=(N,), dtype="float32")

    sets = [[t("in", 0), t("in", N * 4), t("out", 2 * N * 4), ScalarArg(value=2.0)]]
    vmm = VmmBlob(total=RUN, page=PAGE, runs=[VmmRun(offset=0, size=RUN)])
    attach = Attach(arena="bench", blob=None, vmm=vmm, sets=sets, flush_bytes=0, cupti=False)
    for reply in (
        handle.request(attach, 30.0, fds=fds),
        handle.request(ApplySandbox(mode="on", scratch=str(handle.scratch)), 30.0),
        handle.request(Load(kind="so", path=str(so), entry="run"), 30.0),
    ):
        if not reply.ok:
            raise SystemExit(f"the runner refused the set-up: {reply}")
    return handle, fds


def walls(handle: NativeHandle, calls: int, exchange: bool = False) -> tuple[list[float], list[float]]:
    """``calls`` round trips, each as ``Session._call`` times one (command to reply), 1 ms apart.

    ``exchange``: every other call through the timed exchange (its own clock, off the interpreter's
    lock), the rest read in Python; (Python reads, exchanges).
    """
    python, native = [], []
    for k in range(calls):
        if exchange and k % 2:
            reply, _, wall = handle.timed_request(Call(set=0), 30.0, (), 0)
            native.append(wall)
        else:
            t0 = time.perf_counter()
            reply = handle.request(Call(set=0), 30.0)
            python.append((time.perf_counter() - t0) * 1e3)
        if not reply.ok:
            raise SystemExit(f"a call failed: {reply}")
        time.sleep(0.001)
    return python, native


def summary(label: str, ms: list[float], extra: str = "") -> str:
    q = sorted(ms)
    n = len(q)

    def at(p: float) -> float:
        return q[min(n - 1, int(p * n))]

    return (
        f"{label:44s} | {statistics.median(q):6.3f} | {at(0.25):6.3f} | {at(0.75):6.3f} | {at(0.9):6.3f} | "
        f"{at(0.99):6.3f} | {q[-1]:7.3f} | {extra}"
    )


class Background:
    """Threads doing the interpreter work of a row until stopped; a thread's failure is kept, not lost."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.builds: list[tuple[float, float]] = []
        """(end time, interpreter CPU seconds) of each finished build."""
        self.errors: list[str] = []

    def start(self, target, count: int) -> None:
        def guarded(k: int) -> None:
            try:
                target(k)
            except BaseException as exc:  # noqa: BLE001 - reported in the row (a thread's exit is silent)
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])

        for k in range(count):
            thread = threading.Thread(target=guarded, args=(k,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--build-threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="build rows' rounds, their order alternating")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--exchange", action="store_true", help="also the timed exchange, calls alternating")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ptxgym-wall-gil-"))
    binary = build_runner(work / "cache")
    so = build_host_library(SOURCE, work)
    pipeline = Pipeline(get_task("Gemm-sm90a"))
    warm = pipeline.prepare(Submission(candidate("fast", random.randrange(10**9), "gilwarm")))
    if warm.candidate is None:
        raise SystemExit(f"the expert variant did not build: {warm.feedback.status.value}")
    listing = dump_sass(warm.candidate.so_path, find_toolchain())
    arch = get_task("Gemm-sm90a").arch_spec
    header = (
        f"# bench/wall_gil.py --calls {args.calls} --build-threads {args.build_threads} "
        f"--rounds {args.rounds}{' --exchange' if args.exchange else ''}, "
        f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, commit {commit()}, this CPU host "
        f"({os.cpu_count()} cores); the native runner's host path, a trivial candidate"
    )
    lines = [
        header,
        f"{'row':44s} | median | p25    | p75    | p90    | p99    | max ms  | background",
    ]
    print("\n".join(lines), flush=True)

    failed: list[str] = []

    def row(label: str, background: Background | None) -> None:
        handle, fds = runner(binary, so, work)
        try:
            started = time.perf_counter()
            got, native = walls(handle, args.calls, args.exchange)
            ended = time.perf_counter()
        finally:
            handle.kill()
            for fd in fds:
                os.close(fd)
        extra = ""
        if background is not None:
            background.join()
            within = [cpu for end, cpu in background.builds if started <= end <= ended]
            if within:
                cpu = statistics.median(within)
                extra = (
                    f"{len(within)} builds ended during the calls, interpreter CPU {cpu:.3f} s each (median)"
                )
            if background.errors:
                extra += f"; FAILED: {background.errors[0]}"
                failed.append(label)
        shown = [summary(f"{label}, python read" if native else label, got, extra)]
        if native:
            shown.append(summary(f"{label}, exchange", native, extra))
        lines.extend(shown)
        print("\n".join(shown), flush=True)

    row("idle", None)

    parsing = Background()

    def parse(_k: int) -> None:
        while not parsing.stop.is_set():
            parse_sass(listing, arch)

    parsing.start(parse, 1)
    time.sleep(0.5)
    row("python all the time", parsing)

    order = (("builds, scan in this process", "0"), ("builds, scan in helpers", ""))
    for label, helpers in [x for r in range(args.rounds) for x in (order if r % 2 == 0 else order[::-1])]:
        os.environ["PTXGYM_SCAN_HELPERS"] = helpers
        building = Background()

        def build(k: int, building: Background = building, label: str = label) -> None:
            while not building.stop.is_set():
                text = candidate("fast", random.randrange(10**9), f"gil{k}")
                t = time.thread_time()
                prepared = pipeline.prepare(Submission(text))
                if prepared.candidate is None:
                    raise SystemExit(f"a variant did not build ({label}): {prepared.feedback.status.value}")
                building.builds.append((time.perf_counter(), time.thread_time() - t))

        building.start(build, args.build_threads)
        time.sleep(1.0)
        row(label, building)
    os.environ.pop("PTXGYM_SCAN_HELPERS", None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
