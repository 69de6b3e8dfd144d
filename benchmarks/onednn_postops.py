"""oneDNN fused post-ops against what the runtime runs now, side by side (issue 12).

For each shape class of our models (``static_runtime/models/`` MLP and DLRM, the zoo's
transformer feed-forwards, the MobileNet/ResNet convolutions in ``benchmarks/zoo/``) and
each activation, the forms below are timed in alternation, single-threaded, inference mode;
µs per call, the median of ``--repeats`` samples of ``--calls`` calls each (wall time, or
the thread's CPU time with ``--clock thread``).

Linear (``x`` is ``(rows, k)``, ``W`` a constant ``(n, k)`` float32 weight):

* ``now``      what the runtime runs: ``addmm(b, x, W.t(), out=o)`` then the activation in
  place on ``o`` (``relu_``, ``tanh_``, ``sigmoid_``, ``hardswish_``, ``hardtanh_``) or,
  for ``gelu`` (no in-place form), ``gelu(o, out=o2)``; ``add``: ``add(o, y, out=o2)``
* ``onednn``   ``mkldnn._linear_pointwise(x, W', b, attr, scalars, algorithm)`` on a weight
  reordered once by ``mkldnn._reorder_linear_weight`` (``.binary`` with ``"add"`` for add)
* ``mkl+act``  ``mkl._mkl_linear`` on an MKL-packed weight (what Inductor uses for float32
  on x86), then the activation as in ``now``

Convolution (``x`` NCHW for ``now``, channels-last for the oneDNN forms, as inside a fused
region):

* ``now``      ``conv2d(x, W, b, ...)`` then the activation in place (the path of a
  convolution whose region reaches a layout-sensitive use)
* ``pw+act``   ``mkldnn._convolution_pointwise(..., "none")`` on a prepacked weight, then the
  activation in place (what ``fuse_convolution`` runs for a region it fuses, where the
  activation is not relu)
* ``fused``    ``_convolution_pointwise`` with the activation as its post-op; for ``add``
  ``_convolution_pointwise.binary(x, other, ..., "add")``
* ``fused_ +copy``  ``add`` only: ``_convolution_pointwise_.binary``, accumulating into a
  copy of ``other`` (the in-place form overwrites it; the copy is timed too)
* ``mm+act``   1 × 1, stride 1, ungrouped only: the convolution as ``addmm`` on the
  channels-last input seen as a (pixels, channels) matrix, written channels-last, then the
  activation in place

Ratios ``best / now`` below 1 favour the fused form. Run::

    python benchmarks/onednn_postops.py                     # ~3 minutes on 2 shared cores
    python benchmarks/onednn_postops.py --only conv --json postops.json
    python benchmarks/onednn_postops.py --sweep         # linear: rows x (k, n) grid
    python benchmarks/onednn_postops.py --models        # whole models, each pass on vs off
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import click
import torch
import torch.nn.functional as F

mkldnn = torch.ops.mkldnn

#: (label, batch rows, in features, out features): the linear layers of our models.
LINEAR_SHAPES = [
    ("mlp 64", 1, 64, 64), ("mlp 64", 64, 64, 64),
    ("dlrm bottom 13-512", 1, 13, 512), ("dlrm bottom 13-512", 256, 13, 512),
    ("dlrm 512-256", 1, 512, 256), ("dlrm 512-256", 256, 512, 256),
    ("dlrm top 100-128", 1, 100, 128), ("dlrm top 100-128", 256, 100, 128),
    ("bert ff 128-512 (32 tok)", 32, 128, 512), ("bert ff 128-512", 256, 128, 512),
    ("mobilenet head 96-128", 1, 96, 128), ("mobilenet head 96-128", 4, 96, 128),
    ("base ff 768-3072", 1, 768, 3072), ("base ff 768-3072 (32 tok)", 32, 768, 3072),
    ("narrow 32-32", 1, 32, 32), ("narrow 32-32", 64, 32, 32),
]

#: (label, batch, cin, cout, kernel, stride, groups, spatial) from the zoo's conv nets.
CONV_SHAPES = [
    ("mbv3 stem 3-16 s2", 1, 3, 16, 3, 2, 1, 32), ("mbv3 stem 3-16 s2", 4, 3, 16, 3, 2, 1, 32),
    ("mbv3 1x1 16-64", 1, 16, 64, 1, 1, 1, 16), ("mbv3 1x1 16-64", 4, 16, 64, 1, 1, 1, 16),
    ("mbv3 dw 64 s2", 1, 64, 64, 3, 2, 64, 16), ("mbv3 dw 64 s2", 4, 64, 64, 3, 2, 64, 16),
    ("mbv3 dw 72", 1, 72, 72, 3, 1, 72, 8), ("mbv3 dw 72", 4, 72, 72, 3, 1, 72, 8),
    ("mbv3 1x1 40-120", 1, 40, 120, 1, 1, 1, 4), ("mbv3 dw 120", 1, 120, 120, 3, 1, 120, 4),
    ("mbv3 head 48-96", 1, 48, 96, 1, 1, 1, 4), ("mbv3 head 48-96", 4, 48, 96, 1, 1, 1, 4),
    ("resnet 3x3 16", 1, 16, 16, 3, 1, 1, 32), ("resnet 3x3 16", 4, 16, 16, 3, 1, 1, 32),
    ("resnet 3x3 64", 1, 64, 64, 3, 1, 1, 8), ("resnet 3x3 64", 4, 64, 64, 3, 1, 1, 8),
    ("dw 256 (larger)", 8, 256, 256, 3, 1, 256, 28),
    ("1x1 256-64 (larger)", 1, 256, 64, 1, 1, 1, 56),
    ("1x1 64-256 (larger)", 8, 64, 256, 1, 1, 1, 28),
]

#: ``--sweep``: rows × (k, n) grid for where oneDNN's linear starts to pay.
SWEEP_ROWS = [1, 8, 32, 64, 128, 256]
SWEEP_WIDTHS = [(128, 512), (512, 128), (256, 256), (512, 512), (768, 768), (1024, 1024),
                (768, 3072), (3072, 768)]

LINEAR_ACTS = ["relu", "gelu", "tanh", "sigmoid", "hardswish", "relu6", "add"]
CONV_ACTS = ["relu6", "hardswish", "silu", "add"]

#: activation → (in-place form, oneDNN attr, scalars, algorithm)
_ONEDNN_UNARY = {
    "relu": ("relu", [], ""), "gelu": ("gelu", [], "none"), "tanh": ("tanh", [], ""),
    "sigmoid": ("sigmoid", [], ""), "hardswish": ("hardswish", [], ""),
    "relu6": ("hardtanh", [0.0, 6.0], ""), "silu": ("swish", [], ""),
}


def _in_place(act: str) -> Callable[[torch.Tensor], torch.Tensor]:
    nn = torch._C._nn
    return {"relu": torch.relu_, "tanh": torch.tanh_, "sigmoid": torch.sigmoid_,
            "hardswish": nn.hardswish_, "relu6": lambda t: nn.hardtanh_(t, 0.0, 6.0),
            "silu": nn.silu_}[act]


#: The clock ``_time`` reads: wall time, or with ``--clock thread`` the thread's CPU time
#: (steadier when other processes share the cores).
_CLOCK = [time.perf_counter_ns]


def _time(fns: dict[str, Callable[[], object]], calls: int, repeats: int) -> dict[str, float]:
    clock = _CLOCK[0]
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm up (oneDNN primitive caches, allocator)
        for _ in range(max(3, calls // 4)):
            fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = clock()
            for _ in range(calls):
                fn()
            samples[name].append((clock() - t0) / 1e3 / calls)
    return {k: statistics.median(v) for k, v in samples.items()}


def _calls_for(flops: float) -> int:
    return int(min(400, max(10, 4e7 / max(flops, 1.0))))


def linear_case(rows: int, k: int, n: int, act: str, calls: int | None, repeats: int,
                check: bool = True) -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, k, generator=g)
    w = torch.randn(n, k, generator=g) / k ** 0.5
    b = torch.randn(n, generator=g)
    y = torch.randn(rows, n, generator=g)
    wt = w.t()
    o, o2 = torch.empty(rows, n), torch.empty(rows, n)
    packed = mkldnn._reorder_linear_weight(w, rows)
    mkl_packed = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
    addmm, mkl_linear = torch.addmm, torch.ops.mkl._mkl_linear
    fns: dict[str, Callable[[], object]] = {}
    if act == "add":
        add = torch.add
        binary = mkldnn._linear_pointwise.binary

        fns["now"] = lambda: add(addmm(b, x, wt, out=o), y, out=o2)
        fns["onednn"] = lambda: binary(x, y, packed, b, "add")
        fns["mkl+act"] = lambda: add(mkl_linear(x, mkl_packed, w, b, rows), y, out=o2)
        reference = F.linear(x, w, b) + y
    else:
        attr, scalars, algorithm = _ONEDNN_UNARY[act]
        pointwise = mkldnn._linear_pointwise.default
        if act == "gelu":
            gelu = torch._C._nn.gelu
            fns["now"] = lambda: gelu(addmm(b, x, wt, out=o), out=o2)
            fns["mkl+act"] = lambda: gelu(mkl_linear(x, mkl_packed, w, b, rows))
            reference = F.gelu(F.linear(x, w, b))
        else:
            inplace = _in_place(act)
            fns["now"] = lambda: inplace(addmm(b, x, wt, out=o))
            fns["mkl+act"] = lambda: inplace(mkl_linear(x, mkl_packed, w, b, rows))
            reference = inplace(F.linear(x, w, b))
        fns["onednn"] = lambda: pointwise(x, packed, b, attr, scalars, algorithm)
    if check:
        for name, fn in fns.items():
            torch.testing.assert_close(fn(), reference, rtol=1e-4, atol=1e-4,
                                       msg=lambda m, name=name: f"{name}: {m}")
    flops = 2.0 * rows * k * n
    return _time(fns, calls or _calls_for(flops), repeats)


def conv_case(batch: int, cin: int, cout: int, kernel: int, stride: int, groups: int,
              spatial: int, act: str, calls: int | None, repeats: int,
              check: bool = True) -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, cin, spatial, spatial, generator=g)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(cout, cin // groups, kernel, kernel, generator=g) / (cin // groups * kernel
                                                                         * kernel) ** 0.5
    b = torch.randn(cout, generator=g)
    pad = kernel // 2
    padding, strides, dilation = [pad, pad], [stride, stride], [1, 1]
    packed = mkldnn._reorder_convolution_weight(w, padding, strides, dilation, groups)
    conv2d = torch.conv2d
    pointwise = mkldnn._convolution_pointwise.default
    out_hw = (spatial + 2 * pad - kernel) // stride + 1
    other = torch.randn(batch, cout, out_hw, out_hw, generator=g)
    other_cl = other.contiguous(memory_format=torch.channels_last)
    acc = other_cl.clone()
    fns: dict[str, Callable[[], object]] = {}
    pointwise_1x1 = kernel == 1 and groups == 1 and stride == 1
    if pointwise_1x1:
        w2t = w.reshape(cout, cin).t()
        addmm = torch.addmm

        def matmul_1x1():
            rows = x_cl.permute(0, 2, 3, 1).reshape(-1, cin)
            return addmm(b, rows, w2t).view(batch, spatial, spatial, cout).permute(0, 3, 1, 2)
    if act == "add":
        add = torch.add
        binary, binary_ = mkldnn._convolution_pointwise.binary, mkldnn._convolution_pointwise_.binary
        fns["now"] = lambda: add(conv2d(x, w, b, strides, padding, dilation, groups), other)
        fns["pw+act"] = lambda: add(pointwise(x_cl, packed, b, padding, strides, dilation,
                                              groups, "none", [], ""), other_cl)
        fns["fused"] = lambda: binary(x_cl, other_cl, packed, b, padding, strides, dilation,
                                      groups, "add", 1.0, None, [], None)

        def accumulate():
            acc.copy_(other_cl)  # the form overwrites its accumulator; a copy per call
            return binary_(acc, x_cl, packed, b, padding, strides, dilation, groups, "add",
                           1.0, None, [], None)

        fns["fused_ +copy"] = accumulate
        if pointwise_1x1:
            fns["mm+act"] = lambda: add(matmul_1x1(), other_cl)
        reference = F.conv2d(x, w, b, strides, padding, dilation, groups) + other
    else:
        inplace = _in_place(act)
        attr, scalars, algorithm = _ONEDNN_UNARY[act]
        fns["now"] = lambda: inplace(conv2d(x, w, b, strides, padding, dilation, groups))
        fns["pw+act"] = lambda: inplace(pointwise(x_cl, packed, b, padding, strides, dilation,
                                                  groups, "none", [], ""))
        fns["fused"] = lambda: pointwise(x_cl, packed, b, padding, strides, dilation, groups,
                                         attr, scalars, algorithm)
        if pointwise_1x1:
            fns["mm+act"] = lambda: inplace(matmul_1x1())
        reference = inplace(F.conv2d(x, w, b, strides, padding, dilation, groups))
    if check:
        for name, fn in fns.items():
            torch.testing.assert_close(fn(), reference, rtol=1e-4, atol=1e-4,
                                       msg=lambda m, name=name: f"{name}: {m}")
    flops = 2.0 * batch * cout * out_hw * out_hw * (cin // groups) * kernel * kernel
    return _time(fns, calls or _calls_for(flops), repeats)


def _row(label: str, act: str, times: dict[str, float]) -> dict:
    now = times["now"]
    best = min((v, k) for k, v in times.items() if k != "now")
    line = "  ".join(f"{k} {v:8.2f}" for k, v in times.items())
    print(f"{label:<34} {act:<9} {line}   best/now {best[0] / now:5.2f} ({best[1]})",
          flush=True)
    return {"case": label, "act": act, **times}


class FeedForward(torch.nn.Module):
    """A BERT-base feed-forward block: 768 → 3072, GELU, → 768."""

    def __init__(self, width: int = 768, hidden: int = 3072):
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def model_cases(repeats: int) -> list[dict]:
    """Whole models under ``StaticModule``: the pass on (the default) against off, in
    alternation; µs per call."""
    import static_runtime as sr
    from benchmarks.zoo.convolutional import MODELS as CONV_MODELS

    cases = []
    for zm in CONV_MODELS:
        for batch in zm.batches:
            cases.append((f"{zm.name} b{batch}", zm.scripted, zm.inputs(batch),
                          "fuse_convolution"))
    g = torch.Generator().manual_seed(0)
    feed_forward = torch.jit.script(FeedForward().eval())
    for tokens in (1, 8, 32):
        cases.append((f"bert-base feed-forward, {tokens} tokens", lambda: feed_forward,
                      (torch.randn(1, tokens, 768, generator=g),), "fuse_linear_pointwise"))
    out = []
    for label, make, inputs, option in cases:
        on = sr.StaticModule(make())
        off = sr.StaticModule(make(), options=sr.StaticModuleOptions(**{option: False}))
        torch.testing.assert_close(on(*inputs), off(*inputs), rtol=1e-4, atol=1e-4)
        times = _time({"on": lambda on=on, inputs=inputs: on(*inputs),
                       "off": lambda off=off, inputs=inputs: off(*inputs)},
                      calls=20, repeats=repeats)
        print(f"{label:<40} {option:<22} on {times['on']:9.1f}  off {times['off']:9.1f}"
              f"   on/off {times['on'] / times['off']:5.2f}", flush=True)
        out.append({"kind": "model", "case": label, "option": option, **times})
    return out


@click.command()
@click.option("--only", type=click.Choice(["all", "linear", "conv", "none"]), default="all")
@click.option("--acts", default="", help="comma-separated subset of the activations")
@click.option("--calls", type=int, default=None, help="calls per sample (default: by size)")
@click.option("--repeats", type=int, default=9)
@click.option("--threads", type=int, default=1)
@click.option("--sweep", is_flag=True, help="linear only: the rows x (k, n) grid, relu/gelu")
@click.option("--models", is_flag=True, help="whole models, each pass on against off")
@click.option("--clock", type=click.Choice(["wall", "thread"]), default="wall")
@click.option("--json", "json_path", default=None)
def main(only: str, acts: str, calls: int | None, repeats: int, threads: int, sweep: bool,
         models: bool, clock: str, json_path: str | None) -> None:
    torch.set_num_threads(threads)
    _CLOCK[0] = time.thread_time_ns if clock == "thread" else time.perf_counter_ns
    wanted = set(acts.split(",")) if acts else None
    rows: list[dict] = []
    with torch.inference_mode():
        if models:
            rows += model_cases(repeats)
            only = "none"
        if sweep:
            print("linear sweep: rows x k -> n (MACs), µs per call")
            for k, n in SWEEP_WIDTHS:
                for m in SWEEP_ROWS:
                    for act in sorted(wanted or {"relu", "gelu"}):
                        times = linear_case(m, k, n, act, calls, repeats)
                        rows.append({"kind": "sweep", **_row(
                            f"[{m}x{k}->{n}] {m * k * n / 1e6:.1f}M", act, times)})
            only = "none"
        if only in ("all", "linear"):
            print("linear: label (rows x k -> n), µs per call")
            for label, m, k, n in LINEAR_SHAPES:
                for act in LINEAR_ACTS:
                    if wanted and act not in wanted:
                        continue
                    times = linear_case(m, k, n, act, calls, repeats)
                    rows.append({"kind": "linear", **_row(f"{label} [{m}x{k}->{n}]", act,
                                                         times)})
        if only in ("all", "conv"):
            print("conv2d: label [batch, cin->cout, kernel/stride/groups, spatial], µs per call")
            for label, bsz, cin, cout, kern, st, grp, hw in CONV_SHAPES:
                for act in CONV_ACTS:
                    if wanted and act not in wanted:
                        continue
                    times = conv_case(bsz, cin, cout, kern, st, grp, hw, act, calls, repeats)
                    tag = f"{label} [b{bsz} {cin}->{cout} k{kern}s{st}g{grp} {hw}px]"
                    rows.append({"kind": "conv", **_row(tag, act, times)})
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
