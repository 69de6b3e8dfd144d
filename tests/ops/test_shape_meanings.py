"""The cheaper functions shape programs and meta runs call for some operators
(``registry.SHAPE_MEANINGS``) give exactly the dtype, shape and strides the operator gives."""

from __future__ import annotations

import pytest
import torch

import static_runtime.ops.activations  # (registers the activations' meanings)
import static_runtime.ops.conv_residual  # (registers conv2d_residual's meaning)
import static_runtime.ops.gated  # (registers gated_linear's meaning)
import static_runtime.ops.norms  # (registers layer_norm's and rms_norm's meanings)
import static_runtime.ops.residual  # (registers linear_residual's meaning)
import static_runtime.ops.rotary  # noqa: F401  (registers rotary's meaning)
from static_runtime.ops.native.fused import CONV_POSTOPS, LINEAR_POSTOPS
from static_runtime.ops.registry import SHAPE_MEANINGS


def _meta(x):
    return x if not isinstance(x, torch.Tensor) else torch.empty_strided(
        x.shape, x.stride(), dtype=x.dtype, device="meta")


def _same_metadata(name, args, exact=True):
    """The meaning on meta copies of ``args`` gives the operator's dtype, shape and strides
    (``exact=False``: the strides of dimensions of 1 aside — the same addresses; PyTorch's meta
    and CPU iterators break that tie apart)."""
    namespace, _, qualified = name.partition("::")
    base, _, overload = qualified.partition(".")
    real = getattr(getattr(torch.ops, namespace), base)
    if overload:
        real = getattr(real, overload)
    want = real(*args)
    got = SHAPE_MEANINGS[name](*[_meta(a) for a in args])
    assert (got.dtype, tuple(got.shape)) == (want.dtype, tuple(want.shape))
    if exact:
        assert got.stride() == want.stride()
    else:
        assert all(g == w or n == 1 for g, w, n in zip(got.stride(), want.stride(), got.shape))
    for a, m in zip(args, [_meta(a) for a in args]):  # (inputs untouched: meta copies)
        if isinstance(a, torch.Tensor):
            assert m.shape == a.shape


@pytest.mark.parametrize("attr", sorted(CONV_POSTOPS))
@pytest.mark.parametrize("shape,groups,channels_last",
                         [((1, 8, 9, 7), 1, False), ((2, 8, 6, 6), 8, True),
                          ((3, 8, 1, 1), 1, True)])
