"""What per-node timing costs: ``benchmark_individual_ops``'s loop with and without its
clock readings (``static_runtime.runtime.metrics.measure_overhead``), for every built-in
model, models built to stress it (many tiny nodes, loops, branches, forks) and, where
``benchmarks.zoo`` can be imported, the zoo.

    python benchmarks/profiler_overhead.py                 # batch 1, both executors
    python benchmarks/profiler_overhead.py --models stress --executors codegen --samples 51
    python benchmarks/profiler_overhead.py --models zoo

Prints a Markdown table: µs per iteration untimed (the fastest sample) and timed (untimed ×
the median paired ratio), the difference per node, and an ordinary call for reference, all
in the calling thread's CPU time (see ``measure_overhead``).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch
from torch import Tensor

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.runtime.metrics import measure_overhead


class TinyChain(torch.nn.Module):
    """180 element-wise nodes of well under a microsecond each (1 × 4 tensors)."""

    def forward(self, x: Tensor) -> Tensor:
        for _ in range(60):
            x = x + 1.0
            x = x * 0.5
            x = torch.relu(x)
        return x


class ViewChain(torch.nn.Module):
    """Views and metadata only: size, view, transpose, reshape, unsqueeze."""

    def forward(self, x: Tensor) -> Tensor:
        b = x.size(0)
        y = x.view(b, -1).transpose(0, 1).reshape(-1, b).unsqueeze(0)
        z = y.squeeze(0).t().contiguous().view(-1)
        return z.unsqueeze(1).expand(-1, 3).reshape(b, -1)


class DecodeLoop(torch.nn.Module):
    """A recurrent decode loop with an early exit: one top-level loop node."""

    def __init__(self):
        super().__init__()
        self.cell = torch.nn.GRUCell(16, 16)

    def forward(self, x: Tensor, steps: int = 20) -> Tensor:
        h = x
        for _ in range(steps):
            h = self.cell(h, h)
            if bool(h.abs().max() > 1e6):
                break
        return h


class Branches(torch.nn.Module):
    """20 data-dependent branches at the top level."""

    def forward(self, x: Tensor) -> Tensor:
        for _ in range(20):
            if bool(x.sum() > 0):
                x = x - 0.1
            else:
                x = x + 0.1
        return x


def _twice(x: Tensor) -> Tensor:
    return x * 2 + 1


class Forks(torch.nn.Module):
    """Four forked subgraphs, waited for."""

    def forward(self, x: Tensor) -> Tensor:
        futs = [torch.jit.fork(_twice, x) for _ in range(4)]
        y = x
        for f in futs:
            y = y + torch.jit.wait(f)
        return y


STRESS = {
    "tiny_chain": (TinyChain, lambda b: (torch.randn(b, 4),)),
    "view_chain": (ViewChain, lambda b: (torch.randn(b, 6),)),
    "decode_loop": (DecodeLoop, lambda b: (torch.randn(b, 16),)),
    "branches": (Branches, lambda b: (torch.randn(b, 8),)),
    "forks": (Forks, lambda b: (torch.randn(b, 8),)),
}


def _zoo() -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    try:
        from benchmarks.zoo import ZOO
    except ImportError:
        return {}
    return dict(ZOO)


def _cases(models: str) -> list[tuple[str, object]]:
    """(name, make) with ``make(batch) -> (scripted, inputs)``."""
    zoo = _zoo() if "zoo" in models.split(",") else {}
    out = []
    for name in models.split(","):
        if name == "builtin":
            out += [(n, _builtin(n)) for n in MODELS]
        elif name == "stress":
            out += [(n, _stress(n)) for n in STRESS]
        elif name == "zoo":
            out += [(n, _zoo_case(m)) for n, m in zoo.items()]
        elif name in MODELS:
            out.append((name, _builtin(name)))
        elif name in STRESS:
            out.append((name, _stress(name)))
        else:
            raise SystemExit(f"unknown model {name!r}")
    return out


def _builtin(name):
    spec = MODELS[name]
    return lambda b: (torch.jit.script(spec.build()), spec.example_inputs(b))


def _stress(name):
    cls, inputs = STRESS[name]
    return lambda b: (torch.jit.script(cls().eval()), inputs(b))


def _zoo_case(model):
    return lambda b: (model.scripted(), tuple(model.inputs(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="builtin,stress",
                        help="names, or the groups builtin, stress, zoo")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--executors", default="codegen,interpreter")
    parser.add_argument("--samples", type=int, default=101)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| model | batch | executor | top-level nodes | untimed µs | timed µs | overhead "
          "| ns / node | ordinary call µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, make in _cases(args.models):
        for batch in (int(b) for b in args.batches.split(",")):
            for executor in args.executors.split(","):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    scripted, inputs = make(batch)
                    mod = sr.StaticModule(scripted,
                                          options=sr.StaticModuleOptions(executor=executor))
                mod(*inputs)
                o = measure_overhead(mod.runtime(), inputs, {}, samples=args.samples,
                                     max_seconds=20.0)
                print(f"| {name} | {batch} | {executor} | {o.nodes} | {o.untimed_ms * 1e3:.1f} "
                      f"| {o.timed_ms * 1e3:.1f} | {o.fraction * 100:+.1f} % "
                      f"| {o.ns_per_node:.0f} | {o.call_ms * 1e3:.1f} |", flush=True)


if __name__ == "__main__":
    main()
