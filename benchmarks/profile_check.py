"""Does a per-kind figure of ``benchmark_individual_ops`` mean what it says? For one node kind
at a time, a model that is a chain of ``N`` nodes of that kind (shapes of a small BERT) is
measured three more ways, and each way's µs per node set side by side:

- **profile**: what ``profile --against cpp`` reports for the kind: the median over
  profiled runs of its total in a run, ÷ ``N`` (ours, and PyTorch's C++ Static Runtime's
  on the same model);
- **calls**: ordinary calls, no profiler: (call of the ``N``-node chain − call of a 1-node
  chain) ÷ (``N`` − 1), for ours and for the C++ runtime;
- **alone**: the operator through its Python binding in a bare loop (what a node costs
  when nothing but the call is around it).

If the profile agrees with the calls, the profiler neither adds to nor hides what a node
costs; the calls and profile of the C++ runtime against ``alone`` show what its dispatch
saves. Everything alternated, medians of repeats, single-threaded.

    python benchmarks/profile_check.py                    # ~1 minute
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

import static_runtime as sr
from static_runtime.compare import ops as compare_ops

N = 20


class Chain(torch.nn.Module):
    """``n`` nodes of one kind, each on the previous one's output."""

    def __init__(self, kind: str, n: int):
        super().__init__()
        self.kind, self.n = kind, n
        self.weight = torch.nn.Parameter(torch.randn(128, 128) / 12)
        self.bias = torch.nn.Parameter(torch.randn(128))
        self.gamma = torch.nn.Parameter(torch.ones(128))

    def forward(self, x: Tensor) -> Tensor:
        for _ in range(self.n):
            if self.kind == "linear":
                x = F.linear(x, self.weight, self.bias)
            elif self.kind == "layer_norm":
                x = F.layer_norm(x, [128], self.gamma, self.bias)
            elif self.kind == "gelu":
                x = F.gelu(x)
            elif self.kind == "add":
                x = x + self.bias
            elif self.kind == "transpose":
                x = x.transpose(0, 1)
            elif self.kind == "view":
                x = x.view(1, 32, -1)
            elif self.kind == "contiguous":
                x = x.contiguous()
            elif self.kind == "to":
                x = x.to(torch.float32)
        return x


def _alone(kind: str, x: Tensor, m: Chain):
    w, b, g = m.weight.detach(), m.bias.detach(), m.gamma.detach()
    return {"linear": lambda: F.linear(x, w, b),
            "layer_norm": lambda: F.layer_norm(x, [128], g, b),
            "gelu": lambda: F.gelu(x), "add": lambda: x + b,
            "transpose": lambda: x.transpose(0, 1),
            "view": lambda: x.view(1, 32, -1),
            "contiguous": lambda: x.contiguous(), "to": lambda: x.to(torch.float32)}[kind]


def _traced(kind: str, n: int, x: Tensor) -> torch.jit.ScriptModule:
    """Traced (the loop unrolled: ``n`` nodes of the kind at the top level) and frozen."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.freeze(torch.jit.trace(Chain(kind, n).eval(), (x,)))


def _per_call_us(fn, calls: int) -> float:
    clock = time.thread_time_ns  # CPU time of this thread: preemption is not in it
    start = clock()
    for _ in range(calls):
        fn()
    return (clock() - start) / calls / 1e3


def check(kind: str, repeats: int) -> dict:
    x = torch.randn(1, 32, 512 if kind == "gelu" else 128)
    long, short = _traced(kind, N, x), _traced(kind, 1, x)
    ours = {n: sr.StaticModule(m) for n, m in ((N, long), (1, short))}
    cpp = {n: torch._C._jit_to_static_module(m._c) for n, m in ((N, long), (1, short))}
    rts = {n: mod.runtime() for n, mod in ours.items()}
    for n in (N, 1):
        rts[n](x)
        cpp[n](x)
    alone = _alone(kind, x, Chain(kind, 1))
    with torch.inference_mode():
        alone()
    samples: dict[str, list[float]] = {k: [] for k in (
        "ours_profile", "cpp_profile", "ours_calls", "cpp_calls", "alone")}
    target = f"aten::{kind}"
    for _ in range(repeats):
        p = compare_ops._median_profile(compare_ops.profile_ours(ours[N], (x,), {}, 5, 30))
        c = compare_ops._median_profile(compare_ops.profile_cpp(cpp[N], (x,), {}, 5, 30))
        for prof, key in ((p, "ours_profile"), (c, "cpp_profile")):
            us = sum(v for k, v in prof.us.items() if compare_ops.canonical_kind(k) == target)
            n = sum(v for k, v in prof.instances.items()
                    if compare_ops.canonical_kind(k) == target)
            samples[key].append(us / n if n else float("nan"))
        for fns, key in ((rts, "ours_calls"), (cpp, "cpp_calls")):
            long_fn, short_fn = fns[N], fns[1]
            t_long = _per_call_us(lambda: long_fn(x), 200)  # noqa: B023  (called at once)
            t_short = _per_call_us(lambda: short_fn(x), 200)  # noqa: B023
            samples[key].append((t_long - t_short) / (N - 1))
        with torch.inference_mode():
            samples["alone"].append(_per_call_us(alone, 2000))
    return {"kind": kind, **{k: statistics.median(v) for k, v in samples.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="linear,layer_norm,gelu,add,transpose,view,"
                                           "contiguous,to")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"µs per node, chains of {N} nodes, median of {args.repeats} alternated repeats\n")
    print("| kind | ours: profile | ours: calls | C++: profile | C++: calls | alone |")
    print("|---|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        r = check(kind, args.repeats)
        print(f"| `aten::{kind}` | {r['ours_profile']:.2f} | {r['ours_calls']:.2f} "
              f"| {r['cpp_profile']:.2f} | {r['cpp_calls']:.2f} | {r['alone']:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
