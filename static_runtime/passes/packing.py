"""``pack_linears``: sibling linears on one input packed into one product, as ONNX Runtime
packs attention's Q/K/V and a gated MLP's gate and up projections.

Products with a constant weight that read the same value in the top-level block — ``linear``, and
``matmul`` or ``addmm`` with a constant matrix, as traced, scripted and exported models show
them (``_product``) — with weights of one floating dtype and the same number of input
features ``K``, each weight smaller than ``LINEAR_MIN_WEIGHT`` elements, and constant biases
(or none), become one ``aten::linear`` with the weights (and biases: zeros where one had
none) concatenated, and one ``aten::slice`` of its last dimension per former output. The
packed linear is then like any other (``fuse_linear_pointwise`` and
``kernel_choice="measure"`` take it by its own size). The product is the same
multiply-adds in one call instead of several: at the zoo's sizes (``M`` 16–256 rows,
``K = N`` 32–256) one ``addmm`` into ``(M, 3N)`` takes 0.45–0.97 × the time of three into
``(M, N)``, and from 512 × 512 weights the calls' fixed costs are lost in the work (and such a
linear is ``fuse_linear_pointwise``'s, which takes its activation along), so those are left
alone (``benchmarks/rewrites.py --pack-grid``). The gain needs the slices to be free: in the
top-level block the packed product is planned in the arena and views of it are taken once
per layout (``hoist_views``); inside an ``If`` or ``Loop`` body nothing is planned and each
slice costs a call, which ate the gain (a mixture of experts' gate and up projections behind
``if rows.numel() > 0``: 1.03–1.06 × slower packed), so bodies are left alone.

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
_MATMUL = "aten::matmul(Tensor self, Tensor other) -> Tensor"
_ADDMM = ("aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, "
          "Scalar alpha=1) -> Tensor")
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
    groups: dict[tuple, list[tuple[Node, torch.Tensor, torch.Tensor | None]]] = \
        defaultdict(list)
    for node in graph.walk():
        product = _product(node)
        if product is None or not _layout_blind(node.output, direct=True):
            continue
        x, weight, bias = product
        groups[(x, node.owning_block, weight.dtype, weight.shape[1])].append(
            (node, weight, bias))
    changed = False
    for siblings in groups.values():
        if len(siblings) >= 2:
            _pack(graph, siblings)
            changed = True
    return changed


def _product(node: Node) -> tuple[Value, torch.Tensor, torch.Tensor | None] | None:
    """``(x, W, b)`` if ``node`` computes ``x · Wᵀ + b`` with a constant ``(N, K)`` weight of
    fewer than ``LINEAR_MIN_WEIGHT`` elements and a constant ``(N,)`` bias of its dtype (or
    none): ``linear(x, W, b)``; ``matmul(x, B)`` (``W = Bᵀ``; for every rank of ``x``
    ``matmul`` with a matrix computes what ``linear`` does); ``addmm(b, x, B)`` with ``beta``
    and ``alpha`` 1 where ``x`` is proved a matrix (made by ``view``/``reshape`` to two sizes,
    as GPT-2's ``Conv1D`` makes it: ``addmm`` raises for any other rank, ``linear`` would
    not). Else None."""
    if node.owning_block is not node.graph.block:
        return None
    if node.schema == _LINEAR and len(node.inputs) == 3:
        x, weight, bias = node.inputs
        transposed = False
    elif node.schema == _MATMUL:
        (x, weight), bias, transposed = node.inputs, None, True
    elif node.schema == _ADDMM and _is_matrix(node.inputs[1]) \
            and all(constant_value(v) == (True, 1) for v in node.inputs[3:]):
        bias, x, weight = node.inputs[:3]
        transposed = True
    else:
        return None
    known_w, w = constant_value(weight)
    known_b, b = constant_value(bias) if bias is not None else (True, None)
    if not (known_w and isinstance(w, torch.Tensor) and w.dim() == 2
            and w.dtype.is_floating_point and w.layout == torch.strided
            and not w.is_meta and 0 < w.numel() < LINEAR_MIN_WEIGHT):
        return None
    w = w.t() if transposed else w
    if not known_b or not (b is None or (
            isinstance(b, torch.Tensor) and b.dtype is w.dtype
            and b.layout == torch.strided and tuple(b.shape) == w.shape[:1])):
        return None
    return x, w, b


def _is_matrix(x: Value) -> bool:
    """Whether ``x`` is made by ``view``/``reshape`` to a list of two sizes."""
    if x.node.schema_name() not in (_VIEW, "aten::reshape"):
        return False
    sizes = x.node.inputs[1]
    known, value = constant_value(sizes)
    if known:
        return isinstance(value, (list, tuple)) and len(value) == 2
    return sizes.node.kind == "prim::ListConstruct" and len(sizes.node.inputs) == 2


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


def _pack(graph: Graph, siblings: list[tuple[Node, torch.Tensor, torch.Tensor | None]]
          ) -> None:
    first = siblings[0][0]  # (walk order: the first in its block)
    x = _product(first)[0]
    weights = [w for _, w, _ in siblings]
    biases = [b for _, _, b in siblings]
    with torch.no_grad():
        weight = torch.cat([w.detach() for w in weights]).contiguous()
        bias = None if all(b is None for b in biases) else torch.cat(
            [torch.zeros(w.shape[0], dtype=w.dtype) if b is None else b.detach()
             for w, b in zip(weights, biases, strict=True)])
    packed = graph.create("aten::linear", [
        x, graph.constant(weight, T.Tensor, before=first),
        graph.constant(bias, T.Tensor if bias is not None else T.NoneT, before=first)],
        output_types=[first.output.type])
    packed.schema, packed.source = _LINEAR, first.source
    packed.insert_before(first)
    minus_one = graph.constant(-1, T.Int, before=first)
    step = graph.constant(1, T.Int, before=first)
    start = 0
    for node, w, _ in siblings:
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
