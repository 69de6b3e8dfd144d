"""Every GEMM and fused convolution of the model zoo and the built-in models: the kernel ``kernel_choice="measure"``
chooses, against ATen's default and ONNX Runtime's single operator (issue 19).

The shapes are the models' own: each model runs once (per batch size) under
``StaticModuleOptions(kernel_choice="measure")``, and each measured GEMM node reports its
product (rows M, K, N, bias, epilogue) and the kernel chosen for it. Then, for every distinct
product, single-threaded and in inference mode, three forms are timed in alternation on
fresh inputs (µs per call, the median of ``--repeats`` samples of enough calls to last
``--sample-ms``):

* ``aten``    ``addmm(b, x, Wᵀ, out=)`` (``mm`` without bias), the activation in place — what
  the runtime runs without measuring; for convolutions, ``conv2d`` on the NCHW input as eager
  PyTorch runs it
* ``chosen``  the kernel the measurement chose (``ops/gemm.py``), writing into the same
  ``out``; for convolutions (``ops/conv.py``) on the input in the layout the model gave it
* ``ORT``     a one-node ONNX model, ``Gemm(x, W, b, transB=1)`` (``MatMul`` without bias) with
  the activation as a second node, in an ONNX Runtime session with one intra-op thread (its
  graph optimiser fuses what it can), run through ``run_with_iobinding`` on bound inputs;
  for convolutions ``Conv`` on the NCHW input

GFLOP/s is 2·M·K·N / time. ``chosen ÷ ORT`` above 1 means ORT is faster.

    python benchmarks/kernels.py                         # zoo + built-in models, ~3 min
    python benchmarks/kernels.py --models hf_bert,mlp --repeats 5
    python benchmarks/kernels.py --json-out kernels.json
    python benchmarks/kernels.py --whole --sample-ms 10    # whole models, measure vs default

The measurement caches its choices in a temporary directory (``--cache-dir`` to keep them),
so every run measures afresh on the machine it runs on.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: the products ``ops/gemm.py`` measures (its ``problem`` is ``(op, k, n, bias, epilogue)``)
GEMM_OPS = ("linear", "addmm", "mm", "matmul")

#: epilogue → ONNX activation node (op type, attributes); ``relu6`` and ``silu`` are special.
_ONNX_ACTS = {
    "relu": ("Relu", {}), "tanh": ("Tanh", {}), "sigmoid": ("Sigmoid", {}),
    "gelu": ("Gelu", {}), "gelu_tanh": ("Gelu", {"approximate": "tanh"}),
    "hardswish": ("HardSwish", {}),
}


def _act_nodes(attr: str) -> tuple[list, list]:
    """ONNX nodes taking ``Y0`` to ``Y`` as the epilogue ``attr`` does, and initializers."""
    from onnx import helper, numpy_helper

    if attr == "none":
        return [helper.make_node("Identity", ["Y0"], ["Y"])], []
    if attr == "silu":
        return [helper.make_node("Sigmoid", ["Y0"], ["S"]),
                helper.make_node("Mul", ["Y0", "S"], ["Y"])], []
    if attr == "relu6":
        import numpy as np

        return [helper.make_node("Clip", ["Y0", "lo", "hi"], ["Y"])], [
            numpy_helper.from_array(np.array(0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6, np.float32), "hi")]
    op, attrs = _ONNX_ACTS[attr]
    return [helper.make_node(op, ["Y0"], ["Y"], **attrs)], []


def collect(names: list[str]) -> tuple[dict[tuple, set[str]], dict[tuple, set[str]]]:
    """GEMMs: (op, M, K, N, bias, attr, chosen kernel) → the model cases they come from;
    convolutions: (input shape, channels-last, weight shape, stride, padding, dilation,
    groups, bias, attr, chosen kernel) → likewise."""
    import static_runtime as sr
    from benchmarks.zoo import ZOO
    from static_runtime.models import MODELS

    shapes: dict[tuple, set[str]] = {}
    convs: dict[tuple, set[str]] = {}
    options = sr.StaticModuleOptions(kernel_choice="measure")
    for name in names:
        if name in ZOO:
            spec = ZOO[name]
            scripted, batches = spec.scripted(), spec.batches
            inputs = spec.inputs
        else:
            spec = MODELS[name]
            scripted, batches = torch.jit.script(spec.build()), (1, 64)
            inputs = spec.example_inputs
        for batch in batches:
            mod = sr.StaticModule(scripted, options)
            mod.kernels.model_budget_s = 1e9  # every product of the model, however slow
            mod(*inputs(batch))
            for pn in mod.plan.nodes():
                problem = getattr(pn.fn, "problem", None)
                if problem is None or not (problem[0] == "conv2d" and len(problem) == 8
                                           or len(problem) == 5
                                           and problem[0].split("+")[0] in GEMM_OPS):
                    continue  # (1-D convolutions: ``benchmarks/conv_paths.py``; norms and recurrent
                    # layers: ``benchmarks/recurrent.py``; attention and activations:
                    # ``benchmarks/small_kernels.py``; unfused convolutions, gated linears
                    # and layer norms: the zoo runs)
                if problem[0] == "conv2d":
                    _, w, stride, padding, dilation, groups, has_bias, attr = problem
                    for bucket, choice in pn.fn.choices.items():
                        shape, cl = pn.fn.measured_at[bucket], bucket[1]
                        key = (tuple(shape), cl, w, tuple(stride), tuple(padding),
                               tuple(dilation), groups, has_bias, attr, choice.name)
                        convs.setdefault(key, set()).add(f"{name}:{batch}")
                    continue
                op, k, n, has_bias, attr = problem
                for bucket, choice in pn.fn.choices.items():
                    rows = pn.fn.measured_at[bucket]
                    key = (op.split("+")[0], rows, k, n, has_bias, attr, choice.name)
                    shapes.setdefault(key, set()).add(f"{name}:{batch}")
    return shapes, convs


def _ort_session(nodes: list, inits: list, x, y_shape: list[int]):
    """``(run, result)`` of a one-operator ONNX model (plus its epilogue) on input ``x``."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, "op", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    binding = sess.io_binding()
    binding.bind_cpu_input("X", x.contiguous().numpy())
    binding.bind_output("Y", "cpu")

    def run():
        sess.run_with_iobinding(binding)

    def result():
        sess.run_with_iobinding(binding)
        return torch.from_numpy(binding.copy_outputs_to_cpu()[0])

    run.in_model_share = lambda keep=(): _share_without_reorders(  # type: ignore[attr-defined]
        model, x, keep)
    return run, result


