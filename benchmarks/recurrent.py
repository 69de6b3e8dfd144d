"""Recurrent layers compiled by Inductor (issue 12, item 4), side by side.

On the zoo's recurrent models (``benchmarks/zoo/``: a 2-layer LSTM classifier, a
bidirectional GRU tagger, a conv + GRU audio classifier), single-threaded: µs per call of
eager PyTorch, frozen TorchScript, ``torch.compile`` (inductor), ONNX Runtime, ours as it
runs by default (ATen's LSTM/GRU kernel) and ours with
``StaticModuleOptions(fusion_compiler="inductor")`` (``ops/native/recurrent.py``). Every
runner is timed in ``--repeats`` samples of ``--calls`` calls, runners alternated within
each repeat; the median sample is reported, with ours ÷ ONNX Runtime. Every output is
compared with eager's.

"compile s" is our module's construction plus its first call, where the recurrence is
compiled for the input signature: with ``--fresh-inductor-cache`` Inductor starts from an
empty cache directory (cold), otherwise from whatever the default cache holds (warm, after
one run).

    python benchmarks/recurrent.py                          # batch 1, the three models
    python benchmarks/recurrent.py --fresh-inductor-cache   # cold compile times
    python benchmarks/recurrent.py --batches 1,8 --models lstm_classifier
    python benchmarks/recurrent.py --variants                # how to write the recurrence

``--variants`` measures the choices ``ops/native/recurrent.py`` makes, on the bare layers
of the zoo models (a 2-layer LSTM 64 → 96 over 20 steps, a bidirectional GRU 32 → 48 over
24 steps): ATen's kernel against the compiled recurrence with the recurrent product
written as a multiply-sum over rows of ``W_hh``, over columns of ``W_hh.T``, or as a GEMM,
each with Inductor's Python or C++ wrapper; and each one's compile time.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS = ("lstm_classifier", "gru_tagger", "conv1d_gru_audio")
PEERS = ("eager", "torchscript", "torch_compile", "onnxruntime")


def _ours(name: str, scripted, inputs: tuple, options):
    import static_runtime as sr
    from static_runtime import compare

    start = time.perf_counter()
    mod = sr.StaticModule(scripted, options=options)
    rt = mod.runtime()
    rt(*inputs)  # compiles the recurrence for this signature
    seconds = time.perf_counter() - start
    return compare.Runner(name, lambda: rt(*inputs), seconds)


def run_case(model: str, batch: int, repeats: int, calls: int, peers: tuple[str, ...]) -> dict:
    import torch

    import static_runtime as sr
    from benchmarks.zoo import ZOO
    from static_runtime import compare

    spec = ZOO[model]
    scripted, inputs = spec.scripted(), spec.inputs(batch)
    runners = [
        _ours("ours_inductor", spec.scripted(), inputs,
              sr.StaticModuleOptions(fusion_compiler="inductor")),
        _ours("ours_aten", spec.scripted(), inputs, sr.StaticModuleOptions()),
    ]
    runners += compare.make_runners(spec.eager(), inputs, include=peers, scripted=scripted,
                                    check_inputs=[spec.inputs(batch, seed=1)])
    runners = runners[2:] + runners[:2]
    agree = compare.outputs_agree(runners) if "eager" in peers else {}
    timings = compare.time_runners(runners, repeats=repeats, calls=calls, warmup=10)
    us = {name: t.median_us for name, t in timings.items()}
    return {"model": model, "batch": batch, "us": us, "agree": agree,
            "notes": {r.name: r.note for r in runners if r.note},
            "compile_s": runners[-2].setup_seconds, "threads": torch.get_num_threads()}


def run_variants(repeats: int, calls: int) -> None:
    import torch

    from static_runtime.compare import median_us
    from static_runtime.ops.inductor import compile_graph
    from static_runtime.ops.native.recurrent import prepare_weights, recurrence

    torch.manual_seed(0)
    layers = {"lstm": torch.nn.LSTM(64, 96, 2, batch_first=True),
              "gru": torch.nn.GRU(32, 48, 1, batch_first=True, bidirectional=True)}
    print("| layer | batch | variant | µs | ÷ ATen | compile s |")
    print("|---|---|---|---|---|---|")
    for mode, layer in layers.items():
        layer.eval()
        weights = [w.detach() for w in layer._flat_weights]
        bidirectional, num_layers = layer.bidirectional, layer.num_layers
        for batch, variants in ((1, [("rows", False), ("rows", True), ("columns", False),
                                     ("columns", True)]),
                                (8, [("gemm", True), ("columns", True)])):
            steps = 20 if mode == "lstm" else 24
            x = torch.randn(batch, steps, layer.input_size)
            state = [torch.randn(num_layers * (1 + bidirectional), batch, layer.hidden_size)
                     for _ in range(2 if mode == "lstm" else 1)]
            aten = torch.lstm if mode == "lstm" else torch.gru
            hx = state if mode == "lstm" else state[0]

            def run_aten(hx=hx, x=x, aten=aten, weights=weights, num_layers=num_layers,
                         bidirectional=bidirectional):
                return aten(x, hx, weights, True, num_layers, 0.0, False, bidirectional, True)

            expected = run_aten()
            runners = {"aten": run_aten}
            seconds = {}
            for product, cpp in variants:
                fn = recurrence(mode, num_layers, bidirectional, True, True, steps, product)
                ws = prepare_weights(weights, True, product)
                compiled = compile_graph(fn, [x, *state, *ws], cpp_wrapper=cpp)
                name = f"{product}, {'C++' if cpp else 'Python'} wrapper"
                got = compiled.call([x, *state, *ws])
                for a, b in zip(got, expected):
                    torch.testing.assert_close(a, b)
                runners[name] = (lambda c=compiled, ws=ws, x=x, state=state:
                                 c.call([x, *state, *ws]))
                seconds[name] = compiled.seconds
            us = median_us(runners, repeats=repeats, calls=calls, warmup=10)
            for name, t in us.items():
                compile_s = f"{seconds[name]:.1f}" if name in seconds else "—"
                print(f"| {mode} | {batch} | {name} | {t:.1f} | {t / us['aten']:.2f} | "
                      f"{compile_s} |", flush=True)


@click.command()
@click.option("--models", default=",".join(MODELS), show_default=True)
@click.option("--batches", default="1", show_default=True)
@click.option("--repeats", default=15, show_default=True)
@click.option("--calls", default=50, show_default=True)
@click.option("--peers", default=",".join(PEERS), show_default=True)
@click.option("--fresh-inductor-cache", is_flag=True,
              help="Compile into an empty Inductor cache directory (cold compile times).")
@click.option("--variants", is_flag=True, help="Compare ways of writing the recurrence.")
def main(models: str, batches: str, repeats: int, calls: int, peers: str,
         fresh_inductor_cache: bool, variants: bool) -> None:
    if fresh_inductor_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")
    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    if variants:
        run_variants(repeats, calls)
        return
    peer_list = tuple(p for p in peers.split(",") if p)
    names = ("ours_inductor", "ours_aten", *peer_list)
    header = ["model", "batch", *names, "inductor ÷ ORT", "aten ÷ ORT", "inductor ÷ aten",
              "compile s", "agree"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for model in models.split(","):
        for batch in (int(b) for b in batches.split(",")):
            r = run_case(model, batch, repeats, calls, peer_list)
            us = r["us"]
            ort = us.get("onnxruntime")

            def ratio(a, b):
                return f"{a / b:.2f}" if a and b else "—"

            cells = [model, str(batch)] + [f"{us[n]:.1f}" if n in us else "—" for n in names]
            cells += [ratio(us["ours_inductor"], ort), ratio(us["ours_aten"], ort),
                      ratio(us["ours_inductor"], us["ours_aten"]), f"{r['compile_s']:.1f}",
                      "yes" if all(v is not False for v in r["agree"].values()) else
                      str(r["agree"])]
            print("| " + " | ".join(cells) + " |", flush=True)
            for name, note in r["notes"].items():
                print(f"  {name}: {note}", flush=True)


if __name__ == "__main__":
    main()
