"""Kernel floors: one operator, called in each setting the runtime could differ in, side by side.

Why does a kernel take longer when we call it than under the C++ Static Runtime? Each case
below (BERT-sized tensors, batch 1) is timed, in alternation and single-threaded unless the
setting says otherwise, as:

* ``allocating``       the functional form (``torch.layer_norm(x, ...)``), inference mode
* ``out: fresh``       the out form into a tensor from ``torch.empty``, inference mode
* ``out: arena``       the out form into a tensor carved from an arena by ``memory.arena``
  (non-resizable storage at a 64-byte aligned offset, as the planner places it)
* ``out: arena +4 B`` / ``+32 B``   the same at an offset that is not 64-byte aligned
* ``out: arena, no_grad``           ``torch.no_grad()`` instead of inference mode (the C++
  runtime runs under neither: its dispatch keys are those of plain tensors)
* ``out: arena, plain``             no grad mode at all
* ``out: arena, flush denormal``    ``torch.set_flush_denormal(True)``
* ``out: arena, 2 threads``         ``torch.set_num_threads(2)``
* ``C++ SR node``      a frozen one-operator module under ``torch._C._jit_to_static_module``'s
  ``benchmark_individual_ops``: the operator's node time (its own clock readings)
* ``ours node``        the same module under our ``benchmark_individual_ops``

A case's ``out`` forms: ``ours: ...`` is our runtime's own out variant for the node (for
``linear`` on a 3-D input the old ``linear(out=)`` is listed too), the others the call named. Times are µs per call, the median
of ``--repeats`` samples of ``--calls`` calls each (thread CPU time with ``--clock thread``,
steadier on a shared machine).

    python benchmarks/kernel_floor.py                    # ~1 minute
    python benchmarks/kernel_floor.py --cases gelu,layer_norm --json floors.json

``--rnn`` times ``aten::lstm`` / ``aten::gru`` of a scripted 2-layer ``nn.LSTM``/``nn.GRU``
(batch 1, 20 steps, 32 → 64): the kernel called directly with the arguments our generated
code passes it (in a loop, in inference mode; with a fresh zero state per call; with 1 MiB touched, or one
boxed ``torch.ops`` call made, between calls — those two rows include what is between, timed
alone in the row after; under ``no_grad`` instead), the node under our and the C++ runtime's ``benchmark_individual_ops``, and whole
calls of ours, the C++ runtime and TorchScript.

``--model PATH --input SHAPE:DTYPE`` instead compares a whole TorchScript model per node
kind: ours and the C++ runtime's ``benchmark_individual_ops`` in alternation, µs per instance
(median over ``--repeats``). Run it once with ``PYTHONPATH`` on another tree for a
before/after of the same model:

    python benchmarks/kernel_floor.py --model /work/wt/bert.pt --input 1x32:int64:0..1000
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

import static_runtime as sr
from static_runtime.memory.arena import TensorSpec, allocate_arena, materialize

torch.manual_seed(0)


@dataclass
class Case:
    name: str
    #: the inputs of ``fn`` / ``out_fn``
    inputs: tuple[Any, ...]
    fn: Callable[..., Any]
    #: named out forms: ``out_fn(out, *inputs)``
    out_fns: dict[str, Callable[..., Any]]
    #: a module whose frozen graph runs the operator once, and its inputs
    module: torch.nn.Module | None = None
    module_inputs: tuple[Any, ...] = ()


class _Linear(torch.nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        self.lin = torch.nn.Linear(k, n)

    def forward(self, x):
        return self.lin(x)


class _Unary(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class _LayerNorm(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d, eps=1e-12)

    def forward(self, x):
        return self.ln(x)


class _Embedding(torch.nn.Module):
    def __init__(self, n: int, d: int):
        super().__init__()
        self.emb = torch.nn.Embedding(n, d)

    def forward(self, i):
        return self.emb(i)


class _Attention(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, scale=0.125)


class _Add(torch.nn.Module):
    def forward(self, a, b):
        return a + b


def _gelu(x):
    return F.gelu(x)


def _our_out_variant(module: torch.nn.Module, inputs: tuple, kind: str) -> Callable[..., Any]:
    """Our runtime's out variant of the ``kind`` node of ``module``'s frozen graph, as
    ``f(out, *case inputs)``: it is called with the node's own constants (the weight the
    constant-weight fast paths recognise) and the graph inputs in place of the case's."""
    mod = sr.StaticModule(torch.jit.freeze(torch.jit.script(module.eval())))
    node = next(pn for pn in mod.plan.nodes() if pn.kind == kind)
    graph_inputs = list(mod.graph.inputs)
    args = [v.node.attrs.get("value") if v.node.kind == "prim::Constant"
            else inputs[graph_inputs.index(v)] for v in node.node.inputs]
    out_fn = node.impl.out_fn

    def call(out, *_case_inputs):
        return out_fn(out, *args)

    return call