#: ORT's layout conversions around a convolution it runs in its blocked (NCHWc) layout: in a
#: model they sit at a few edges, not around every convolution
_REORDERS = ("ReorderInput", "ReorderOutput")


def _share_without_reorders(model, x, keep: tuple[str, ...] = (), calls: int = 200) -> float:
    """The share of a one-operator model's node time ORT spends outside its layout
    reorders (but those named in ``keep``), from its profiler's per-node kernel times."""
    import json
    import tempfile

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = f"{tmp}/p"
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        feed = {"X": x.contiguous().numpy()}
        for _ in range(calls):
            sess.run(None, feed)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    total = kept = 0
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            total += e["dur"]
            if e["args"].get("op_name") not in _REORDERS or e["args"].get("op_name") in keep:
                kept += e["dur"]
    return kept / total if total else 1.0


def _ort_gemm(m: int, n: int, weight, bias, attr: str, x):
    from onnx import helper, numpy_helper

    if bias is not None:
        inits = [numpy_helper.from_array(weight.numpy(), "W"),
                 numpy_helper.from_array(bias.numpy(), "B")]
        nodes = [helper.make_node("Gemm", ["X", "W", "B"], ["Y0"], transB=1)]
    else:
        inits = [numpy_helper.from_array(weight.t().contiguous().numpy(), "WT")]
        nodes = [helper.make_node("MatMul", ["X", "WT"], ["Y0"])]
    acts, consts = _act_nodes(attr)
    return _ort_session(nodes + acts, inits + consts, x, [m, n])


