"""``fold_batchnorm``: an inference batch norm after a convolution or a linear layer becomes
part of its weights.

``batch_norm(conv(x, W, b), γ, β, μ, σ², training=False, eps)`` equals ``conv(x, W', b')``
with ``s = γ / sqrt(σ² + eps)``, ``W' = W · s`` (per output channel) and
``b' = (b − μ) · s + β``; the same holds for ``linear`` when the batch norm's channel
dimension (dim 1) is the linear layer's output features (its last dimension), which is so
exactly when the input has rank 2 — or when the product is made a matrix of its features
first, ``flatten(0, e)`` of a rank ``e + 2`` product or ``reshape``/``view`` to ``(-1, N)``
(LeViT's linear + BN: ``bn(h.flatten(0, 1)).reshape_as(h)``; what reads only the product's
shape, ``reshape_as``'s ``other``, then reads the folded product's). This pass does the folding itself for every frontend:
the TorchScript frontend freezes with ``optimize_numerics=False``, because freezing's own
folds rewrite the weights of a layer whose result has other uses too (``h = fc(x);
h + fc2(bn(h))`` then adds the *normalised* ``h``: a wrong answer).

Folded only where that is exact:

* the layer's result has no use but the batch norm, apart from reads of its metadata
  (``dim``, ``size``, ``dtype``: a batch norm keeps those) — a residual use keeps both;
* everything but ``x`` is a constant, the tensors floating point of one dtype, the batch
  norm in inference mode (``aten::batch_norm`` with ``training`` the constant ``False``, or
  export's ``_native_batch_norm_legit_no_training`` with its statistics unused);
* the ranks agree. A convolution's batch norm sees the channels in dim 1 for a batched input
  (rank of the weight); an unbatched one would put them elsewhere, so the folded graph checks
  the rank and raises for an unbatched input (where the unfolded batch norm raises too, but
  for ``BatchNorm1d`` on an unbatched ``conv1d`` whose length equals its channels).
  A linear layer's input of rank 2 takes the folded layer; any other rank runs the layer
  and the batch norm as they were (a ``prim::If`` on the rank, which the code generated per
  input signature resolves once).

The folded constants are computed in float64 and rounded once to the weights' dtype, so the
result differs from the two-step computation only by rounding.
"""

from __future__ import annotations

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.constant_propagation import constant_value

_CONVS = {str(op._schema) for op in (
    torch.ops.aten.conv1d.default, torch.ops.aten.conv2d.default, torch.ops.aten.conv3d.default,
    torch.ops.aten.convolution.default)}
_LINEAR = str(torch.ops.aten.linear.default._schema)
_FLATTEN = str(torch.ops.aten.flatten.using_ints._schema)
_RESHAPES = (str(torch.ops.aten.reshape.default._schema), str(torch.ops.aten.view.default._schema))
_SHAPE_OF_OTHER = frozenset(str(op._schema) for op in (
    torch.ops.aten.reshape_as.default, torch.ops.aten.view_as.default,
    torch.ops.aten.expand_as.default))
_BATCH_NORM = str(torch.ops.aten.batch_norm.default._schema)
_BATCH_NORM_EXPORT = str(torch.ops.aten._native_batch_norm_legit_no_training.default._schema)
_DIM = str(torch.ops.aten.dim.default._schema)
_EQ_INT = str(torch.ops.aten.eq.int._schema)
_NE_INT = str(torch.ops.aten.ne.int._schema)
_FORMAT = str(torch.ops.aten.format.default._schema)

#: Operators that read only a tensor's metadata, which a batch norm leaves as it was: a use
#: by one of them does not stop the folding.
METADATA_READS = frozenset({
    str(op._schema) for op in (
        torch.ops.aten.dim.default, torch.ops.aten.size.int, torch.ops.aten.size.default,
        torch.ops.aten.numel.default, torch.ops.prim.dtype.default,
        torch.ops.prim.device.default, torch.ops.prim.layout.default,
        torch.ops.aten.is_floating_point.default, torch.ops.aten.is_complex.default)})


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


def _reads_shape(use) -> bool:
    """A use that reads only the value's metadata (``dim``, ``size``, ...; the ``other`` of
    ``reshape_as``/``view_as``/``expand_as``, whose size it takes)."""
    return use.user.schema in METADATA_READS or (use.user.schema in _SHAPE_OF_OTHER
                                                 and use.index == 1)


