"""GEMM-like nodes with a constant weight, their kernel chosen by measurement (``ops/kernels.py``).

Under ``StaticModuleOptions(kernel_choice="measure")``, the default, these take the place
of the ones selected otherwise for

* ``aten::linear(x, W, b)`` and ``static_runtime::linear_pointwise(x, W, b, attr)`` with a
  constant 2-D weight and a constant 1-D bias or none (the activation ``attr`` names is the
  epilogue),
* ``aten::addmm(b, x, B, beta=1, alpha=1)`` with a constant 2-D ``B`` and 1-D ``b``,
* ``aten::mm(x, B)`` and ``aten::matmul(x, B)`` with a constant 2-D ``B``,

all float32. Each computes ``act(x2 · Wᵀ + b)`` on ``x`` as a (rows, k) matrix (a contiguous
input of rank ≥ 3 folded, a vector as one row, as eager ``linear`` and ``matmul`` fold them).
For each row count and intra-op thread count, the first call asks the module's
``KernelChooser`` which of these is fastest — it times them on that call's own tensors unless
the choice is remembered — and keeps the answer for the next calls:

* ``aten``: ``addmm(b, x, Wᵀ, out=)`` (``mm`` without a bias), the activation in place: what
  runs without measuring (MKL on x86);
* ``onednn``: ``mkldnn._linear_pointwise`` on the weight reordered once into oneDNN's blocked
  layout, bias and activation fused; it allocates its result, so the copy into the planned
  tensor is part of what is timed;
* ``mkl``: ``mkl._mkl_linear`` on the weight packed by MKL for the largest row count of the
  row count's bucket (the packed GEMM runs at that row count, ATen's plain ``linear`` at the
  others; one pack a bucket, kept only where it won), the activation in place, copied
  likewise;
* ``native``: our own kernel (``ops/ckernels/gemm.c``) on the weight packed once into its
  panels, bias and ReLU / ReLU6 in its epilogue (other activations in place after it), written
  straight into the planned tensor — where a C compiler could build it.

Each candidate is timed as it will run: ours by its unchecked call, and allocating when the
call that asks allocates. One choice serves a row count in both forms (a node's first call,
which records, allocates; the next write into the arena): two choices could differ, and the
same call would then give other bits on its first run than on the next. Each input shape
keeps its call: later calls check the input's shape, dtype, device and contiguity (and the
out tensor, unless it is the last call's) and make that one call — ours without its own
wrapper's checks, ~0.3 µs in all.

Anything else — another dtype or device, a non-contiguous input, arguments that are not the
constants (a planning run on meta copies) — runs the implementation selected otherwise.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops import ckernels
from static_runtime.ops.ckernels import remember
from static_runtime.ops.kernels import FOR_GOOD, PER_SHAPE_SETUP, KernelChooser, size_bucket
from static_runtime.ops.native.fused import LINEAR_POINTWISE, LINEAR_POSTOPS
from static_runtime.ops.registry import labelled, register_measured
from static_runtime.ops.selection import _LINEAR, constant_value
from static_runtime.ops.written import find_written, keep_written

_ADDMM = ("aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, "
          "Scalar alpha=1) -> Tensor")
_MM = "aten::mm(Tensor self, Tensor mat2) -> Tensor"
_MATMUL = "aten::matmul(Tensor self, Tensor other) -> Tensor"

Pair = tuple[Callable[..., Any], Callable[..., Any]]


def _is_matrix(t: Any) -> bool:
    return (isinstance(t, torch.Tensor) and t.dim() == 2 and t.dtype is torch.float32
            and t.layout == torch.strided and t.device.type == "cpu" and t.numel() > 0
            and not t.is_meta)


def _is_bias(b: Any, n: int) -> bool:
    return b is None or (isinstance(b, torch.Tensor) and b.dim() == 1 and b.shape[0] == n
                         and b.dtype is torch.float32 and b.layout == torch.strided
                         and b.device.type == "cpu")


@register_measured("aten::linear", "static_runtime::linear_pointwise")
def _linear(node: Node, chooser: KernelChooser, default: Pair) -> Pair | None:
    if node.schema not in (_LINEAR, LINEAR_POINTWISE) or len(node.inputs) < 3:
        return None
    weight, bias = constant_value(node.inputs[1]), constant_value(node.inputs[2])
    attr = "none"
    if node.schema == LINEAR_POINTWISE:
        attr = constant_value(node.inputs[3])
        if attr not in LINEAR_POSTOPS:
            return None
    if not _is_matrix(weight) or not _is_bias(bias, weight.shape[0]):
        return None
    op = "linear" if attr == "none" else f"linear+{attr}"
    return _measured_pair(node.kind, op, chooser, default, x_index=0, ranks=(1, 2, 3, None),
                          constants=((1, weight), (2, bias)),
                          weight_t=weight.t(), bias=bias, attr=attr)


@register_measured("aten::addmm")
def _addmm(node: Node, chooser: KernelChooser, default: Pair) -> Pair | None:
    if node.schema != _ADDMM:
        return None
    bias, mat2 = constant_value(node.inputs[0]), constant_value(node.inputs[2])
    beta, alpha = constant_value(node.inputs[3]), constant_value(node.inputs[4])
    if not (_is_matrix(mat2) and bias is not None and _is_bias(bias, mat2.shape[1])
            and type(beta) in (int, float) and beta == 1
            and type(alpha) in (int, float) and alpha == 1):
        return None
    return _measured_pair(node.kind, "addmm", chooser, default, x_index=1, ranks=(2,),
                          constants=((0, bias), (2, mat2)),
                          weight_t=mat2, bias=bias, attr="none")


@register_measured("aten::mm", "aten::matmul")
def _mm(node: Node, chooser: KernelChooser, default: Pair) -> Pair | None:
    if node.schema not in (_MM, _MATMUL):
        return None
    mat2 = constant_value(node.inputs[1])
    if not _is_matrix(mat2):
        return None
    is_mm = node.schema == _MM
    return _measured_pair(node.kind, "mm" if is_mm else "matmul", chooser, default,
                          x_index=0, ranks=(2,) if is_mm else (1, 2, 3, None),
                          constants=((1, mat2),), weight_t=mat2, bias=None,
                          attr="none")


def candidate_names() -> tuple[str, ...]:
    """The GEMM kernels this build of PyTorch has: ATen's default always."""
    names = ["aten"]
    if torch.backends.mkldnn.is_available():
        names.append("onednn")
    if torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear"):
        names.append("mkl")
    if ckernels.available():
        names.append("native")
    return tuple(names)


