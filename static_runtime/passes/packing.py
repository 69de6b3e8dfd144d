"""``pack_linears``: sibling linears on one input packed into one product, as ONNX Runtime
packs attention's Q/K/V and a gated MLP's gate and up projections.

Linears (``aten::linear``) that read the same value, in one block, with constant 2-D weights
of one floating dtype and the same number of input features ``K``, each weight smaller than
``LINEAR_MIN_WEIGHT`` elements, and constant biases (or none), become one ``aten::linear``
with the weights (and biases: zeros where one had none) concatenated, and one
``aten::slice`` of its last dimension per former output. The product is the same
multiply-adds in one call instead of several: at the zoo's sizes (``M`` 16–256 rows,
``K = N`` 32–256) one ``addmm`` into ``(M, 3N)`` takes 0.45–0.97 × the time of three into
``(M, N)``, and from 512 × 512 weights the calls' fixed costs are lost in the work (and such a
linear is ``fuse_linear_pointwise``'s, which takes its activation along), so those are left
alone (``benchmarks/pack_linears.py``).

The slices are not contiguous: each row of one is ``K`` apart from the next by the packed
width, not its own. Where an output goes is therefore checked, transitively through the views
taken of it, against operators whose result does not depend on their input's layout and
that write nothing (``_COMPUTES``: element-wise arithmetic and activations, products,
softmax, norms, attention, concatenation, size queries; ``_VIEWS``: transpose, permute, slice, select,
unsqueeze, expand, reshape, flatten, contiguous, which are followed). A ``view`` is the one layout-
sensitive operator let in: one taken directly of a former output (contiguous before) can fail
only when the element count does not fit, so it becomes ``reshape``, which is the same view
wherever ``view`` succeeds on the packed slice, copies where it would not, and raises the same
error where the count does not fit — equal values, since nothing downstream writes or
returns it. Anything else (an in-place operator, a graph output, a ``view`` of a view, an
operator not listed) keeps that linear out of the pack.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.constant_propagation import constant_value

_LINEAR = "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"
_SLICE = str(torch.ops.aten.slice.Tensor._schema)
_RESHAPE = str(torch.ops.aten.reshape.default._schema)
_VIEW = "aten::view"

#: Weights of at least this many elements are not packed (``fuse_linear_pointwise``'s bound).
LINEAR_MIN_WEIGHT = 512 * 512

#: Operators (by schema name) whose output is a fresh tensor whose values do not depend on
#: the input's strides, and which write nothing.
_COMPUTES = frozenset({
    "aten::linear", "aten::matmul", "aten::mm", "aten::bmm",
    "aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor",
    "aten::add.Scalar", "aten::sub.Scalar", "aten::mul.Scalar", "aten::div.Scalar",
    "static_runtime::add.Tensor", "static_runtime::sub.Tensor",
    "static_runtime::add.Scalar", "static_runtime::sub.Scalar",
    "aten::neg", "aten::pow.Tensor_Scalar", "aten::rsqrt", "aten::sqrt", "aten::exp",
    "aten::relu", "aten::gelu", "aten::silu", "aten::sigmoid", "aten::tanh",
    "aten::hardswish", "aten::hardtanh", "aten::relu6",
    "aten::softmax.int", "aten::log_softmax.int", "aten::layer_norm", "aten::mean.dim",
    "aten::scaled_dot_product_attention", "static_runtime::attention",
    "static_runtime::masked_attention", "static_runtime::linear_pointwise",
    "aten::clone", "aten::size.int", "aten::size", "aten::dim", "aten::numel",
    "aten::cat", "prim::VarConcat",
})
#: Views (output aliases input 0) and may-alias operators whose users are followed.
_VIEWS = frozenset({
    "aten::transpose.int", "aten::permute", "aten::slice.Tensor", "aten::select.int",
    "aten::unsqueeze", "aten::reshape", "aten::flatten.using_ints", "aten::contiguous",
    "aten::expand",
})


def pack_linears(graph: Graph) -> bool:
    groups: dict[tuple, list[Node]] = defaultdict(list)
    for node in graph.walk():
        key = _packable(node)
        if key is not None:
            groups[key].append(node)
    changed = False
    for siblings in groups.values():
        if len(siblings) >= 2:
            _pack(graph, siblings)
            changed = True
    return changed


def _packable(node: Node) -> tuple | None:
    """The group key ``(input, block, dtype, K)`` of a linear that may be packed, else None."""
    if node.schema != _LINEAR or len(node.inputs) != 3 or node.owning_block is None:
        return None
    known_w, weight = constant_value(node.inputs[1])
    known_b, bias = constant_value(node.inputs[2])
    if not (known_w and isinstance(weight, torch.Tensor) and weight.dim() == 2
            and weight.dtype.is_floating_point and weight.layout == torch.strided
            and not weight.is_meta and 0 < weight.numel() < LINEAR_MIN_WEIGHT):
        return None
    if not known_b or not (bias is None or (
            isinstance(bias, torch.Tensor) and bias.dtype is weight.dtype
            and bias.layout == torch.strided and tuple(bias.shape) == weight.shape[:1])):
        return None
    if not _layout_blind(node.output, direct=True):
        return None
    return (node.inputs[0], node.owning_block, weight.dtype, weight.shape[1])


def _layout_blind(value: Value, direct: bool) -> bool:
    """Whether every use of ``value`` (transitively through views) reads it as values only,
    writes nothing and returns nothing; ``direct``: ``value`` is a former linear output,
    whose ``view`` users become ``reshape``."""
    for use in value.uses:
        user = use.user
        name = user.schema_name() or user.kind
        if name in _COMPUTES:
            continue
        if name in _VIEWS or (direct and name == _VIEW and use.index == 0):
            if use.index != 0 or not all(_layout_blind(o, direct=False) for o in user.outputs):
                return False
            continue
        return False
    return True


def _pack(graph: Graph, siblings: list[Node]) -> None:
    first = siblings[0]  # (walk order: the first in its block)
    weights = [constant_value(n.inputs[1])[1] for n in siblings]
    biases = [constant_value(n.inputs[2])[1] for n in siblings]
    with torch.no_grad():
        weight = torch.cat([w.detach() for w in weights]).contiguous()
        bias = None if all(b is None for b in biases) else torch.cat(
            [torch.zeros(w.shape[0], dtype=w.dtype) if b is None else b.detach()
             for w, b in zip(weights, biases, strict=True)])
    packed = graph.create("aten::linear", [
        first.inputs[0], graph.constant(weight, T.Tensor, before=first),
        graph.constant(bias, T.Tensor if bias is not None else T.NoneT, before=first)],
        output_types=[first.output.type])
    packed.schema, packed.source = _LINEAR, first.source
    packed.insert_before(first)
    minus_one = graph.constant(-1, T.Int, before=first)
    step = graph.constant(1, T.Int, before=first)
    start = 0
    for node, w in zip(siblings, weights, strict=True):
        end = start + w.shape[0]
        part = graph.create("aten::slice", [
            packed.output, minus_one, graph.constant(start, T.Int, before=first),
            graph.constant(end, T.Int, before=first), step], output_types=[node.output.type])
        part.schema, part.source = _SLICE, node.source
        part.insert_before(first)
        for use in list(node.output.uses):
            if use.user.schema_name() == _VIEW:
                graph.replace_node(use.user, "aten::reshape", use.user.inputs, schema=_RESHAPE)
        name = node.output.name
        node.output.replace_all_uses_with(part.output)
        if node is not first:
            node.destroy()
        part.output.set_name(name)
        start = end
    first.destroy()
