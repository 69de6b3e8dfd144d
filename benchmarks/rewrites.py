"""What each graph rewrite buys: our runtime with one rewrite on and off, side by side.

For every rewrite option (``StaticModuleOptions`` field) and every built-in (model, batch)
case whose prepared graph it changes, two ``StaticModule``s are built — defaults, and
defaults with that one option off — checked to agree with eager PyTorch, then timed in
alternation: ``--repeats`` samples of ``--calls`` calls each, the median sample reported, in
one process, single-threaded. Cases a rewrite leaves unchanged are skipped (the graphs would
be identical and, after a warm-up call, so would the generated code: ``specialize_signature``
changes only the code).

    python benchmarks/rewrites.py                       # ~2 minutes on 2 cores
    python benchmarks/rewrites.py --options fuse_attention --cases multi_head_attention:64
    python benchmarks/rewrites.py --options hoist_views --cases zoo:hf_bert:1,zoo:hf_t5:1

A case ``zoo:NAME:BATCH`` is a model of the zoo (``benchmarks/zoo/``), checked against the
TorchScript interpreter on its traced or scripted module.

Also: ``--sdpa-grid`` times ``scaled_dot_product_attention`` against the written-out
matmul-softmax-matmul over batch, heads and query length on contiguous tensors
(``benchmarks/attention_forms.py`` covers both layouts and the masked forms, which
``ops/native/fused.py``'s rule is read from); ``--pack-grid`` times 2 and 3 sibling
``addmm(out=)`` against one into their packed product (``passes/packing.py``).

    python benchmarks/rewrites.py --options pack_linears,fuse_attention \
        --cases zoo:hf_bert:1,zoo:hf_bert:8,zoo:llama_scripted:1,zoo:llama_scripted:4
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import click
import torch
from rich.console import Console
from rich.table import Table

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.runtime.hot import wait_for_builds

REWRITES = ("pack_linears", "fuse_attention", "fuse_convolution", "fold_batchnorm", "inplace_activations",
            "specialize_alpha", "variadic_cat_stack", "specialize_signature", "hoist_views",
            "variadic_sizes")
CASES = ("mlp:1", "dlrm:1", "dlrm:256", "multi_head_attention:1", "multi_head_attention:64",
         "transformer_encoder:1", "resnet_small:1", "resnet_small:16", "control_flow:1")


def _kinds(mod: sr.StaticModule) -> list[str]:
    return [f"{n.kind}:{n.schema}" for n in mod.graph.walk()]


def _code(mod: sr.StaticModule, inputs: tuple) -> list[str]:
    """The generated code for ``inputs``' signature (the first call records, the second
    generates), without the header line saying what specialisation found."""
    mod(*inputs)
    mod(*inputs)
    return [line for line in mod.code.splitlines() if not line.startswith("# Specialised")]


#: The clock samples are read from: wall time, or this thread's CPU time (``--clock thread``:
#: steadier on a shared machine for single-threaded runs; it does not count time waiting).
CLOCK = {"wall": time.perf_counter, "thread": time.thread_time}
_clock = time.perf_counter


def _time(fns: dict, calls: int, repeats: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            start = _clock()
            for _ in range(calls):
                fn()
            samples[key].append((_clock() - start) / calls * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def run_rewrites(options: list[str], cases: list[str], calls: int | None,
                 repeats: int) -> list[dict]:
    rows = []
    for case in cases:
        scripted, inputs, expected = _case(case)
        name, batch = case.rsplit(":", 1)
        for option in options:
            on = sr.StaticModule(scripted)
            off = sr.StaticModule(scripted, sr.StaticModuleOptions(**{option: False}))
            if _kinds(on) == _kinds(off) and _code(on, inputs) == _code(off, inputs):
                continue
            for mod in (on, off):
                torch.testing.assert_close(mod(*inputs), expected)
            # Both modules warmed alike, and what their warm-up calls asked to be built in
            # the background (shape programs, a hot signature's code) finished before the
            # clock starts: built meanwhile, it shared the GIL with the calls timed (a
            # module warmed less than the other got its build during its samples: 5 ×).
            with torch.inference_mode():
                for _ in range(2):
                    for mod in (on, off):
                        for _ in range(10):
                            mod(*inputs)
                    wait_for_builds()
            n = calls or max(5, int(20_000 / max(1.0, _estimate_us(on, inputs))))
            with torch.inference_mode():
                times = _time({"on": lambda m=on, x=inputs: m(*x),
                               "off": lambda m=off, x=inputs: m(*x)}, n, repeats)
            rows.append({"rewrite": option, "model": name, "batch": int(batch),
                         "on_us": times["on"], "off_us": times["off"],
                         "ratio": times["on"] / times["off"], "calls": n, "repeats": repeats})
    return rows


def _case(case: str) -> tuple[torch.jit.ScriptModule, tuple, object]:
    """(scripted module, inputs, expected outputs) of ``model:batch`` or ``zoo:model:batch``."""
    name, batch = case.rsplit(":", 1)
    if name.startswith("zoo:"):
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from benchmarks.zoo import ZOO

        model = ZOO[name[len("zoo:"):]]
        scripted, inputs = model.scripted(), model.inputs(int(batch))
        with torch.inference_mode():
            return scripted, inputs, scripted(*inputs)
    spec = MODELS[name]
    model = spec.build()
    inputs = spec.example_inputs(int(batch))
    with torch.inference_mode():
        return torch.jit.script(model), inputs, model(*inputs)


def _estimate_us(mod: sr.StaticModule, inputs: tuple) -> float:
    for _ in range(3):
        mod(*inputs)
    start = time.perf_counter()
    for _ in range(5):
        mod(*inputs)
    return (time.perf_counter() - start) / 5 * 1e6


def sdpa_grid(repeats: int) -> list[dict]:
    import torch.nn.functional as F

    rows = []
    with torch.inference_mode():
        for heads in (8, 4):
            for length in (8, 16, 32, 64):
                for batch in (1, 4, 16, 64):
                    q, k, v = (torch.randn(batch, heads, length, 32) for _ in range(3))
                    k_t = k.transpose(-1, -2)

                    def written_out(q=q, k_t=k_t, v=v):
                        scores = torch.matmul(q, k_t).mul_(0.17)
                        return torch.matmul(scores.softmax(-1), v)

                    def fused(q=q, k=k, v=v):
                        return F.scaled_dot_product_attention(q, k, v, scale=0.17)

                    calls = max(5, 20_000 // (batch * heads * length))
                    t = _time({"written": written_out, "sdpa": fused}, calls, repeats)
                    rows.append({"heads": heads, "head_dim": 32, "length": length,
                                 "batch": batch, "written_out_us": t["written"],
                                 "sdpa_us": t["sdpa"], "ratio": t["sdpa"] / t["written"]})
    return rows


def pack_grid(repeats: int) -> list[dict]:
    rows = []
    with torch.inference_mode():
        for parts in (2, 3):
            for k in (32, 64, 128, 256, 512):
                for m in (1, 16, 32, 128, 256):
                    x = torch.randn(m, k)
                    ws = [torch.randn(k, k) for _ in range(parts)]
                    bs = [torch.randn(k) for _ in range(parts)]
                    outs = [torch.empty(m, k) for _ in range(parts)]
                    w_all, b_all = torch.cat(ws, 1), torch.cat(bs)
                    out_all = torch.empty(m, parts * k)

                    def separate(x=x, ws=ws, bs=bs, outs=outs):
                        for w, b, o in zip(ws, bs, outs):
                            torch.addmm(b, x, w, out=o)

                    def packed(x=x, w=w_all, b=b_all, o=out_all):
                        torch.addmm(b, x, w, out=o)

                    calls = max(5, 2_000_000 // (m * k * k * parts) + 5)
                    t = _time({"separate": separate, "packed": packed}, calls, repeats)
                    rows.append({"parts": parts, "m": m, "k": k, "separate_us": t["separate"],
                                 "packed_us": t["packed"],
                                 "ratio": t["packed"] / t["separate"]})
    return rows


@click.command()
@click.option("--options", default=",".join(REWRITES), help="Rewrite options, comma-separated.")
@click.option("--cases", default=",".join(CASES), help="model:batch cases, comma-separated.")
@click.option("--calls", type=int, default=None, help="Calls per sample (default: ~20 ms).")
@click.option("--repeats", type=int, default=11, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--clock", type=click.Choice(sorted(CLOCK)), default="wall", show_default=True)
@click.option("--sdpa-grid", is_flag=True, help="Time SDPA against the written-out form.")
@click.option("--pack-grid", is_flag=True, help="Time sibling GEMMs against one packed GEMM.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("benchmarks/results/rewrites.json"), show_default=True)
def main(options: str, cases: str, calls: int | None, repeats: int, threads: int,
         clock: str, sdpa_grid: bool, pack_grid: bool, json_path: Path) -> None:
    global _clock
    _clock = CLOCK[clock]
    torch.set_num_threads(threads)
    console = Console()
    result: dict = {"threads": threads, "clock": clock, "torch": torch.__version__}
    if pack_grid:
        rows = globals()["pack_grid"](repeats)
        table = Table("linears", "M", "K = N", "separate µs", "packed µs", "packed ÷ separate")
        for r in rows:
            table.add_row(str(r["parts"]), str(r["m"]), str(r["k"]), f"{r['separate_us']:.1f}",
                          f"{r['packed_us']:.1f}", f"{r['ratio']:.2f}")
        console.print(table)
        result["pack_grid"] = rows
    elif sdpa_grid:
        rows = globals()["sdpa_grid"](repeats)
        table = Table("heads", "length", "batch", "written out µs", "SDPA µs", "SDPA ÷ written")
        for r in rows:
            table.add_row(str(r["heads"]), str(r["length"]), str(r["batch"]),
                          f"{r['written_out_us']:.1f}", f"{r['sdpa_us']:.1f}", f"{r['ratio']:.2f}")
        console.print(table)
        result["sdpa_grid"] = rows
    else:
        rows = run_rewrites(options.split(","), cases.split(","), calls, repeats)
        table = Table("rewrite", "model", "batch", "on µs", "off µs", "on ÷ off")
        for r in rows:
            table.add_row(r["rewrite"], r["model"], str(r["batch"]), f"{r['on_us']:.1f}",
                          f"{r['off_us']:.1f}", f"{r['ratio']:.2f}")
        console.print(table)
        result["rewrites"] = rows
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
