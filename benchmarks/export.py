"""The torch.export frontend against the TorchScript one (issue 7): µs per call of our runtime
built from the TorchScript import and from the ``torch.export`` import of the same model (as
exported, and after ``run_decompositions()``), with eager PyTorch for reference.

One process, one thread; every runner is timed in ``--repeats`` samples of ``--calls``
calls, the runners alternated within each repeat, and the median sample is reported. Each
runner's output is checked against eager's first. Models whose forward ``torch.export``
refuses (``control_flow``, ``attribute_setter``) are exported from their rewrite in
``static_runtime.models.export`` (same weights, same results); TorchScript and eager run the
original. Exports use ``dynamic_shapes`` (a symbolic batch), as a served model would.

    python benchmarks/export.py                       # all models, batch 1 and 32, ~1 minute
    python benchmarks/export.py --models mlp,dlrm --batches 1 --repeats 5
    python benchmarks/export.py --zoo                 # the model zoo at both its batches (issue 19)
    python benchmarks/export.py --zoo --models hf_llama,hf_bert --repeats 21

``--zoo`` runs ``benchmarks.zoo`` models: ours from the model's own TorchScript module
(``scripted()``: traced or scripted) against ours from ``torch.export`` with the symbolic
batch and sequence dimensions ``benchmarks/export_zoo.py`` finds; models ``torch.export``
refuses (data-dependent control flow) are listed as such. The calls per sample are chosen per
case so that a sample takes about 10 ms, after 2,200 warm-up calls each (at most 4 s):
signatures get code of their own after some (``runtime/hot.py``).
"""

from __future__ import annotations

import statistics
import time
import warnings

import click
import torch

import static_runtime as sr
from static_runtime.frontend.export import import_export
from static_runtime.models import MODELS
from static_runtime.models.export import export_case
from static_runtime.runtime.hot import wait_for_builds

#: µs a sample of the zoo comparison lasts, about
SAMPLE_US = 10_000
#: warm-up calls of each zoo runner: past ``hot.PROGRAM_CALLS``, at most ``WARMUP_US`` µs
WARMUP_CALLS, WARMUP_US = 2_200, 4_000_000
RUNNERS = ("eager", "ours: TorchScript", "ours: export", "ours: export, decomposed")


def _runners(name: str, batch: int) -> tuple[dict, tuple]:
    eager = MODELS[name].build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(eager)
    # Exported from a batch of 2: an example of size 1 would specialise the batch dimension.
    model, example, dynamic = export_case(name, batch=2)
    ep = torch.export.export(model, example, dynamic_shapes=dynamic)
    _, inputs, _ = export_case(name, batch=batch, seed=1)
    from_export = sr.StaticModule(ep, example_inputs=inputs)
    decomposed = sr.StaticModule(import_export(ep, decompose=True), example_inputs=inputs)
    from_ts = sr.StaticModule(scripted, example_inputs=inputs)

    def eager_fn(*xs):
        with torch.inference_mode():
            return eager(*xs)

    runners = {RUNNERS[0]: eager_fn, RUNNERS[1]: from_ts.runtime(),
               RUNNERS[2]: from_export.runtime(), RUNNERS[3]: decomposed.runtime()}
    return runners, inputs


def _time(fn, inputs: tuple, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*inputs)
    return (time.perf_counter() - start) / calls * 1e6


def _zoo(models: str | None, repeats: int) -> None:
    from benchmarks.export_zoo import export_case
    from benchmarks.zoo import ZOO

    labels = ("ours: TorchScript", "ours: export")
    print(f"torch {torch.__version__}, 1 thread, median of {repeats} samples, µs per call")
    print(f"| model | exported with | batch | {' | '.join(labels)} | export / TorchScript |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in models.split(",") if models else ZOO:
        for batch in ZOO[name].batches:
            try:
                case = export_case(name, batch)
            except RuntimeError as e:
                print(f"| {name} | not exported: {str(e.__cause__).splitlines()[0][:60]} |||||")
                break
            inputs = ZOO[name].inputs(batch, seed=1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mods = (sr.StaticModule(case.scripted, example_inputs=inputs),
                        sr.StaticModule(case.program, example_inputs=inputs))
            with torch.inference_mode():
                expected = case.eager(*inputs)
            for label, mod in zip(labels, mods, strict=True):
                torch.testing.assert_close(mod(*inputs), expected, msg=lambda m, label=label,
                                           name=name: f"{name} {label}: {m}")
            fns = [m.runtime() for m in mods]
            for fn in fns:  # warm up past the code built for hot signatures (runtime/hot.py)
                _time(fn, inputs, int(min(WARMUP_CALLS, WARMUP_US / _time(fn, inputs, 3))))
            # and past the builds that asked for: timed while they ran, a fresh module's calls
            # are 10-50 x slower (the build holds the GIL each kernel call lets go of)
            wait_for_builds()
            for fn in fns:
                _time(fn, inputs, 10)
            calls = max(3, int(SAMPLE_US / max(_time(fn, inputs, 3) for fn in fns)))
            samples: list[list[float]] = [[], []]
            for _ in range(repeats):
                for fn, sample in zip(fns, samples, strict=True):
                    sample.append(_time(fn, inputs, calls))
            med = [statistics.median(s) for s in samples]
            print(f"| {name} | {case.dims} | {batch} | {med[0]:.1f} | {med[1]:.1f} | "
                  f"{med[1] / med[0]:.2f} |", flush=True)


@click.command()
@click.option("--zoo", is_flag=True, help="the model zoo (benchmarks/zoo/) instead")
@click.option("--models", default=None, help="comma-separated model names (default: all)")
@click.option("--batches", default="1,32", help="comma-separated batch sizes")
@click.option("--repeats", default=7, show_default=True)
@click.option("--calls", default=100, show_default=True)
def main(zoo: bool, models: str | None, batches: str, repeats: int, calls: int) -> None:
    torch.set_num_threads(1)
    if zoo:
        _zoo(models, repeats)
        return
    models = models or ",".join(MODELS)
    print(f"torch {torch.__version__}, 1 thread, median of {repeats} x {calls} calls, µs per call")
    header = f"| model | batch | {' | '.join(RUNNERS)} | export / TorchScript |"
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for name in models.split(","):
        for batch in (int(b) for b in batches.split(",")):
            runners, inputs = _runners(name, batch)
            expected = runners[RUNNERS[0]](*inputs)
            for label, fn in runners.items():
                torch.testing.assert_close(fn(*inputs), expected,
                                           msg=lambda m, label=label, name=name: f"{name} {label}: {m}")
                _time(fn, inputs, max(3, calls // 10))  # warm up
            wait_for_builds()  # (what the warm-up asked for is built: not timed while it runs)
            samples: dict[str, list[float]] = {label: [] for label in runners}
            for _ in range(repeats):
                for label, fn in runners.items():
                    samples[label].append(_time(fn, inputs, calls))
            med = {label: statistics.median(s) for label, s in samples.items()}
            ratio = med[RUNNERS[2]] / med[RUNNERS[1]]
            cells = " | ".join(f"{med[label]:.1f}" for label in RUNNERS)
            print(f"| {name} | {batch} | {cells} | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