def test_conv2d_pointwise(attr, shape, groups, channels_last):
    x = torch.randn(shape)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(16 if groups == 1 else 8, 8 // groups, 3, 3)
    b = torch.randn(w.shape[0])
    _same_metadata("static_runtime::conv2d_pointwise",
                   [x, w, b, [1, 1], [1, 1], [1, 1], groups, attr])


@pytest.mark.parametrize("attr", sorted(CONV_POSTOPS))
@pytest.mark.parametrize("channels_last,residual", [
    (True, lambda: torch.randn(2, 16, 6, 5).contiguous(memory_format=torch.channels_last)),
    (False, lambda: torch.randn(2, 16, 6, 5)),  # channels-first: add's layout
    (True, lambda: torch.randn(16, 1, 1)),  # broadcast into the convolution
    (True, lambda: torch.randn(2, 16, 6, 5, dtype=torch.float64)),
])
def test_conv2d_residual(attr, channels_last, residual):
    x = torch.randn(2, 8, 6, 5)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    _same_metadata("static_runtime::conv2d_residual",
                   [x, torch.randn(16, 8, 3, 3), torch.randn(16), [1, 1], [1, 1], [1, 1], 1,
                    residual(), attr])


@pytest.mark.parametrize("attr", sorted(LINEAR_POSTOPS))
@pytest.mark.parametrize("make", [lambda: torch.randn(5), lambda: torch.randn(4, 5),
                                  lambda: torch.randn(2, 3, 5),
                                  lambda: torch.randn(3, 5, 2).transpose(1, 2)])
def test_linear_pointwise(attr, make):
    _same_metadata("static_runtime::linear_pointwise",
                   [make(), torch.randn(7, 5), torch.randn(7), attr])


@pytest.mark.parametrize("attr", sorted(LINEAR_POSTOPS))
@pytest.mark.parametrize("make,residual", [
    (lambda: torch.randn(4, 5), lambda: torch.randn(4, 7)),
    (lambda: torch.randn(2, 3, 5), lambda: torch.randn(2, 3, 7)),
    (lambda: torch.randn(2, 3, 5), lambda: torch.randn(7)),  # broadcast into the product
    (lambda: torch.randn(3, 5), lambda: torch.randn(2, 1, 7)),  # widening it
    (lambda: torch.randn(2, 3, 5), lambda: torch.randn(3, 2, 7).transpose(0, 1)),
    (lambda: torch.randn(3, 5, 2).transpose(1, 2), lambda: torch.randn(3, 2, 7)),
    (lambda: torch.randn(4, 5), lambda: torch.randn(4, 7, dtype=torch.float64)),
    (lambda: torch.randn(1, 1, 5), lambda: torch.randn(1, 1, 7)),
])
def test_linear_residual(attr, make, residual):
    _same_metadata("static_runtime::linear_residual",
                   [make(), torch.randn(7, 5), torch.randn(7), residual(), attr])


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("make", [lambda: torch.randn(4, 5), lambda: torch.randn(2, 3, 5),
                                  lambda: torch.randn(3, 5, 2).transpose(1, 2),
                                  lambda: torch.randn(1, 1, 5), lambda: torch.randn(5),
                                  lambda: torch.randn(2, 5, dtype=torch.float64)])
def test_gated_linear(make, bias):
    x = make()
    w = [torch.randn(7, 5, dtype=x.dtype) for _ in range(2)]
    b = [torch.randn(7, dtype=x.dtype) if bias else None for _ in range(2)]
    _same_metadata("static_runtime::gated_linear", [x, w[0], b[0], w[1], b[1]])


def _heads(b, h, length, d, order):
    """A (b, h, length, d) query laid out in ``order`` (outermost first), as projections
    reshaped and transposed make them."""
    sizes = (b, h, length, d)
    return torch.randn([sizes[i] for i in order]).permute(
        [order.index(i) for i in range(4)])


@pytest.mark.parametrize("layout", [(0, 1, 2, 3), (0, 2, 1, 3), (2, 0, 1, 3)])
@pytest.mark.parametrize("length", [1, 5])
@pytest.mark.parametrize("tables", ["2d", "4d"])
def test_rotary(layout, length, tables):
    x = _heads(2, 3, length, 8, layout)
    shape = (length, 8) if tables == "2d" else (1, 1, length, 8)
    cos, sin = torch.randn(shape), torch.randn(shape)
    _same_metadata("static_runtime::rotary", [x, cos, sin, 4, 3, -1], exact=False)


def test_rotary_of_a_strided_query_is_the_references():
    x = torch.randn(2, 3, 5, 16)[..., :8]  # (a gap after every row: not dense)
    cos, sin = torch.randn(5, 8), torch.randn(5, 8)
    _same_metadata("static_runtime::rotary", [x, cos, sin, 4, 3, -1], exact=False)


@pytest.mark.parametrize("make,weight", [
    (lambda: torch.randn(4, 6), lambda: torch.randn(6)),
    (lambda: torch.randn(2, 3, 6), lambda: torch.randn(6)),
    (lambda: torch.randn(1, 1, 6), lambda: torch.randn(6)),
    (lambda: torch.randn(2, 6, 3).transpose(1, 2), lambda: torch.randn(6)),  # the reference's
    (lambda: torch.randn(2, 3, 6), lambda: torch.randn(6, dtype=torch.float64)),
    (lambda: torch.randn(3, 6, dtype=torch.float64), lambda: torch.randn(6, dtype=torch.float64)),
])
def test_rms_norm(make, weight):
    _same_metadata("static_runtime::rms_norm", [make(), weight(), 1e-6])
    _same_metadata("static_runtime::rms_norm", [make(), weight(), 1e-6, torch.float32],
                   exact=False)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("make", [lambda: torch.randn(5), lambda: torch.randn(4, 5),
                                  lambda: torch.randn(5, 4).t(), lambda: torch.randn(2, 3, 5),
                                  lambda: torch.randn(3, 5, 2).transpose(1, 2),
                                  lambda: torch.randn(2, 3, 4, 5)[:, 1:],
                                  lambda: torch.randn(0, 5),
                                  lambda: torch.randn(2, 5, dtype=torch.float64)])
def test_linear(make, bias):
    x = make()
    w = torch.randn(7, 5, dtype=x.dtype)
    _same_metadata("aten::linear", [x, w, torch.randn(7, dtype=x.dtype) if bias else None])


@pytest.mark.parametrize("make", [lambda: torch.randn(4, 6), lambda: torch.randn(2, 3, 6),
                                  lambda: torch.randn(2, 6, 3).transpose(1, 2),
                                  lambda: torch.randn(2, 6, 3, 3).contiguous(
                                      memory_format=torch.channels_last).permute(0, 2, 3, 1),
                                  lambda: torch.randn(4, 6, dtype=torch.float64)])
def test_layer_norm(make):
    x = make()
    _same_metadata("aten::layer_norm", [x, [6], torch.randn(6, dtype=x.dtype),
                                        torch.randn(6, dtype=x.dtype), 1e-5, True])


def test_an_unknown_activation_is_refused_as_the_operator_refuses_it():
    x, w = torch.empty(1, 2, 3, 3, device="meta"), torch.empty(2, 2, 1, 1, device="meta")
    with pytest.raises(ValueError, match="attr"):
        SHAPE_MEANINGS["static_runtime::conv2d_pointwise"](x, w, None, [1, 1], [0, 0], [1, 1],
                                                            1, "swishy")
    with pytest.raises(ValueError, match="attr"):
        SHAPE_MEANINGS["static_runtime::linear_pointwise"](x[0, 0], w[0, 0], None, "swishy")


_ACTIVATIONS = {"hardsigmoid": (), "hardswish": (), "hardtanh": (0.0, 6.0), "gelu": (),
                "mish": (), "elu": (), "leaky_relu": (0.1,), "softplus": (), "relu": ()}


@pytest.mark.parametrize("name", sorted(_ACTIVATIONS))
@pytest.mark.parametrize("make", [lambda: torch.randn(3, 4), lambda: torch.randn(4, 3).t(),
                                  lambda: torch.randn(2, 8, 5, 5).contiguous(
                                      memory_format=torch.channels_last),
                                  lambda: torch.randn(4, 6)[:, ::2],
                                  lambda: torch.randn(5, 6, 7).permute(2, 0, 1)[1:],
                                  lambda: torch.randn(3, 4, dtype=torch.float64),
                                  lambda: torch.randn(3, 4, dtype=torch.bfloat16),
                                  lambda: torch.randint(-3, 3, (3, 4))])
def test_float_activations(name, make):
    x = make()
    args = [x, *_ACTIVATIONS[name]]
    if not x.is_floating_point():  # (the operator's own meta function: what it says)
        metas = [_meta(a) for a in args]
        try:
            want = getattr(torch.ops.aten, name)(*metas)
        except (RuntimeError, ValueError):
            with pytest.raises((RuntimeError, ValueError)):
                SHAPE_MEANINGS[f"aten::{name}"](*metas)
            return
        got = SHAPE_MEANINGS[f"aten::{name}"](*metas)
        assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride())
        return
    _same_metadata(f"aten::{name}", args)


def test_comparisons_of_broadcast_row_major_tensors():
    """``le``/``lt``/``ge``/``gt``/``eq``/``ne`` of two row-major tensors that broadcast (a
    causal mask ``kv_idx <= q_idx``, padding masks; mixed dtypes): bool, the broadcast shape,
    laid out as the operator lays it out. (Of permuted operands the meaning may order the
    dimensions otherwise than the CPU kernel does — PyTorch's meta iterator does — which only
    a value the arena holds would notice, and its out variant writes the same values there.)"""
    import random

    import static_runtime.ops.native.conditions  # noqa: F401  (registers their meanings)

    rng = random.Random(0)
    for _ in range(1000):
        n = rng.randint(1, 4)
        shape = [rng.choice([1, 1, 2, 3, 5]) for _ in range(n)]
        a = torch.randint(0, 3, [s if rng.random() < 0.7 else 1 for s in shape])
        b = torch.randint(0, 3, [s if rng.random() < 0.7 else 1
                                 for s in shape[n - rng.randint(1, n):]])
        if rng.random() < 0.3:
            b = b.float()
        name = rng.choice(["le", "lt", "ge", "gt", "eq", "ne"])
        _same_metadata(f"aten::{name}.Tensor", [a, b], exact=False)