class GemmKernels:
    """The candidate kernels of one product ``act(x2 · weight_t + bias)``, each a function
    ``(x2, o2) -> result`` (``o2``: the (rows, n) tensor to write, or None to allocate)."""

    def __init__(self, weight_t: torch.Tensor, bias: torch.Tensor | None, attr: str):
        self.weight_t, self.bias, self.attr = weight_t, bias, attr
        self.k, self.n = weight_t.shape
        _, self.act_, self.unary, self.scalars, self.algorithm = LINEAR_POSTOPS[attr]
        self._weight: torch.Tensor | None = None  # (n, k) contiguous, for the packings
        self._onednn_weight: torch.Tensor | None = None
        self.mkl_packs: dict[int, torch.Tensor] = {}
        self._native: ckernels.Gemm | None = None

    @property
    def weight(self) -> torch.Tensor:
        if self._weight is None:
            self._weight = self.weight_t.t().contiguous()
        return self._weight

    def kernel(self, name: str, rows: int) -> Callable[[torch.Tensor, Any], torch.Tensor]:
        makers = {"aten": self._aten, "onednn": self._onednn, "mkl": self._mkl,
                  "native": self._native_kernel}
        if name not in makers:
            raise ValueError(f"no GEMM kernel named {name!r}; there are {sorted(makers)}")
        return makers[name](rows)

    def direct(self, name: str, rows: int) -> Callable[[torch.Tensor, torch.Tensor], None] | None:
        """Kernel ``name``'s call for ``rows`` rows that checks nothing, ``(x, o) -> None``
        (``x`` and ``o`` contiguous float32 CPU tensors of ``rows`` rows of K and of N, any
        rank), or None where the kernel has none (all but ours with its activation inside)."""
        if name != "native" or self.attr not in ckernels.ACTIVATIONS:
            return None
        if self._native is None:
            self._native = ckernels.Gemm(self.weight_t, self.bias, self.attr)
        return self._native.direct(rows)

    def _aten(self, rows: int):
        weight_t, bias, act_ = self.weight_t, self.bias, self.act_
        addmm, mm = torch.addmm, torch.mm
        if act_ is None:  # one frame less: ~0.1 µs of a 1 µs product
            if bias is None:
                def aten(x2, o2):
                    return mm(x2, weight_t) if o2 is None else mm(x2, weight_t, out=o2)
            else:
                def aten(x2, o2):
                    return addmm(bias, x2, weight_t) if o2 is None \
                        else addmm(bias, x2, weight_t, out=o2)
            return aten

        def aten(x2, o2):
            if o2 is None:
                y = mm(x2, weight_t) if bias is None else addmm(bias, x2, weight_t)
            else:
                y = mm(x2, weight_t, out=o2) if bias is None \
                    else addmm(bias, x2, weight_t, out=o2)
            return y if act_ is None else act_(y)

        return aten

    def _onednn(self, rows: int):
        if self._onednn_weight is None:
            self._onednn_weight = torch.ops.mkldnn._reorder_linear_weight(self.weight)
        packed, bias = self._onednn_weight, self.bias
        unary, scalars, algorithm = self.unary, self.scalars, self.algorithm
        pointwise = torch.ops.mkldnn._linear_pointwise.default

        def onednn(x2, o2):
            y = pointwise(x2, packed, bias, unary, scalars, algorithm)
            return y if o2 is None else o2.copy_(y)

        return onednn

    def _mkl(self, rows: int):
        # One pack per row-count bucket, made for its largest row count: MKL's packed GEMM
        # runs at that row count only (ATen's ``_mkl_linear`` takes its plain ``linear`` at
        # any other), and a pack per row count would keep a copy of the weight for every
        # size traffic brings. Timed as it will run, so it is chosen where that pays.
        packed_rows = size_bucket(rows)
        packed = self.mkl_packs.get(packed_rows)
        if packed is None:
            packed = self.mkl_packs[packed_rows] = torch.ops.mkl._mkl_reorder_linear_weight(
                self.weight, packed_rows)
        weight, bias, act_ = self.weight, self.bias, self.act_
        linear = torch.ops.mkl._mkl_linear.default

        def mkl(x2, o2):
            y = linear(x2, packed, weight, bias, packed_rows)
            if act_ is not None:
                act_(y)
            return y if o2 is None else o2.copy_(y)

        return mkl


    def drop_native(self) -> None:
        self._native = None

    def _native_kernel(self, rows: int):
        inside = self.attr if self.attr in ckernels.ACTIVATIONS else "none"
        if self._native is None:
            self._native = ckernels.Gemm(self.weight_t, self.bias, inside)
        gemm = self._native.kernel()
        if inside == self.attr:
            return gemm
        act_ = self.act_

        def native(x2, o2):
            return act_(gemm(x2, o2))

        return native


