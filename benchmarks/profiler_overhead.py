"""What per-node timing costs: ``benchmark_individual_ops``'s loop with and without its
clock readings, for every built-in model (see ``static_runtime.runtime.metrics``).

    python benchmarks/profiler_overhead.py                 # batch 1, both executors (~1 min)
    python benchmarks/profiler_overhead.py --batches 1 --executors codegen --samples 51

Prints a Markdown table: µs per iteration untimed and timed (the fastest of many short
alternated samples), the difference per node, and an ordinary call for reference.
"""

from __future__ import annotations

import argparse
import warnings

import torch

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.runtime.metrics import measure_overhead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1")
    parser.add_argument("--executors", default="codegen,interpreter")
    parser.add_argument("--samples", type=int, default=101)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| model | batch | executor | top-level nodes | untimed µs | timed µs | overhead "
          "| ns / node | ordinary call µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        spec = MODELS[name]
        for batch in (int(b) for b in args.batches.split(",")):
            inputs = spec.example_inputs(batch)
            for executor in args.executors.split(","):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mod = sr.StaticModule(torch.jit.script(spec.build()),
                                          options=sr.StaticModuleOptions(executor=executor))
                o = measure_overhead(mod.runtime(), inputs, {}, samples=args.samples)
                print(f"| {name} | {batch} | {executor} | {o.nodes} | {o.untimed_ms * 1e3:.1f} "
                      f"| {o.timed_ms * 1e3:.1f} | {o.fraction * 100:+.1f} % "
                      f"| {o.ns_per_node:.0f} | {o.call_ms * 1e3:.1f} |", flush=True)


if __name__ == "__main__":
    main()
