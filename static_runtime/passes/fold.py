"""``fold_batchnorm``: an inference batch norm after a convolution becomes part of its weights.

``batch_norm(conv(x, W, b), γ, β, μ, σ², training=False, eps)`` equals ``conv(x, W', b')``
with ``s = γ / sqrt(σ² + eps)``, ``W' = W · s`` (per output channel) and
``b' = (b − μ) · s + β``. TorchScript's freezing already does this for frozen modules; this
pass does it for graphs that reach us with the batch norm still there — ``torch.export``
programs, and TorchScript modules frozen with ``optimize_numerics=False`` or not at all
(when their weights are constants).

Applies to ``aten::conv1d``/``conv2d``/``conv3d`` and ``aten::convolution`` (not
transposed), followed by
``aten::batch_norm`` with ``training`` the constant ``False`` or by
``aten::_native_batch_norm_legit_no_training`` (export's form) whose statistics outputs are
unused; everything but ``x`` must be a constant, the batch norm the convolution's only user,
and the tensors floating point of one dtype. The folded constants are computed in float64
and rounded once to the weights' dtype, so the result differs from the two-step computation
only by rounding.

One difference: ``batch_norm`` checks its input's rank (``BatchNorm2d`` refuses an unbatched
3-D image that ``conv2d`` accepts); once folded, that input runs.
"""

from __future__ import annotations

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node
from static_runtime.passes.constant_propagation import constant_value

_CONVS = {str(op._schema) for op in (
    torch.ops.aten.conv1d.default, torch.ops.aten.conv2d.default, torch.ops.aten.conv3d.default,
    torch.ops.aten.convolution.default)}
_BATCH_NORM = str(torch.ops.aten.batch_norm.default._schema)
_BATCH_NORM_EXPORT = str(torch.ops.aten._native_batch_norm_legit_no_training.default._schema)


def fold_batchnorm(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.schema in (_BATCH_NORM, _BATCH_NORM_EXPORT):
            changed |= _fold(graph, node)
    return changed


def _constants(node: Node, indices) -> list | None:
    values = []
    for i in indices:
        known, value = constant_value(node.inputs[i])
        if not known:
            return None
        values.append(value)
    return values


def _fold(graph: Graph, bn: Node) -> bool:
    if bn.schema == _BATCH_NORM:
        params = _constants(bn, (1, 2, 3, 4, 5, 7))
        if params is None:
            return False
        gamma, beta, mean, var, training, eps = params
        if training is not False:
            return False
    else:
        if any(out.uses for out in bn.outputs[1:]):
            return False
        params = _constants(bn, (1, 2, 3, 4, 6))
        if params is None:
            return False
        gamma, beta, mean, var, eps = params
    y = bn.inputs[0]
    conv = y.node
    if conv.schema not in _CONVS or len(y.uses) != 1 \
            or conv.owning_block is not bn.owning_block:
        return False
    if conv.schema == str(torch.ops.aten.convolution.default._schema):
        known, transposed = constant_value(conv.inputs[6])
        if not known or transposed is not False:
            return False
    folded = _folded(*(_constants(conv, (1, 2)) or (None, None)), gamma, beta, mean, var, eps)
    if folded is None:
        return False
    new_weight = graph.constant(folded[0], T.Tensor, before=conv)
    new_bias = graph.constant(folded[1], T.Tensor, before=conv)
    conv.replace_input(1, new_weight)
    conv.replace_input(2, new_bias)
    name = bn.outputs[0].name
    bn.outputs[0].replace_all_uses_with(conv.output)
    bn.destroy()
    conv.output.set_name(name)
    return True


def _folded(weight, bias, gamma, beta, mean, var, eps):
    """``(W', b')``, or None if the constants are not what the folding needs."""
    tensors = [t for t in (weight, bias, gamma, beta, mean, var) if t is not None]
    if not isinstance(weight, torch.Tensor) or not isinstance(mean, torch.Tensor) \
            or not isinstance(var, torch.Tensor) or not isinstance(eps, float):
        return None
    if not all(isinstance(t, torch.Tensor) and t.dtype.is_floating_point
               and t.dtype == weight.dtype and not t.is_mkldnn for t in tensors):
        return None
    channels = weight.shape[0]
    if any(t.shape != (channels,) for t in tensors if t is not weight):
        return None
    f64 = torch.float64
    scale = torch.rsqrt(var.to(f64) + eps)
    if gamma is not None:
        scale = scale * gamma.to(f64)
    shift = -mean.to(f64) * scale
    if bias is not None:
        shift = shift + bias.to(f64) * scale
    if beta is not None:
        shift = shift + beta.to(f64)
    new_weight = weight.to(f64) * scale.reshape(-1, *([1] * (weight.dim() - 1)))
    return new_weight.to(weight.dtype).contiguous(), shift.to(weight.dtype)