def _measured_pair(kind: str, op: str, chooser: KernelChooser, default: Pair, *,
                   x_index: int, ranks: tuple, constants: tuple[tuple[int, Any], ...],
                   weight_t: torch.Tensor, bias: torch.Tensor | None, attr: str) -> Pair:
    """``(fn, out_fn)`` running the chosen kernel where the arguments at the indices of
    ``constants`` are those constants and the input folds to a contiguous (rows, k) float32
    matrix; ``default`` otherwise. ``ranks``: the input ranks folded (None: any rank ≥ 3)."""
    default_fn, default_out = default
    kernels = GemmKernels(weight_t, bias, attr)
    k, n = kernels.k, kernels.n
    names = candidate_names()
    any_rank = None in ranks
    #: (row-count bucket, threads) → the chosen kernel's name, and the choice: row counts
    #: up to the same power of two share one choice (``size_bucket``), measured on the first
    #: of them to come and remembered on disk by the bucket, so which kernel serves a row
    #: count depends neither on the order sizes came in nor on the process
    chosen: dict[tuple[int, int], str] = {}
    choices: dict[tuple[int, int], Any] = {}
    #: (bucket, threads) → ``Choice.interim()``: where the chosen kernel costs setup at each
    #: new row count (oneDNN's primitive, ~0.3 ms), the kernel serving a new row count's
    #: first calls and how many (traffic of every size: a new length's first call paid it)
    interims: dict[tuple[int, int], tuple[str, int] | None] = {}
    #: (bucket, threads) → the row count the choice was measured on (benchmarks and tools)
    measured_at: dict[tuple[int, int], int] = {}
    threads = torch.get_num_threads
    f32 = torch.float32
    wstride = tuple(weight_t.stride())
    (i1, c1), (i2, c2) = (constants * 2)[:2]
    #: The last call's shapes, so that the next call of the same shapes (the arena hands the
    #: same out tensor on every call of a layout) checks a few facts and makes one call
    #: instead of folding and looking up again: out form (out, x's shape, threads,
    #: ``call(x, out)``); allocating form (x's shape, threads, ``call(x) -> result``). Read as
    #: one tuple: concurrent runtimes at worst replace each other's entry.
    last_out: list[tuple | None] = [None]
    last_fn: list[tuple | None] = [None]
    #: the out form's facts of the arena tensors written before, by ``id`` (``ops/written``)
    written: dict[int, tuple] = {}
    #: (x's shape, threads) → that call, for shapes that come back after others (traffic of
    #: every size: a batcher's sizes recur, rarely twice in a row)
    out_calls: dict[tuple, Callable[..., None]] = {}
    fn_calls: dict[tuple, Callable[..., torch.Tensor]] = {}

    def decide(x: torch.Tensor, out: torch.Tensor | None, rows: int, key: tuple[int, int]):
        # An allocating call is timed allocating: ATen allocates in C++, ours from Python
        # (~0.6 µs, a third of a 1 × 64 · 64 × 64 product's call)
        problem = (f"{op} float32 M<={key[0]} K={k} N={n} w={wstride} "
                   f"bias={bias is not None}{' allocating' if out is None else ''}")
        flat = x.dim() == 2

        def make():
            # Each as it will run on these very tensors: ours by its unchecked call, the
            # others through the (rows, K) and (rows, N) views a call of a rank-3 input makes
            # (timed on ready-made views, ATen's product won ties it then lost in the model:
            # BENCHMARKS.md, session 23).
            if out is None:
                shape = (*x.shape[:-1], n)
                return {name: functools.partial(_allocating(kernels, name, rows, shape, flat),
                                                x) for name in names}
            return {name: _writing_into(_writing(kernels, name, rows, flat), x, out)
                    for name in names}

        choice = chooser.choose(problem, names, make, default="aten")
        later = interims[key] = choice.interim(PER_SHAPE_SETUP)
        serve = {choice.name, later[0]} if later else {choice.name}
        if "mkl" not in serve:
            kernels.mkl_packs.pop(key[0], None)
        chosen[key] = choice.name
        choices[key] = choice
        measured_at[key] = rows
        if "native" not in serve and not any(
                c.name == "native" or (interims.get(b) or ("",))[0] == "native"
                for b, c in choices.items()):
            kernels.drop_native()  # its packed copy of the weight serves no row count
        return choice.name

    def rows_of(x: torch.Tensor, shape: torch.Size) -> int:
        """How many rows ``x`` (of ``shape``) has as a contiguous (rows, k) matrix, or -1 if
        it is none."""
        if x.dtype is not f32 or not shape or shape[-1] != k or not x.is_cpu \
                or not x.is_contiguous():
            return -1
        rank = len(shape)
        if rank == 2:
            return shape[0]
        if rank == 1 and 1 in ranks:
            return 1
        if rank >= 3 and (any_rank or rank in ranks):
            return x.numel() // k
        return -1

    def serving(x, rows: int, out) -> tuple[str, tuple[int, str] | None]:
        """The kernel to serve ``rows`` rows now (its bucket's choice, or the bucket's
        interim one at a row count other than the first), and where the choice takes over
        later: (after how many calls, its name)."""
        key = (size_bucket(rows), threads())
        name = chosen.get(key)
        if name is None:
            return decide(x, out, rows, key), None  # (setup paid by the measuring)
        later = interims.get(key)
        if later is None or measured_at[key] == rows:
            return name, None
        if later[1] == FOR_GOOD:
            return later[0], None
        return later[0], (later[1], name)

    def until(call, later: tuple[int, str], calls: dict, key: tuple, chosen_call):
        """``call`` for ``later[0]`` calls, then ``chosen_call()``'s call in its place."""
        left = [later[0]]

        def counted(*args):
            left[0] -= 1
            if left[0] >= 0:
                return call(*args)
            replacement = calls[key] = chosen_call()
            last_out[0] = last_fn[0] = None  # (they may hold this one)
            written.clear()
            return replacement(*args)

        return counted

    def fn_slow(x, args):
        t = threads()
        shape = x.shape
        key = (shape, t)
        call = fn_calls.get(key)
        if call is None:
            rows = rows_of(x, shape)
            if rows < 0:
                return default_fn(*args)
            call = remember(fn_calls, key, allocating_call(x, rows, key))
        elif x.dtype is not f32 or not x.is_cpu or not x.is_contiguous():
            return default_fn(*args)
        last_fn[0] = (shape, t, call)
        return call(x)

    def allocating_call(x, rows: int, key):
        """``call(x) -> result`` for inputs of ``x``'s shape (``rows`` rows folded; ``key``:
        its entry in ``fn_calls``)."""
        name, later = serving(x, rows, None)
        shape, flat = (*x.shape[:-1], n), x.dim() == 2
        call = _allocating(kernels, name, rows, shape, flat)
        if later is None:
            return call
        return until(call, later, fn_calls, key,
                     lambda: _allocating(kernels, later[1], rows, shape, flat))

    @labelled(f"{kind} ({op}): kernel chosen per row count by measurement")
    def fn(*args):
        if args[i1] is c1 and args[i2] is c2:
            x = args[x_index]
            c = last_fn[0]
            if c is not None and x.shape == c[0] and x.dtype is f32 and x.is_cpu \
                    and x.is_contiguous() and c[1] == threads():
                return c[2](x)
            return fn_slow(x, args)
        return default_fn(*args)

    def out_slow(out, x, args):
        t = threads()
        shape = x.shape
        key = (shape, t)
        call = out_calls.get(key)
        if call is None:
            rows = rows_of(x, shape)
            ok = rows >= 0
        else:
            ok = x.dtype is f32 and x.is_cpu and x.is_contiguous()
        if not ok or out.dtype is not f32 or not out.is_contiguous() \
                or out.shape != (*shape[:-1], n):
            return default_out(out, *args)
        if call is None:
            call = remember(out_calls, key, writing_call(x, rows, out, key))
        last_out[0] = (out, shape, t, call)
        keep_written(written, out, shape, t, call)
        call(x, out)
        return out

    def writing_call(x, rows: int, out, key):
        """``call(x, out)`` for inputs of ``x``'s shape (``rows`` rows folded; ``out``: a
        tensor it is to write, where the candidates are timed; ``key``: its entry in
        ``out_calls``)."""
        name, later = serving(x, rows, out)
        flat = out.dim() == 2
        call = _writing(kernels, name, rows, flat)
        if later is None:
            return call
        return until(call, later, out_calls, key,
                     lambda: _writing(kernels, later[1], rows, flat))

    @labelled(f"{kind} ({op}): kernel chosen per row count by measurement, out=")
    def out_fn(out, *args):
        if args[i1] is c1 and args[i2] is c2:
            x = args[x_index]
            c = last_out[0]
            if c is None or c[0] is not out:
                c = find_written(written, out)  # (a tensor written before: another layout's)
                if c is None:
                    return out_slow(out, x, args)
            if x.shape == c[1] and x.dtype is f32 and x.is_cpu and x.is_contiguous() \
                    and c[2] == threads():
                c[3](x, out)
                return out
            return out_slow(out, x, args)
        return default_out(out, *args)

    def status() -> str:
        if not choices:
            return "no kernel chosen yet"
        return "; ".join(f"M<={b} threads={t} (measured at M={measured_at[b, t]}): "
                         f"{c.describe(PER_SHAPE_SETUP)}" for (b, t), c in sorted(choices.items()))

    for f in (fn, out_fn):
        f.status = status  # type: ignore[attr-defined]
        #: (row-count bucket, threads) → ``Choice``; what is chosen, for benchmarks and tools
        f.choices = choices  # type: ignore[attr-defined]
        f.measured_at = measured_at  # type: ignore[attr-defined]
        #: the product: (op, k, n, has bias, epilogue)
        f.problem = (op, k, n, bias is not None, attr)  # type: ignore[attr-defined]
    return fn, out_fn