def _only_value_use(y: Value, bn: Node) -> bool:
    """``bn`` is the one use of ``y`` that reads its values."""
    return all(u.user is bn or u.user.schema in METADATA_READS for u in y.uses) \
        and sum(u.user is bn for u in y.uses) == 1


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
    layer = y.node
    between = None
    if layer.schema in (_FLATTEN, *_RESHAPES) and layer.inputs[0].node.schema == _LINEAR:
        # a product flattened to a matrix of its features first (LeViT's linear + BN)
        between, layer = layer, layer.inputs[0].node
        if between.owning_block is not bn.owning_block or not all(
                u.user is between or _reads_shape(u) for u in layer.output.uses):
            return False
    if layer.schema not in _CONVS and layer.schema != _LINEAR:
        return False
    if layer.owning_block is not bn.owning_block or not _only_value_use(y, bn):
        return False
    if layer.schema == str(torch.ops.aten.convolution.default._schema):
        known, transposed = constant_value(layer.inputs[6])
        if not known or transposed is not False:
            return False
    weight, bias = _constants(layer, (1, 2)) or (None, None)
    folded = _folded(weight, bias, gamma, beta, mean, var, eps)
    if folded is None:
        return False
    if layer.schema == _LINEAR:
        if between is None:
            return _fold_linear(graph, layer, bn, *folded)
        rank = _to_features(between, layer, weight.shape[0])
        return rank is not None and _fold_linear(graph, layer, bn, *folded, between, rank)
    new_weight = graph.constant(folded[0], T.Tensor, before=layer)
    new_bias = graph.constant(folded[1], T.Tensor, before=layer)
    layer.replace_input(1, new_weight)
    layer.replace_input(2, new_bias)
    _check_batched(graph, layer, weight.dim(), bn)
    name = bn.outputs[0].name
    bn.outputs[0].replace_all_uses_with(layer.output)
    bn.destroy()
    layer.output.set_name(name)
    return True


def _op(graph: Graph, kind: str, schema: str, inputs: list[Value], out: T.Type,
        before: Node) -> Value:
    node = graph.create(kind, inputs, output_types=[out])
    node.schema = schema
    node.source = before.source
    node.insert_before(before)
    return node.output


def _rank_test(graph: Graph, x: Value, compare: str, rank: int, before: Node
               ) -> tuple[Value, Value]:
    """``x.dim()`` and ``x.dim() <compare> rank`` (``compare``: ``eq`` or ``ne``), before
    ``before``."""
    dim = _op(graph, "aten::dim", _DIM, [x], T.Int, before)
    schema = {"eq": _EQ_INT, "ne": _NE_INT}[compare]
    test = _op(graph, f"aten::{compare}", schema,
               [dim, graph.constant(rank, T.Int, before=before)], T.Bool, before)
    return dim, test


def _check_batched(graph: Graph, conv: Node, rank: int, bn: Node) -> None:
    """Before ``conv``: raise unless its input has the weight's rank (a batch)."""
    message = (f"static_runtime folded the batch norm{_at(bn)} into the convolution before it, "
               f"which is exact for an input of rank {rank} (a batch); this input has rank "
               "{}. Build the StaticModule with StaticModuleOptions(fold_batchnorm=False) to "
               "run unbatched inputs.")
    check_rank(graph, conv, rank, message, "builtins.ValueError", bn.source)


def check_rank(graph: Graph, node: Node, rank: int, message: str, exception: str,
               source: str | None) -> None:
    """Before ``node``: raise ``exception`` (``builtins.ValueError``) with ``message`` (its
    ``{}`` the input's rank) unless ``node``'s first input has rank ``rank``."""
    dim, wrong = _rank_test(graph, node.inputs[0], "ne", rank, node)
    check = graph.create("prim::If", [wrong])
    check.source = source
    check.insert_before(node)
    raising = check.add_block()
    check.add_block()  # the rank asked for: nothing to do
    text = graph.create("aten::format", [graph.constant(message, T.Str, before=check), dim],
                        output_types=[T.Str])
    text.schema = _FORMAT
    raising.append(text)
    raise_ = graph.create("prim::RaiseException",
                          [text.output, graph.constant(exception, T.Str, before=check)])
    raise_.schema = str(torch.ops.prim.RaiseException.default._schema)
    raising.append(raise_)