def _time_forms(forms: dict, repeats: int, sample_ms: float) -> dict[str, float]:
    """Median µs per call of each form, timed in alternation (order reversed every other
    round)."""
    calls = {}
    for name, fn in forms.items():
        fn()
        t0 = time.perf_counter()
        fn()
        once = time.perf_counter() - t0
        calls[name] = max(1, int(sample_ms * 1e-3 / max(once, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in forms}
    order = list(forms.items())
    for r in range(repeats):
        # the order reversed every other round: whichever runs second is not always the one
        # that finds caches holding the other's data
        for name, fn in (order if r % 2 == 0 else order[::-1]):
            c = calls[name]
            t0 = time.perf_counter()
            for _ in range(c):
                fn()
            samples[name].append((time.perf_counter() - t0) / c * 1e6)
    return {name: statistics.median(v) for name, v in samples.items()}


def _with_ort(forms: dict, make_ort, expected) -> str:
    """Adds ORT's form if it builds and agrees; the reason if not."""
    try:
        run, result = make_ort()
        torch.testing.assert_close(result(), expected.contiguous(), rtol=1e-3, atol=1e-3)
    except Exception as e:  # noqa: BLE001  (reported in the row)
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    forms["ORT"] = run
    return ""


def time_shape(key: tuple, repeats: int, sample_ms: float) -> dict:
    from static_runtime.ops.gemm import GemmKernels

    op, m, k, n, has_bias, attr, chosen = key
    gen = torch.Generator().manual_seed(m * 131 + k * 7 + n)
    x = torch.randn(m, k, generator=gen)
    weight = torch.randn(n, k, generator=gen) / math.sqrt(k)
    bias = torch.randn(n, generator=gen) if has_bias else None
    kernels = GemmKernels(weight.t(), bias, attr)
    out = torch.empty(m, n)
    aten_k, chosen_k = kernels.kernel("aten", m), kernels.kernel(chosen, m)
    forms = {"aten": lambda: aten_k(x, out)}
    if chosen != "aten":  # (the same kernel is timed once)
        forms["chosen"] = lambda: chosen_k(x, out)
    expected = aten_k(x, None)
    torch.testing.assert_close(chosen_k(x, None), expected, rtol=1e-4, atol=1e-4)
    ort_error = _with_ort(forms, lambda: _ort_gemm(m, n, weight, bias, attr, x), expected)
    med = _time_forms(forms, repeats, sample_ms)
    med.setdefault("chosen", med["aten"])
    flops = 2 * m * k * n
    return {"op": op, "M": m, "K": k, "N": n, "bias": has_bias, "epilogue": attr,
            "chosen": chosen, "us": med,
            "gflops": {name: flops / (t * 1e3) for name, t in med.items()},
            "ort_error": ort_error}


def _ort_conv(x, weight, bias, stride, padding, dilation, groups, attr, y_shape):
    from onnx import helper, numpy_helper

    inputs = ["X", "W"] + (["B"] if bias is not None else [])
    inits = [numpy_helper.from_array(weight.contiguous().numpy(), "W")]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias.numpy(), "B"))
    kernel = list(weight.shape[2:])
    nodes = [helper.make_node("Conv", inputs, ["Y0"], kernel_shape=kernel, strides=list(stride),
                              pads=list(padding) * 2, dilations=list(dilation), group=groups)]
    acts, consts = _act_nodes(attr)
    return _ort_session(nodes + acts, inits + consts, x, y_shape)


def time_conv(key: tuple, repeats: int, sample_ms: float) -> dict:
    from static_runtime.ops.conv import ConvKernels

    shape, cl, wshape, stride, padding, dilation, groups, has_bias, attr, chosen = key
    gen = torch.Generator().manual_seed(sum(shape) * 31 + sum(wshape))
    x = torch.randn(shape, generator=gen)
    x_in = x.contiguous(memory_format=torch.channels_last) if cl else x
    fan_in = wshape[1] * wshape[2] * wshape[3]
    weight = torch.randn(wshape, generator=gen) / math.sqrt(fan_in)
    bias = torch.randn(wshape[0], generator=gen) if has_bias else None
    args = (list(stride), list(padding), list(dilation), groups)
    kernels = ConvKernels(weight, bias, *args, attr)
    act = {"none": None, "relu": torch.relu_, "relu6": lambda t: t.clamp_(0, 6),
           "hardswish": torch.nn.functional.hardswish, "silu": torch.nn.functional.silu}[attr]

    def aten():  # ATen's conv2d on the NCHW input, as eager PyTorch runs it
        y = torch.conv2d(x, weight, bias, *args)
        return y if act is None else act(y)

    chosen_k = kernels.kernel(chosen)
    expected = aten()
    torch.testing.assert_close(chosen_k(x_in), expected, rtol=1e-4, atol=1e-4)
    forms = {"aten": aten, "chosen": lambda: chosen_k(x_in)}
    ort_error = _with_ort(forms, lambda: _ort_conv(x, weight, bias, *args, attr,
                                                   list(expected.shape)), expected)
    med = _time_forms(forms, repeats, sample_ms)
    if "ORT" in forms:  # its time without the reorders a model pays only at its edges
        # (a channels-first input is a model's own: ORT reorders it there too)
        keep = () if cl else ("ReorderInput",)
        med["ORT in a model"] = med["ORT"] * forms["ORT"].in_model_share(keep)
    return {"x": list(shape), "channels_last": cl, "weight": list(wshape), "stride": stride,
            "padding": padding, "groups": groups, "bias": has_bias, "epilogue": attr,
            "chosen": chosen, "us": med, "ort_error": ort_error}