def cases() -> list[Case]:
    out = []
    for k, n in ((128, 128), (128, 512), (512, 128)):
        m = _Linear(k, n).eval()
        x = torch.randn(1, 32, k)
        w, b = m.lin.weight.detach(), m.lin.bias.detach()
        out.append(Case(
            f"linear 1x32x{k} -> {n}", (x, w, b), torch._C._nn.linear,
            {"linear(out=) [before]": lambda o, x, w, b: torch._C._nn.linear(x, w, b, out=o),
             "ours: addmm folded [after]": _our_out_variant(m, (x,), "aten::linear")},
            m, (x,)))
    ln = _LayerNorm(128).eval()
    x = torch.randn(1, 32, 128)
    w, b = ln.ln.weight.detach(), ln.ln.bias.detach()
    mean, rstd = torch.empty(1, 32, 1), torch.empty(1, 32, 1)
    nlo = torch.ops.aten.native_layer_norm.out
    out.append(Case(
        "layer_norm 1x32x128", (x, [128], w, b, 1e-12), torch.layer_norm,
        {"native_layer_norm.out (torch.ops)": lambda o, x, s, w, b, e: nlo(
            x, s, w, b, e, out0=o, out1=mean, out2=rstd)},
        ln, (x,)))
    x = torch.randn(1, 32, 512)
    out.append(Case("gelu 1x32x512", (x,), torch._C._nn.gelu,
                    {"gelu(out=)": lambda o, x: torch._C._nn.gelu(x, out=o)},
                    _Unary(_gelu), (x,)))
    x = torch.randn(1, 128)
    out.append(Case("tanh 1x128", (x,), torch.tanh,
                    {"tanh(out=)": lambda o, x: torch.tanh(x, out=o)},
                    _Unary(torch.tanh), (x,)))
    a, b2 = torch.randn(1, 32, 128), torch.randn(1, 32, 128)
    out.append(Case("add 1x32x128", (a, b2), torch.add,
                    {"add(out=)": lambda o, a, b: torch.add(a, b, out=o)},
                    _Add(), (a, b2)))
    emb = _Embedding(1000, 128).eval()
    i = torch.randint(0, 1000, (1, 32))
    wt = emb.emb.weight.detach()
    out.append(Case(
        "embedding 1000x128, 1x32", (wt, i), lambda w, i: torch.embedding(w, i),
        {"ours: index_select folded": _our_out_variant(emb, (i,), "aten::embedding")},
        emb, (i,)))
    q, kk, v = (torch.randn(1, 2, 32, 64) for _ in range(3))
    out.append(Case("scaled_dot_product_attention 1x2x32x64", (q, kk, v),
                    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.125),
                    {}, _Attention(), (q, kk, v)))
    return out


def _input(spec: str) -> torch.Tensor:
    """``1x32:int64:0..1000`` → a tensor of that shape and dtype (integers in the range)."""
    parts = spec.split(":")
    shape = [int(d) for d in parts[0].split("x")]
    dtype = getattr(torch, parts[1] if len(parts) > 1 else "float32")
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    low, high = (int(v) for v in (parts[2] if len(parts) > 2 else "0..100").split(".."))
    return torch.randint(low, high, shape, dtype=dtype)