def _at(node: Node) -> str:
    return f" at {node.source}" if node.source else ""


def _fold_linear(graph: Graph, linear: Node, bn: Node, weight: torch.Tensor,
                 bias: torch.Tensor, between: Node | None = None, rank: int = 2) -> bool:
    """``bn(linear(x, W, b))`` → ``linear(x, W', b') if x.dim() == 2 else bn(linear(x, W, b))``;
    with ``between`` (a flatten or reshape of the product to a matrix of its features:
    ``_to_features``), ``bn(between(linear(x, W, b)))`` → ``between(linear(x, W', b'))`` where
    ``x.dim() == rank`` (any rank: ``rank`` 0), else as it was."""
    if weight.dim() != 2:
        return False
    needed = [*bn.inputs[1:], *(between.inputs[1:] if between is not None else ())]
    if any(not v.node.is_before(linear) and v.node.kind != "prim::Constant" for v in needed):
        return False
    for v in needed:
        if not v.node.is_before(linear):
            v.node.move_before(linear)  # (an exported program makes constants at first use)
    x, y = linear.inputs[0], (between or linear).output
    new_weight = graph.constant(weight, T.Tensor, before=linear)
    new_bias = graph.constant(bias, T.Tensor, before=linear)
    folded = graph.create("aten::linear", [x, new_weight, new_bias],
                          output_types=[linear.output.type])
    folded.schema, folded.source = linear.schema, linear.source
    made = [folded]
    if between is not None:
        again = graph.create(between.kind, [folded.output, *between.inputs[1:]],
                             output_types=[y.type])
        again.schema, again.source = between.schema, between.source
        made.append(again)
    name = bn.outputs[0].name
    # what reads the product's shape alone (``reshape_as(h, product)``), with ``between``
    shape_reads = [u for u in linear.output.uses if u.user is not between] if between else []
    if rank == 0:  # (a reshape to (-1, N): a matrix of the features whatever the rank)
        for node in made:
            node.insert_before(linear)
        result = made[-1].output
        bn.outputs[0].replace_all_uses_with(result)
        for use in list(y.uses):
            if use.user is not bn:
                use.user.replace_input(use.index, result)
        for use in shape_reads:
            use.user.replace_input(use.index, folded.output)
        bn.destroy()
        if between is not None:
            between.destroy()
        linear.destroy()
        result.set_name(name)
        return True
    _, is_matrix = _rank_test(graph, x, "eq", rank, linear)
    types = [bn.outputs[0].type] + ([linear.output.type] if shape_reads else [])
    branch = graph.create("prim::If", [is_matrix], output_types=types)
    branch.source = linear.source
    branch.insert_before(linear)
    folded_block, as_was = branch.add_block(), branch.add_block()
    for node in made:
        folded_block.append(node)
    folded_block.add_output(made[-1].output)
    result = branch.outputs[0]
    for use in list(y.uses):  # metadata reads: a batch norm keeps what they read
        if use.user is not bn:
            use.user.replace_input(use.index, result)
    for use in shape_reads:
        use.user.replace_input(use.index, branch.outputs[1])
    bn.outputs[0].replace_all_uses_with(result)
    as_was.append(linear)
    if between is not None:
        as_was.append(between)
    as_was.append(bn)
    as_was.add_output(bn.outputs[0])
    if shape_reads:
        folded_block.add_output(folded.output)
        as_was.add_output(linear.output)
    result.set_name(name)
    return True


def _to_features(node: Node, linear: Node, features: int) -> int | None:
    """If ``node`` makes a matrix of ``linear``'s result whose columns are its ``features``
    (the batch norm's channels then are the product's features): the input rank at which it
    does — ``flatten(y, 0, e)`` of a rank ``e + 2`` result — or 0 for ``reshape``/``view``
    to ``(-1, features)`` (any rank); else None."""
    if node.schema == _FLATTEN:
        known_s, start = constant_value(node.inputs[1])
        known_e, end = constant_value(node.inputs[2])
        if known_s and known_e and start == 0 and type(end) is int and end >= 0:
            return end + 2
        return None
    if node.schema in _RESHAPES:
        known, shape = constant_value(node.inputs[1])
        if known and isinstance(shape, (list, tuple)) and list(shape) == [-1, features]:
            return 0
    return None


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
