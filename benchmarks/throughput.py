"""Throughput (issue 5): calls per second with 1, 2 and 4 threads sharing one model.

Runners, each with every thread single-threaded inside (``torch.set_num_threads(1)`` on the
thread: many single-threaded runtimes):

* ``ours``: one ``StaticModule`` shared by all threads, each call ``mod(x)`` (the pool);
* ``pytorch_sr``: PyTorch's C++ Static Runtime, one ``torch._C._jit_to_static_module`` of the
  frozen module per thread (its ``__call__`` uses one cached runtime, not thread-safe);
* ``ours_processes``: ours in N worker processes (spawned), one thread each: the process-
  level replicas that sidestep the GIL.

Each (runner, threads) runs ``--seconds`` per sample, ``--repeats`` samples, median
reported. Besides calls/s it reports CPU utilisation: process CPU time (user + system, all
threads, from ``resource.getrusage``) over wall time, as a share of the machine's cores.
Python holds the GIL between kernels, so threads of ours overlap only inside kernels that
release it.

    python benchmarks/throughput.py                       # mlp at batch 1 and 64, ~1 minute
    python benchmarks/throughput.py --models mlp,multi_head_attention --batches 1 --seconds 1
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

import static_runtime as sr
from static_runtime.models import MODELS


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _scripted(name: str) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(MODELS[name].build())


def _frozen(name: str) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.freeze(_scripted(name))


def _run_threads(make_call: Callable[[int], Callable[[], Any]], threads: int,
                 seconds: float) -> tuple[float, float]:
    """Calls per second over all threads and CPU utilisation (share of all cores)."""
    calls = [0] * threads
    ready = threading.Barrier(threads + 1)
    stop = threading.Event()
    fns = [make_call(t) for t in range(threads)]

    def work(t: int) -> None:
        torch.set_num_threads(1)
        fn = fns[t]
        fn()
        ready.wait()
        n = 0
        while not stop.is_set():
            for _ in range(20):
                fn()
            n += 20
        calls[t] = n

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    ready.wait()
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    wall, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
    return sum(calls) / wall, cpu / wall / (os.cpu_count() or 1)


def _process_worker(name: str, batch: int, seconds: float, start, out) -> None:
    torch.set_num_threads(1)
    mod = sr.StaticModule(_scripted(name))
    x = MODELS[name].example_inputs(batch)
    mod(*x)
    start.wait()
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            mod(*x)
        n += 20
    out.put((n, time.perf_counter() - t0, time.process_time() - c0))


def _run_processes(name: str, batch: int, processes: int, seconds: float) -> tuple[float, float]:
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(processes)
    out = ctx.Queue()
    procs = [ctx.Process(target=_process_worker, args=(name, batch, seconds, start, out))
             for _ in range(processes)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    rate = sum(n / wall for n, wall, _ in results)
    return rate, sum(cpu / wall for _, wall, cpu in results) / (os.cpu_count() or 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--seconds", type=float, default=0.7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-processes", action="store_true")
    args = ap.parse_args()
    threads_list = [int(t) for t in args.threads.split(",")]
    print(f"torch {torch.__version__}, {os.cpu_count()} cores; {args.seconds} s per sample, "
          f"median of {args.repeats}; every thread single-threaded inside")
    print(f"{'model':6s} {'batch':>5s} {'runner':15s} {'threads':>7s} {'calls/s':>10s} "
          f"{'vs 1':>6s} {'CPU use':>8s}")
    for name in args.models.split(","):
        frozen = _frozen(name)
        mod = sr.StaticModule(_scripted(name))
        for batch in (int(b) for b in args.batches.split(",")):
            x = MODELS[name].example_inputs(batch)
            want = frozen(*x)
            torch.testing.assert_close(mod(*x), want)
            runners: dict[str, Callable[[int], Callable[[], Any]]] = {
                "ours": lambda t, x=x, mod=mod: (lambda: mod(*x)),
                "pytorch_sr": lambda t, x=x, frozen=frozen: _cpp_sr(frozen, x),
            }
            for runner, make in runners.items():
                base = None
                for n in threads_list:
                    samples = [_run_threads(make, n, args.seconds) for _ in range(args.repeats)]
                    rate = statistics.median(s[0] for s in samples)
                    cpu = statistics.median(s[1] for s in samples)
                    base = base or rate
                    print(f"{name:6s} {batch:5d} {runner:15s} {n:7d} {rate:10.0f} "
                          f"{rate / base:6.2f} {cpu:8.0%}", flush=True)
            if not args.no_processes:
                base = None
                for n in threads_list:
                    rate, cpu = _run_processes(name, batch, n, args.seconds)
                    base = base or rate
                    print(f"{name:6s} {batch:5d} {'ours_processes':15s} {n:7d} {rate:10.0f} "
                          f"{rate / base:6.2f} {cpu:8.0%}", flush=True)


def _cpp_sr(frozen: torch.jit.ScriptModule, x: tuple) -> Callable[[], Any]:
    sm = torch._C._jit_to_static_module(frozen._c)
    return lambda: sm(*x)


if __name__ == "__main__":
    main()