# ------------------------------------------------------------------------------- settings


_clock = time.perf_counter_ns


def _sample(fn: Callable[[], Any], calls: int) -> float:
    t0 = _clock()
    for _ in range(calls):
        fn()
    return (_clock() - t0) / calls / 1e3


class _Setting:
    """A context: grad mode, denormals and threads as a setting wants them."""

    def __init__(self, mode: str = "inference", denormal: bool = False, threads: int = 1):
        self.mode, self.denormal, self.threads = mode, denormal, threads

    def __enter__(self):
        self._guard = torch._C._InferenceMode(True) if self.mode == "inference" else None
        self._grad = torch.is_grad_enabled()
        if self.mode == "no_grad":
            torch.set_grad_enabled(False)
        torch.set_flush_denormal(self.denormal)
        torch.set_num_threads(self.threads)

    def __exit__(self, *exc):
        self._guard = None
        torch.set_grad_enabled(self._grad)
        torch.set_flush_denormal(False)
        torch.set_num_threads(1)


def _arena_tensor(like: torch.Tensor, arena: torch.Tensor, offset: int) -> torch.Tensor:
    spec = TensorSpec(0, "out", like.dtype, tuple(like.shape), offset,
                      like.numel() * like.element_size())
    return materialize([spec], arena)[0]


def _node_time(metrics: Any) -> float:
    """The operator's node time in µs: every other node of these one-operator graphs is a
    constant or a list of constants, which the C++ runtime does not run."""
    return max(metrics.time_per_node) * 1e3


def measure(case: Case, calls: int, repeats: int) -> dict[str, float]:
    with torch.inference_mode():
        result = case.fn(*case.inputs)
    arena = allocate_arena(result.numel() * result.element_size() + 4096)
    arena_out = {off: _arena_tensor(result, arena, off) for off in (64 * 8, 64 * 8 + 4, 64 * 8 + 32)}
    fresh = torch.empty_like(result)
    runs: dict[str, tuple[_Setting, Callable[[], Any]]] = {
        "allocating": (_Setting(), lambda: case.fn(*case.inputs))}
    for label, out_fn in case.out_fns.items():
        def call(o, out_fn=out_fn):
            return lambda: out_fn(o, *case.inputs)
        runs[f"{label}: fresh"] = (_Setting(), call(fresh))
        runs[f"{label}: arena"] = (_Setting(), call(arena_out[512]))
        runs[f"{label}: arena +4 B"] = (_Setting(), call(arena_out[516]))
        runs[f"{label}: arena +32 B"] = (_Setting(), call(arena_out[544]))
        runs[f"{label}: arena, no_grad"] = (_Setting("no_grad"), call(arena_out[512]))
        runs[f"{label}: arena, plain"] = (_Setting("plain"), call(arena_out[512]))
        runs[f"{label}: arena, flush denormal"] = (_Setting(denormal=True), call(arena_out[512]))
        runs[f"{label}: arena, 2 threads"] = (_Setting(threads=2), call(arena_out[512]))
    samples: dict[str, list[float]] = {k: [] for k in runs}
    if case.module is not None:
        frozen = torch.jit.freeze(torch.jit.script(case.module.eval()))
        cpp = torch._C._jit_to_static_module(frozen._c)
        ours = sr.StaticModule(frozen)
        samples["C++ SR node"] = []
        samples["ours node"] = []
    for name, (setting, fn) in runs.items():
        with setting:
            for _ in range(20):
                fn()
    for _ in range(repeats):
        for name, (setting, fn) in runs.items():
            with setting:
                samples[name].append(_sample(fn, calls))
        if case.module is not None:
            torch.set_num_threads(1)
            samples["C++ SR node"].append(_node_time(cpp.benchmark_individual_ops(
                list(case.module_inputs), {}, 5, calls)))
            samples["ours node"].append(_node_time(ours.benchmark_individual_ops(
                case.module_inputs, {}, 5, calls)))
    return {k: statistics.median(v) for k, v in samples.items()}