def _allocating(kernels: GemmKernels, name: str, rows: int, shape: tuple, flat: bool
                ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Kernel ``name``'s ``call(x) -> result`` for inputs of ``rows`` rows folded (``flat``:
    ``x`` is the (rows, k) matrix itself), the result of ``shape``."""
    direct = kernels.direct(name, rows)
    if direct is not None:
        empty = torch.empty

        def call(x):
            y = empty(*shape)
            direct(x, y)
            return y
        return call
    kernel = kernels.kernel(name, rows)  # (MKL's: packed for this row count's bucket)
    if flat:
        return lambda x: kernel(x, None)
    k = kernels.k
    return lambda x: kernel(x.view(rows, k), None).view(shape)


def _writing(kernels: GemmKernels, name: str, rows: int, flat: bool
             ) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    """Kernel ``name``'s ``call(x, out)`` for inputs of ``rows`` rows folded (``flat``: both
    are matrices already)."""
    direct = kernels.direct(name, rows)
    if direct is not None:
        return direct
    kernel = kernels.kernel(name, rows)
    if flat:
        return kernel
    k, n = kernels.k, kernels.n

    def call(x, out):
        kernel(x.view(rows, k), out.view(rows, n))
    return call


def _writing_into(call: Callable[[torch.Tensor, torch.Tensor], Any], x: torch.Tensor,
                  out: torch.Tensor) -> Callable[[], torch.Tensor]:
    """``call(x, out)`` as a candidate of no arguments that returns what it wrote."""

    def run():
        call(x, out)
        return out

    return run