def whole_models(names: list[str], repeats: int, sample_ms: float) -> list[dict]:
    """Each model at each batch, default options against ``kernel_choice="measure"``, in one
    process, calls alternating (each after its first call, which measures on a cold cache)."""
    import static_runtime as sr
    from benchmarks.zoo import ZOO
    from static_runtime.models import MODELS
    from static_runtime.runtime.hot import wait_for_builds

    rows = []
    for name in names:
        if name in ZOO:
            spec = ZOO[name]
            scripted, batches, make_inputs = spec.scripted(), spec.batches, spec.inputs
        else:
            spec = MODELS[name]
            scripted, batches = torch.jit.script(spec.build()), (1, 64)
            make_inputs = spec.example_inputs
        for batch in batches:
            inputs = make_inputs(batch)
            runs, first = {}, {}
            for label, choice in (("default", "default"), ("measure", "measure")):
                mod = sr.StaticModule(scripted, sr.StaticModuleOptions(kernel_choice=choice))
                rt = mod.runtime()
                t0 = time.perf_counter()
                rt(*inputs)
                first[label] = (time.perf_counter() - t0) * 1e3
                for _ in range(mod.options.specialize_after + 1):
                    rt(*inputs)
                runs[label] = (lambda rt=rt, inputs=inputs: rt(*inputs))
            wait_for_builds()
            med = _time_forms(runs, repeats, sample_ms)
            rows.append({"model": name, "batch": batch, "us": med, "first_call_ms": first,
                         "ratio": med["measure"] / med["default"]})
            print(f"{name:20s} {batch:4d} default {med['default']:9.1f} µs  measure "
                  f"{med['measure']:9.1f} µs  ratio {rows[-1]['ratio']:5.2f}  first call "
                  f"{first['default']:.0f} / {first['measure']:.0f} ms", flush=True)
    ratios = [r["ratio"] for r in rows]
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"geomean measure ÷ default {geo:.3f}; min {min(ratios):.2f}, max {max(ratios):.2f}; "
          f"{sum(r > 1.03 for r in ratios)} of {len(ratios)} above 1.03")
    return rows


@click.command()
@click.option("--models", default=None,
              help="Comma-separated zoo or built-in model names (default: all of both).")
@click.option("--repeats", default=9, show_default=True, help="Timing samples per form.")
@click.option("--sample-ms", default=3.0, show_default=True, help="Length of one sample.")
@click.option("--cache-dir", default=None,
              help="Kernel choice cache directory (default: a fresh temporary one).")
@click.option("--json-out", default=None, help="Write the rows as JSON here.")
@click.option("--whole", is_flag=True,
              help="Whole models instead: default options against kernel_choice='measure', "
                   "side by side in this process.")
def main(models: str | None, repeats: int, sample_ms: float, cache_dir: str | None,
         json_out: str | None, whole: bool) -> None:
    from benchmarks.zoo import ZOO
    from static_runtime.models import MODELS

    torch.set_num_threads(1)
    names = [m.strip() for m in models.split(",")] if models else [*ZOO, *MODELS]
    bad = [m for m in names if m not in ZOO and m not in MODELS]
    if bad:
        raise click.BadParameter(f"unknown model(s) {bad}", param_hint="--models")
    tmp = None
    if cache_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="sr_kernels_")
        cache_dir = tmp.name
    os.environ["STATIC_RUNTIME_CACHE_DIR"] = cache_dir
    start = time.perf_counter()
    if whole:
        with torch.inference_mode():
            rows = whole_models(names, repeats, sample_ms)
        if json_out:
            Path(json_out).write_text(json.dumps({"threads": 1, "models": rows}, indent=1))
        return
    with torch.inference_mode():
        shapes, convs = collect(names)
        rows = []
        for key in sorted(shapes, key=lambda s: (s[1] * s[2] * s[3], s)):
            row = time_shape(key, repeats, sample_ms)
            row["cases"] = sorted(shapes[key])
            rows.append(row)
        conv_rows = []
        for key in sorted(convs, key=str):
            row = time_conv(key, repeats, sample_ms)
            row["cases"] = sorted(convs[key])
            conv_rows.append(row)
    _print(rows)
    if conv_rows:
        _print_convs(conv_rows)
    print(f"({len(rows)} products, {len(conv_rows)} convolutions, "
          f"{time.perf_counter() - start:.0f} s; single thread; medians of {repeats} samples)")
    if json_out:
        Path(json_out).write_text(json.dumps({"threads": 1, "gemms": rows, "convs": conv_rows},
                                             indent=1))
        print(f"JSON: {json_out}")
    if tmp is not None:
        tmp.cleanup()