def compare_model(path: str, inputs: tuple, repeats: int, calls: int) -> dict[str, dict]:
    """Per node kind: instances, ours and the C++ runtime's µs per instance (medians)."""
    cpp = torch._C._jit_to_static_module(torch.jit.freeze(torch.jit.load(path).eval())._c)
    ours = sr.StaticModule(path)
    ours(*inputs)
    ours(*inputs)
    samples: dict[str, dict[str, list[float]]] = {}
    for _ in range(repeats):
        for who, m in (("ours", ours.benchmark_individual_ops(inputs, {}, 10, calls)),
                       ("cpp", cpp.benchmark_individual_ops(list(inputs), {}, 10, calls))):
            for kind, t in m.time_per_node_type.items():
                if who == "cpp" and kind == "aten::add":
                    kind = "static_runtime::add"  # ours after specialize_alpha
                n = m.instances_per_node_type[kind if who == "ours" or kind != "static_runtime::add"
                                              else "aten::add"]
                samples.setdefault(kind, {"ours": [], "cpp": [], "n": [n]})[who].append(
                    t * 1e3 / n)
    return {k: {"instances": v["n"][0],
                "ours": statistics.median(v["ours"]) if v["ours"] else None,
                "cpp": statistics.median(v["cpp"]) if v["cpp"] else None}
            for k, v in samples.items()}


