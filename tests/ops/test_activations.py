"""Activation functions: pointwise nonlinearities with their options, softmax families over
several dims and dtypes, parametric and gated activations, and their in-place forms."""

import pytest
import torch
import torch.nn.functional as F
from differential import check
from op_cases import Inputs, case, layout, ts

I = Inputs(2)
randn, rand = I.randn, I.rand

X1, X2 = randn(3, 4) * 3, randn(2, 5, 3) * 3


def prelu_channels(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.prelu(x, w)


def glu_last(x: torch.Tensor) -> torch.Tensor:
    return F.glu(x, -1)


def glu_dim1(x: torch.Tensor) -> torch.Tensor:
    return F.glu(x, dim=1)


def rrelu_eval(x: torch.Tensor) -> torch.Tensor:
    return F.rrelu(x, 0.1, 0.3, training=False)


def softmin(x: torch.Tensor) -> torch.Tensor:
    return F.softmin(x, dim=-1)


def gelu_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.linear(F.gelu(F.linear(x, w1)), w2)


def swiglu(x: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.silu(x @ w) * (x @ v)


def inplace_activations(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    F.relu(y, inplace=True)
    z = x - 1
    F.hardtanh(z, -0.5, 0.5, inplace=True)
    w = x + 1
    torch.sigmoid_(w)
    return y + z + w


def softmax_then_matmul(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    scores = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)
    return scores @ k


POINTWISE = [
    ("relu", ts("x", "torch.relu(x)")),
    ("relu_functional", ts("x", "torch.nn.functional.relu(x)")),
    ("relu6", ts("x", "torch.nn.functional.relu6(x)")),
    ("gelu_none", ts("x", "torch.nn.functional.gelu(x)")),
    ("gelu_tanh", ts("x", "torch.nn.functional.gelu(x, approximate='tanh')")),
    ("silu", ts("x", "torch.nn.functional.silu(x)")),
    ("sigmoid", ts("x", "torch.sigmoid(x)")),
    ("tanh", ts("x", "torch.tanh(x)")),
    ("hardtanh_default", ts("x", "torch.nn.functional.hardtanh(x)")),
    ("hardtanh_bounds", ts("x", "torch.nn.functional.hardtanh(x, -2.0, 0.5)")),
    ("leaky_relu_default", ts("x", "torch.nn.functional.leaky_relu(x)")),
    ("leaky_relu_slope", ts("x", "torch.nn.functional.leaky_relu(x, 0.2)")),
    ("elu", ts("x", "torch.nn.functional.elu(x)")),
    ("elu_alpha", ts("x", "torch.nn.functional.elu(x, alpha=0.5)")),
    ("celu", ts("x", "torch.nn.functional.celu(x, alpha=2.0)")),
    ("selu", ts("x", "torch.nn.functional.selu(x)")),
    ("softplus", ts("x", "torch.nn.functional.softplus(x)")),
    ("softplus_beta_threshold",
     ts("x", "torch.nn.functional.softplus(x, beta=2.0, threshold=1.0)")),
    ("mish", ts("x", "torch.nn.functional.mish(x)")),
    ("hardswish", ts("x", "torch.nn.functional.hardswish(x)")),
    ("hardsigmoid", ts("x", "torch.nn.functional.hardsigmoid(x)")),
    ("hardshrink", ts("x", "torch.nn.functional.hardshrink(x, 1.0)")),
    ("softshrink", ts("x", "torch.nn.functional.softshrink(x, 0.5)")),
    ("tanhshrink", ts("x", "torch.nn.functional.tanhshrink(x)")),
    ("softsign", ts("x", "torch.nn.functional.softsign(x)")),
    ("logsigmoid", ts("x", "torch.nn.functional.logsigmoid(x)")),
    ("threshold", ts("x", "torch.nn.functional.threshold(x, 0.5, -1.0)")),
    ("threshold_op", ts("x", "torch.threshold(x, 0.0, 0.0)")),
    ("logit", ts("x", "torch.logit(torch.sigmoid(x), eps=1e-6)")),
]

SOFTMAX = [
    ("softmax_last", ts("x", "torch.softmax(x, -1)"), [randn(3, 4)], [randn(2, 5, 3)]),
    ("softmax_dim0", ts("x", "torch.softmax(x, 0)"), [randn(3, 4)], [randn(6)]),
    ("softmax_dim1_3d", ts("x", "torch.nn.functional.softmax(x, dim=1)"),
     [randn(2, 3, 4)], [randn(3, 5, 2)]),
    ("softmax_dtype", ts("x", "torch.softmax(x, -1, dtype=torch.float64)"),
     [randn(3, 4)], [randn(5)]),
    ("softmax_noncontiguous", ts("x", "torch.softmax(x.transpose(0, 1), -1)"),
     [randn(3, 4)], [randn(5, 2)]),
    ("softmax_method", ts("x, d: int", "x.softmax(d)"), [randn(3, 4), 0], [randn(2, 3, 2), 2]),
    ("log_softmax_last", ts("x", "torch.log_softmax(x, -1)"), [randn(3, 4)], [randn(2, 7)]),
    ("log_softmax_dim0", ts("x", "torch.nn.functional.log_softmax(x, dim=0)"),
     [randn(3, 4)], [randn(5, 2, 2)]),
    ("log_softmax_dtype", ts("x", "torch.log_softmax(x, 1, dtype=torch.float64)"),
     [randn(3, 4)], [randn(2, 6)]),
    ("softmax_double_input", ts("x", "torch.softmax(x, -1)"),
     [randn(3, 4, dtype=torch.float64)], [randn(5, dtype=torch.float64)]),
    ("softmin", softmin, [randn(3, 4)], [randn(2, 3, 5)]),
    ("softmax_then_matmul", softmax_then_matmul, [randn(2, 3, 4), randn(2, 5, 4)],
     [randn(1, 6, 8), randn(1, 2, 8)]),
]

OTHER = [
    ("prelu_single", prelu_channels, [randn(2, 3, 4), torch.tensor([0.25])],
     [randn(4, 3), torch.tensor([0.1])]),
    ("prelu_channels", prelu_channels, [randn(2, 3, 4), rand(3)], [randn(5, 3), rand(3)]),
    ("glu_last", glu_last, [randn(3, 4)], [randn(2, 5, 6)]),
    ("glu_dim1", glu_dim1, [randn(2, 4, 3)], [randn(3, 6)]),
    ("rrelu_eval", rrelu_eval, [randn(3, 4)], [randn(5)]),
    ("gelu_mlp", gelu_mlp, [randn(2, 8), randn(16, 8), randn(4, 16)],
     [randn(5, 8), randn(16, 8), randn(4, 16)]),
    ("swiglu", swiglu, [randn(2, 8), randn(8, 6), randn(8, 6)],
     [randn(3, 4, 8), randn(8, 6), randn(8, 6)]),
    ("inplace_activations", inplace_activations, [randn(3, 4)], [randn(2, 6)]),
    ("relu_on_input_clone_inplace", ts("x", """
        y = x.clone()
        y.relu_()
        return y
     """), [randn(3, 4)], [randn(7)]),
    ("activation_chain", ts("x", "torch.tanh(torch.sigmoid(torch.relu(x) - 0.5) * 3)"),
     [randn(3, 4)], [randn(2, 2, 2)]),
]

# The result's strides follow a transposed input, on every call (see ``op_cases.layout``).
LAYOUT = [(f"layout_{name}", layout(expr), [randn(4, 3)], [randn(6, 5)]) for name, expr in [
    ("relu", "torch.relu(y)"), ("sigmoid", "torch.sigmoid(y)"),
    ("gelu", "torch.nn.functional.gelu(y)"), ("silu", "torch.nn.functional.silu(y)"),
    ("hardtanh", "torch.nn.functional.hardtanh(y)"),
    ("leaky_relu", "torch.nn.functional.leaky_relu(y, 0.1)"),
    ("threshold", "torch.threshold(y, 0.0, 1.0)"), ("softmax", "torch.softmax(y, 1)"),
    ("log_softmax", "torch.log_softmax(y, 0)"), ("hardswish", "torch.nn.functional.hardswish(y)"),
]]
# A contiguous input first (its result is kept), then a transposed one written into it.
LAYOUT += [(f"layout_after_contiguous_{name}", layout(expr, "x"), [randn(3, 4)],
            [randn(5, 4).t()]) for name, expr in [
    ("relu", "torch.relu(y)"), ("gelu", "torch.nn.functional.gelu(y)"),
    ("softmax", "torch.softmax(y, 1)"),
]]

CASES = ([case(name, model, [X1], [X2]) for name, model in POINTWISE]
         + [case(*c) for c in SOFTMAX + OTHER + LAYOUT])


@pytest.mark.parametrize("model, first, second, tol", CASES)
def test_activation(model, first, second, tol):
    check(model, first, second, **tol)