def _print(rows: list[dict]) -> None:
    head = (f"{'op':7s} {'M':>5s} {'K':>5s} {'N':>5s} {'bias':4s} {'epilogue':9s} "
            f"{'chosen':6s} {'aten µs':>9s} {'chosen µs':>9s} {'ORT µs':>9s} "
            f"{'GF/s aten':>9s} {'chosen':>7s} {'ORT':>7s} {'ch/aten':>7s} {'ch/ORT':>7s}")
    print(head)
    ratios_aten, ratios_ort = [], []
    for r in rows:
        us, gf = r["us"], r["gflops"]
        ort = us.get("ORT", float("nan"))
        ra, ro = us["chosen"] / us["aten"], us["chosen"] / ort
        ratios_aten.append(ra)
        if not math.isnan(ro):
            ratios_ort.append(ro)
        print(f"{r['op']:7s} {r['M']:5d} {r['K']:5d} {r['N']:5d} {str(r['bias'])[0]:4s} "
              f"{r['epilogue']:9s} {r['chosen']:6s} {us['aten']:9.1f} {us['chosen']:9.1f} "
              f"{ort:9.1f} {gf['aten']:9.1f} {gf['chosen']:7.1f} {gf.get('ORT', math.nan):7.1f} "
              f"{ra:7.2f} {ro:7.2f}{'  ' + r['ort_error'] if r['ort_error'] else ''}")

    def geomean(v):
        return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")

    if not rows:  # (a model without GEMMs: a conv net's convolutions are listed below)
        print("no GEMM-like node")
        return
    big = [r["us"]["chosen"] / r["us"]["ORT"] for r in rows if r["M"] >= 8 and "ORT" in r["us"]]
    print(f"geomean chosen ÷ aten {geomean(ratios_aten):.2f} (max {max(ratios_aten):.2f}); "
          f"chosen ÷ ORT {geomean(ratios_ort):.2f}; at M >= 8: {geomean(big):.2f} "
          f"({sum(x <= 1 / 0.9 for x in big)} of {len(big)} at >= 90 % of ORT's GFLOP/s)")


def _print_convs(rows: list[dict]) -> None:
    print(f"\n{'x':16s} {'CL':2s} {'weight':16s} {'s':1s} {'g':>3s} {'epilogue':9s} "
          f"{'chosen':6s} {'aten µs':>8s} {'chosen µs':>9s} {'ORT µs':>8s} {'in model':>8s} "
          f"{'ch/aten':>7s} {'ch/ORT':>7s} {'ch/in m':>7s}")
    ra, ro, rm = [], [], []
    for r in rows:
        us = r["us"]
        ort = us.get("ORT", float("nan"))
        in_model = us.get("ORT in a model", float("nan"))
        ra.append(us["chosen"] / us["aten"])
        if not math.isnan(ort):
            ro.append(us["chosen"] / ort)
            rm.append(us["chosen"] / in_model)
        print(f"{'x'.join(map(str, r['x'])):16s} {'y' if r['channels_last'] else 'n':2s} "
              f"{'x'.join(map(str, r['weight'])):16s} {r['stride'][0]:1d} {r['groups']:3d} "
              f"{r['epilogue']:9s} {r['chosen']:6s} {us['aten']:8.1f} {us['chosen']:9.1f} "
              f"{ort:8.1f} {in_model:8.1f} {ra[-1]:7.2f} {us['chosen'] / ort:7.2f} "
              f"{us['chosen'] / in_model:7.2f}"
              f"{'  ' + r['ort_error'] if r['ort_error'] else ''}")

    def geomean(v):
        return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")

    print(f"convolutions: geomean chosen ÷ aten {geomean(ra):.2f}; chosen ÷ ORT "
          f"{geomean(ro):.2f} ({sum(x <= 1.2 for x in ro)} of {len(ro)} within 1.2 × ORT); "
          f"chosen ÷ ORT without its layout reorders (as in a model) {geomean(rm):.2f} "
          f"({sum(x <= 1.2 for x in rm)} of {len(rm)} within 1.2 ×)")


if __name__ == "__main__":
    main()
