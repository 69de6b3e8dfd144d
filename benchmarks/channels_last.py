"""Conv nets with and without activations kept channels-last (issue 19 item 3), beside ONNX
Runtime, in one process, one thread (the thread's CPU time unless `--clock wall`).

For each conv model of the zoo (and the built-in ``resnet_small``) this builds our runtime
under several option sets, and ORT's session through ``compare.make_runners``, then times
them in alternation: ``--repeats`` rounds (the order reversed every other round), each runner
a sample of enough calls to last ``--sample-ms`` per round, µs per call as the median.
Every variant's output is checked against eager's before timing.

    python benchmarks/channels_last.py                       # the conv models, ~2 min
    python benchmarks/channels_last.py --models tcn,unet_tiny --repeats 21

Variants (``StaticModuleOptions``): ``off`` — ``channels_last=False`` (what ran before);
``on`` — ``channels_last=True``; ``on+measure`` — also ``kernel_choice="measure"``;
``off+measure``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import click
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONV_MODELS = ("convnext_tiny", "efficientnet_tiny", "unet_tiny", "tcn", "resnet_tiny",
               "mobilenet_tiny", "resnet_small")
VARIANTS = {
    "off": {"channels_last": False},
    "on": {"channels_last": True},
    "off+measure": {"channels_last": False, "kernel_choice": "measure"},
    "on+measure": {"channels_last": True, "kernel_choice": "measure"},
    "off again": {"channels_last": False},  # an A/A control: what the method cannot resolve
}


def _model(name: str, batch: int):
    """(eager module, scripted module, inputs) of a zoo or built-in model."""
    from benchmarks.zoo import ZOO

    if name in ZOO:
        spec = ZOO[name]
        return spec.eager().eval(), spec.scripted(), spec.inputs(batch)
    from static_runtime.models import MODELS

    spec = MODELS[name]
    model = spec.build()
    inputs = spec.example_inputs(batch)
    return model, torch.jit.script(model), inputs


#: The clock: the calling thread's CPU time by default — on a loaded machine it leaves out
#: the time other processes hold the core (one thread: torch and ORT both compute on the
#: calling thread); ``--clock wall`` for wall-clock time.
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}
_clock = CLOCKS["cpu"]


def _time(fn, calls: int) -> float:
    start = _clock()
    for _ in range(calls):
        fn()
    return (_clock() - start) / calls * 1e6


def run_model(name: str, batch: int, variants: list[str], repeats: int, sample_ms: float,
              ort: bool) -> dict:
    import static_runtime as sr
    from static_runtime import compare

    model, scripted, inputs = _model(name, batch)
    with torch.inference_mode():
        expected = model(*inputs)
    runners: dict[str, object] = {}
    choices: dict[str, str] = {}
    for v in variants:
        options = sr.StaticModuleOptions(**VARIANTS[v])
        mod = sr.StaticModule(scripted, options=options)
        got = mod(*inputs)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        from torch.utils._pytree import tree_leaves

        for g, e in zip(tree_leaves(got), tree_leaves(expected), strict=True):
            if isinstance(e, torch.Tensor):
                assert g.stride() == e.stride(), (name, v, g.stride(), e.stride())
        runners[v] = (lambda m=mod: m(*inputs))
        if "kernel_choice" in VARIANTS[v]:
            choices[v] = _choices(mod.describe())
    if ort:
        (peer,) = compare.make_runners(model, inputs, include=("onnxruntime",),
                                       scripted=scripted)
        if peer.note:
            print(f"  ORT: {peer.note}")
        else:
            runners["ORT"] = peer.fn
    for fn in runners.values():  # warm up (the measured kernels choose here)
        for _ in range(5):
            fn()
    calls = {k: max(3, min(500, round(sample_ms * 1e3 / max(_time(fn, 3), 1.0))))
             for k, fn in runners.items()}
    samples: dict[str, list[float]] = {k: [] for k in runners}
    order = list(runners)
    with torch.inference_mode():
        for round_ in range(repeats):  # the order reversed every other round: no runner
            for k in (order if round_ % 2 == 0 else order[::-1]):  # always follows another
                samples[k].append(_time(runners[k], calls[k]))
    return {k: statistics.median(s) for k, s in samples.items()}, choices


def _choices(description: str) -> str:
    """``conv2d_pointwise: onednn 3, matmul 2; ...``: the kernels measurement chose."""
    import collections
    import re

    counts: dict[str, collections.Counter] = {}
    for line in description.splitlines():
        if "by measurement" not in line:
            continue
        kind = line.split()[0].split("::")[-1]
        for name in re.findall(r"threads=\d+: (\w+) \(", line):
            counts.setdefault(kind, collections.Counter())[name] += 1
    return "; ".join(f"{kind}: " + ", ".join(f"{n} {c}" for n, c in counter.most_common())
                     for kind, counter in counts.items())


@click.command()
@click.option("--models", default=",".join(CONV_MODELS))
@click.option("--batch", default=1, show_default=True)
@click.option("--variants", default="off,on,on+measure", show_default=True,
              help=f"From {','.join(VARIANTS)}.")
@click.option("--repeats", default=11, show_default=True)
@click.option("--sample-ms", default=20.0, show_default=True)
@click.option("--no-ort", is_flag=True)
@click.option("--cache-dir", default=None, help="Kernel-choice cache (default: a fresh one).")
@click.option("--clock", type=click.Choice(list(CLOCKS)), default="cpu", show_default=True)
def main(models: str, batch: int, variants: str, repeats: int, sample_ms: float, no_ort: bool,
         cache_dir: str | None, clock: str) -> None:
    import os

    global _clock
    _clock = CLOCKS[clock]
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    os.environ.setdefault("STATIC_RUNTIME_CACHE_DIR", cache_dir or tempfile.mkdtemp())
    names = variants.split(",")
    cols = names + ([] if no_ort else ["ORT"])
    print(f"batch {batch}, 1 thread, µs per call ({clock} time; median of {repeats} samples)")
    print(f"{'model':<18}" + "".join(f"{c:>13}" for c in cols)
          + "".join(f"{c + ' ÷ORT':>17}" for c in ([] if no_ort else names)))
    for name in models.split(","):
        res, choices = run_model(name, batch, names, repeats, sample_ms, not no_ort)
        line = f"{name:<18}" + "".join(f"{res.get(c, float('nan')):>13.1f}" for c in cols)
        if "ORT" in res:
            line += "".join(f"{res[c] / res['ORT']:>17.2f}" for c in names)
        print(line, flush=True)
        for v, chosen in choices.items():
            print(f"{'':<18}{v} chose — {chosen}")


if __name__ == "__main__":
    main()