class _Recurrent(torch.nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(32, 64, num_layers=2, batch_first=True)
        self.fc = torch.nn.Linear(64, 8)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


def compare_rnn(kind: str, repeats: int, calls: int) -> dict[str, tuple[float, float]]:
    """µs per call (median, min) of the recurrent kernel in each setting (see the module
    docstring)."""
    scripted = torch.jit.script(_Recurrent(kind).eval())
    frozen = torch.jit.freeze(scripted)
    x = torch.randn(1, 20, 32)
    ours = sr.StaticModule(scripted)
    cpp = torch._C._jit_to_static_module(frozen._c)
    op = "aten::" + kind.lower()
    # The arguments the node gets: its inputs as the prepared graph makes them (the flat
    # weights are a constant list, the state a list built per call in the LSTM).
    captured: list[tuple] = []
    real = {"LSTM": torch.lstm, "GRU": torch.gru}[kind]
    with torch.inference_mode():
        hx = torch.zeros(2, 1, 64)
        node = next(pn for pn in ours.plan.nodes() if pn.kind == op)
        weights = next(v.node.attrs["value"] for v in node.node.inputs
                       if v.node.kind == "prim::Constant" and isinstance(
                           v.node.attrs.get("value"), list))
        state = [hx, hx] if kind == "LSTM" else hx
        captured.append((x, state, weights, True, 2, 0.0, False, False, True))
    args = captured[0]
    other = torch.empty(1 << 18)

    def fresh_state():
        h = torch.zeros(2, 1, 64)
        return real(x, [h, h] if kind == "LSTM" else h, *args[2:])

    def touched():
        other.add_(1.0)
        return real(*args)

    zeros = torch.ops.aten.zeros.default
    cpu = torch.device("cpu")

    def boxed():
        zeros([2, 1, 64], dtype=torch.float32, device=cpu)

    def boxed_between():
        boxed()
        return real(*args)

    direct = {"kernel, the node's arguments": lambda: real(*args),
              "kernel, a fresh zero state": fresh_state,
              "kernel + 1 MiB touched between": touched,
              "(touching 1 MiB alone)": lambda: other.add_(1.0),
              "kernel + a torch.ops zeros between": boxed_between,
              "(the torch.ops zeros alone)": boxed}
    calls_of = {"ours, whole call": lambda: ours(x), "C++ SR, whole call": lambda: cpp(x),
                "TorchScript, whole call": lambda: frozen(x)}
    samples: dict[str, list[float]] = {k: [] for k in [
        *direct, "kernel, no_grad instead of inference mode", *calls_of, "ours node",
        "C++ SR node"]}
    for _ in range(repeats):
        with torch.inference_mode():
            for k, fn in direct.items():
                samples[k].append(_sample(fn, calls))
        with torch.no_grad():
            samples["kernel, no_grad instead of inference mode"].append(
                _sample(direct["kernel, the node's arguments"], calls))
            samples["TorchScript, whole call"].append(_sample(calls_of["TorchScript, whole call"],
                                                              calls))
        for k in ("ours, whole call", "C++ SR, whole call"):
            samples[k].append(_sample(calls_of[k], calls))
        samples["ours node"].append(
            ours.benchmark_individual_ops((x,), {}, 5, calls).time_per_node_type[op] * 1e3)
        samples["C++ SR node"].append(
            cpp.benchmark_individual_ops([x], {}, 5, calls).time_per_node_type[op] * 1e3)
    return {k: (statistics.median(v), min(v)) for k, v in samples.items()}


@click.command()
@click.option("--rnn", is_flag=True, help="time aten::lstm and aten::gru instead")
@click.option("--model", default=None, type=click.Path(exists=True, dir_okay=False),
              help="compare a TorchScript model per node kind instead")
@click.option("--input", "input_spec", default="1x32:int64:0..1000", show_default=True,
              help="the model's one input: SHAPE:DTYPE[:LOW..HIGH]")
@click.option("--cases", "names", default="", help="comma-separated case-name prefixes")
@click.option("--calls", default=200, show_default=True)
@click.option("--repeats", default=9, show_default=True)
@click.option("--clock", type=click.Choice(["wall", "thread"]), default="wall", show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(rnn: bool, model: str | None, input_spec: str, names: str, calls: int, repeats: int, clock: str,
         json_path: str | None) -> None:
    global _clock
    _clock = time.perf_counter_ns if clock == "wall" else time.thread_time_ns
    torch.set_num_threads(1)
    if rnn:
        report = {}
        for kind in ("LSTM", "GRU"):
            report[kind] = compare_rnn(kind, repeats, max(calls // 4, 10))
            table = Table(title=f"aten::{kind.lower()}, 2 layers, batch 1, 20 steps, 32 -> 64")
            for col in ("setting", "median µs", "min µs"):
                table.add_column(col, justify="left" if col == "setting" else "right")
            for k, (med, low) in report[kind].items():
                table.add_row(k, f"{med:.1f}", f"{low:.1f}")
            Console().print(table)
        if json_path:
            Path(json_path).write_text(json.dumps(report, indent=2))
        return
    if model is not None:
        report = compare_model(model, (_input(input_spec),), repeats, calls)
        table = Table(title=f"{model}: µs per instance, ours vs the C++ Static Runtime")
        for col in ("node kind", "instances", "ours", "C++ SR", "ours - C++"):
            table.add_column(col, justify="left" if col == "node kind" else "right")
        rows = sorted(report.items(), key=lambda kv: -((kv[1]["ours"] or 0) - (kv[1]["cpp"] or 0))
                      * kv[1]["instances"])
        for kind, r in rows:
            o, c = r["ours"], r["cpp"]
            table.add_row(kind, str(r["instances"]), "" if o is None else f"{o:.2f}",
                          "" if c is None else f"{c:.2f}",
                          "" if o is None or c is None else f"{o - c:+.2f}")
        Console().print(table)
        if json_path:
            Path(json_path).write_text(json.dumps(report, indent=2))
        return
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    console = Console()
    report = {}
    for case in cases():
        if wanted and not any(case.name.startswith(w) for w in wanted):
            continue
        times = measure(case, calls, repeats)
        report[case.name] = times
        table = Table(title=case.name)
        table.add_column("setting")
        table.add_column("µs / call", justify="right")
        for k, v in times.items():
            table.add_row(k, f"{v:.2f}")
        console.print(table)
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
