"""``fuse_transformer_encoder``: an exported ``nn.TransformerEncoderLayer`` becomes one
``aten::_transformer_encoder_layer_fwd`` node, PyTorch's fused encoder-layer kernel.

In eval mode without autograd, ``TransformerEncoderLayer.forward`` calls that kernel itself
(its "fast path"), so a TorchScript import reaches it; ``torch.export`` traces the slow path
instead — about 26 ATen operators: the packed in-projection ``linear``, the
``unflatten``/``unsqueeze``/``transpose``/``squeeze``/``contiguous``/``select`` split into
query, key and value, per-head ``view``/``transpose``, ``scaled_dot_product_attention``, the
out-projection, the residual ``add``, ``layer_norm``, and the ``linear``-activation-``linear``
feed-forward block. This pass recognises that subgraph and puts the kernel back, with the
arguments ``TransformerEncoderLayer.forward`` passes it (``torch/nn/modules/transformer.py``).

What is matched — exactly, anything else is left alone:

* both layouts: ``norm_first=False`` (``norm2(x + ff(norm1(x + sa(x))))``) and
  ``norm_first=True`` (``x + sa(norm1(x))``, then ``+ ff(norm2(·))``);
* ``batch_first=True`` (PyTorch's fast path requires it: the kernel takes ``(B, L, E)``);
* no attention mask (``scaled_dot_product_attention`` with ``attn_mask=None``,
  ``dropout_p=0.0``, ``is_causal=False``, ``scale=None``, ``enable_gqa=False``);
* activation ``relu`` or ``gelu`` with ``approximate="none"`` (the kernel's ``use_gelu``);
* an even number of heads, both layer norms with one ``eps`` (PyTorch's own conditions);
* every weight and bias a constant floating-point tensor of one dtype, of the shapes the
  kernel needs (in-projection ``(3E, E)``, out-projection ``(E, E)``, feed-forward
  ``(F, E)``/``(E, F)``, norms ``(E,)``); ``aten::dropout`` with ``train=False`` passes through.

Soundness of the shapes: the split and head views are written with sizes taken from the
input (``aten::size.int`` and ``aten::mul.int``, or constants where export specialised a
size). Each size is evaluated as a product of the input's symbolic dimensions (from the
program's input guards, which the runtime checks on every call) and must be exactly the size
the layer computes; the layer's input must be a guarded program input, or the output of an
encoder layer fused before it (same shape). Every tensor the pattern computes must be used
only inside the pattern. Exported programs only (``ExportSignature``): a TorchScript import
already reaches the kernel through ``TransformerEncoderLayer``'s own fast path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from static_runtime.frontend.export import ExportSignature
from static_runtime.ir import types as T
from static_runtime.ir.graph import Block, Graph, Node, Value
from static_runtime.passes.constant_propagation import constant_value


def _schema(op) -> str:
    return str(op._schema)


_aten = torch.ops.aten
_SDPA = _schema(_aten.scaled_dot_product_attention.default)
_VIEW = _schema(_aten.view.default)
_RESHAPE = _schema(_aten.reshape.default)
_TRANSPOSE = _schema(_aten.transpose.int)
_SELECT = _schema(_aten.select.int)
_CONTIGUOUS = _schema(_aten.contiguous.default)
_SQUEEZE = _schema(_aten.squeeze.dim)
_UNSQUEEZE = _schema(_aten.unsqueeze.default)
_UNFLATTEN = _schema(_aten.unflatten.int)
_PERMUTE = _schema(_aten.permute.default)
_LINEAR = _schema(_aten.linear.default)
_LAYER_NORM = _schema(_aten.layer_norm.default)
_RELU = _schema(_aten.relu.default)
_GELU = _schema(_aten.gelu.default)
_DROPOUT = _schema(_aten.dropout.default)
_ADD = _schema(_aten.add.Tensor)
_ADD_NO_ALPHA = "static_runtime::add.Tensor(Tensor self, Tensor other) -> Tensor"
_SIZE = _schema(_aten.size.int)
_MUL_INT = _schema(_aten.mul.int)
ENCODER_LAYER = _schema(_aten._transformer_encoder_layer_fwd.default)
#: Scalar nodes the pattern's sizes are built from; removed with the pattern once unused.
_PURE_SCALARS = {"prim::Constant", "prim::ListConstruct", _SIZE, _MUL_INT}

#: The kernel's tensor arguments that must be constants of one dtype.
_WEIGHTS = ("qkv_weight", "qkv_bias", "proj_weight", "proj_bias", "norm_weight_1",
            "norm_bias_1", "norm_weight_2", "norm_bias_2", "ffn_weight_1", "ffn_bias_1",
            "ffn_weight_2", "ffn_bias_2")

#: A size as a product of symbolic dimensions: ``(coefficient, sorted symbol names)``.
Size = tuple[int, tuple[str, ...]]


def _times(a: Size, b: Size) -> Size:
    return a[0] * b[0], tuple(sorted(a[1] + b[1]))


def _known(n: int) -> Size:
    return n, ()


class _NoMatch(Exception):
    """The subgraph is not an encoder layer this pass can fuse (internal)."""


@dataclass
class _Match:
    """One recognised encoder layer: the tensors the kernel takes, and the pattern's nodes."""

    block: Block
    shapes: dict[Value, tuple[Size, ...]]
    nodes: list[Node] = field(default_factory=list)
    args: dict[str, object] = field(default_factory=dict)

    # -- reading the graph (each failure raises _NoMatch)
    def node(self, value: Value, schema: str) -> Node:
        """The node of ``schema`` defining ``value``; recorded as part of the pattern."""
        node = value.node
        if node.schema != schema or node.owning_block is not self.block \
                or len(node.outputs) != 1:
            raise _NoMatch
        self.nodes.append(node)
        return node

    def user(self, value: Value, schema: str) -> Node:
        """The only user of ``value``, of ``schema``, taking it as its first operand; recorded
        as part of the pattern."""
        if len(value.uses) != 1 or value.uses[0].index != 0:
            raise _NoMatch
        node = value.uses[0].user
        if node.schema != schema or node.owning_block is not self.block:
            raise _NoMatch
        self.nodes.append(node)
        return node

    def skip_dropouts(self, value: Value) -> Value:
        """``value`` after any ``dropout(·, p, train=False)`` that is its only user."""
        while len(value.uses) == 1 and value.uses[0].user.schema == _DROPOUT:
            node = value.uses[0].user
            if value.uses[0].index != 0 or self.const(node.inputs[2]) is not False:
                raise _NoMatch
            self.nodes.append(node)
            value = node.output
        return value

    def const(self, value: Value) -> object:
        known, v = constant_value(value)
        if not known:
            raise _NoMatch
        return v

    def int_const(self, value: Value) -> int:
        v = self.const(value)
        if type(v) is not int:
            raise _NoMatch
        return v

    def dim(self, value: Value, rank: int) -> int:
        d = self.int_const(value)
        if not -rank <= d < rank:
            raise _NoMatch
        return d % rank

    def size(self, value: Value) -> Size:
        """An int value as a product of symbolic dimensions."""
        known, v = constant_value(value)
        if known:
            if type(v) is not int:
                raise _NoMatch
            return _known(v)
        node = value.node
        if node.schema == _SIZE and node.inputs[0] in self.shapes:
            shape = self.shapes[node.inputs[0]]
            return shape[self.dim(node.inputs[1], len(shape))]
        if node.schema == _MUL_INT:
            return _times(self.size(node.inputs[0]), self.size(node.inputs[1]))
        raise _NoMatch

    def sizes(self, value: Value) -> list[Size]:
        known, v = constant_value(value)
        if known:
            if not isinstance(v, (list, tuple)) or any(type(e) is not int for e in v):
                raise _NoMatch
            return [_known(e) for e in v]
        if value.node.kind != "prim::ListConstruct":
            raise _NoMatch
        return [self.size(e) for e in value.node.inputs]

    def expect(self, condition: bool) -> None:
        if not condition:
            raise _NoMatch

    def tensor(self, value: Value, shape: tuple[int, ...]) -> torch.Tensor:
        """A constant floating-point weight of ``shape``."""
        t = self.const(value)
        self.expect(isinstance(t, torch.Tensor) and t.dtype.is_floating_point
                    and tuple(t.shape) == shape and t.layout == torch.strided)
        return t


def fuse_transformer_encoder(graph: Graph) -> bool:
    """Fuse every exported encoder layer the module docstring describes; return whether any
    was fused."""
    sig = graph.signature
    if not isinstance(sig, ExportSignature) or len(sig.guards) != len(graph.inputs):
        return False
    shapes: dict[Value, tuple[Size, ...]] = {}
    for i, (value, guard) in enumerate(zip(graph.inputs, sig.guards, strict=True)):
        if guard.is_tensor:
            # A size export could not name ("?", e.g. 2 * s0) is a symbol of its own.
            shapes[value] = tuple(_known(d) if isinstance(d, int) else
                                  (1, (f"?{i}.{k}" if d == "?" else d,))
                                  for k, d in enumerate(guard.dims))
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is None or node.schema != _SDPA:
            continue  # destroyed by an earlier fusion, or not an anchor
        match = _Match(node.owning_block, shapes)
        try:
            out = _match_layer(match, node)
        except _NoMatch:
            continue
        fused = _replace(graph, match, out)
        shapes[fused] = shapes[match.args["src"]]
        changed = True
    return changed


def _match_layer(m: _Match, sdpa: Node) -> Node:
    """Match the layer around ``sdpa``; return the node computing the layer's output."""
    m.nodes.append(sdpa)
    query, key, value, mask, dropout_p, causal, scale, gqa = sdpa.inputs
    m.expect(m.const(mask) is None and m.const(dropout_p) == 0.0 and m.const(causal) is False
             and m.const(scale) is None and m.const(gqa) is False)

    # -- query/key/value: views of one contiguous (3, L, B, E) split of the in-projection
    heads_view = m.node(query, _VIEW)
    heads_sizes = m.sizes(heads_view.inputs[1])
    m.expect(len(heads_sizes) == 4 and not heads_sizes[1][1] and not heads_sizes[3][1])
    heads, head_dim = heads_sizes[1][0], heads_sizes[3][0]
    split = None
    per_head: list[list[Size]] = []
    for index, projected in enumerate((query, key, value)):
        view4 = heads_view if index == 0 else m.node(projected, _VIEW)
        per_head.append(m.sizes(view4.inputs[1]))
        swap = m.node(view4.inputs[0], _TRANSPOSE)
        m.expect({m.dim(swap.inputs[1], 3), m.dim(swap.inputs[2], 3)} == {0, 1})
        view3 = m.node(swap.inputs[0], _VIEW)
        per_head.append(m.sizes(view3.inputs[1]))
        select = m.node(view3.inputs[0], _SELECT)
        m.expect(m.dim(select.inputs[1], 4) == 0 and m.int_const(select.inputs[2]) == index)
        if split is None:
            split = select.inputs[0]
        m.expect(select.inputs[0] is split)
    contiguous = m.node(split, _CONTIGUOUS)
    m.expect(m.const(contiguous.inputs[1]) in (0, torch.contiguous_format))
    squeeze = m.node(contiguous.inputs[0], _SQUEEZE)
    m.expect(m.dim(squeeze.inputs[1], 5) == 3)
    swap = m.node(squeeze.inputs[0], _TRANSPOSE)
    m.expect({m.dim(swap.inputs[1], 5), m.dim(swap.inputs[2], 5)} == {0, 3})
    unsqueeze = m.node(swap.inputs[0], _UNSQUEEZE)
    m.expect(m.dim(unsqueeze.inputs[1], 5) == 0)  # a dim of the (5-D) result
    unflatten = m.node(unsqueeze.inputs[0], _UNFLATTEN)
    in_proj = m.node(unflatten.inputs[0], _LINEAR)
    to_seq_first = m.node(in_proj.inputs[0], _TRANSPOSE)
    m.expect({m.dim(to_seq_first.inputs[1], 3), m.dim(to_seq_first.inputs[2], 3)} == {0, 1})
    attn_in = to_seq_first.inputs[0]

    # -- the layer's input: src itself, or norm1(src) when norm_first
    norm_first = attn_in not in m.shapes
    src = attn_in
    if norm_first:
        first_norm = m.node(attn_in, _LAYER_NORM)
        src = first_norm.inputs[0]
    m.expect(src in m.shapes and len(m.shapes[src]) == 3)
    batch, seq, (embed, symbols) = m.shapes[src]
    m.expect(not symbols and heads > 0 and heads % 2 == 0 and heads * head_dim == embed)
    m.args.update(src=src, embed_dim=embed, num_heads=heads, norm_first=norm_first)
    m.expect(m.dim(unflatten.inputs[1], 3) == 2
             and m.sizes(unflatten.inputs[2]) == [_known(3), _known(embed)])
    m.tensor(in_proj.inputs[1], (3 * embed, embed))
    m.args.update(qkv_weight=in_proj.inputs[1], qkv_bias=in_proj.inputs[2])
    m.tensor(in_proj.inputs[2], (3 * embed,))
    by_head = _times(batch, _known(heads))
    m.expect(all(s == [seq, by_head, _known(head_dim)] for s in per_head[1::2]))
    m.expect(all(s == [batch, _known(heads), seq, _known(head_dim)] for s in per_head[0::2]))

    # -- heads merged back, out-projection, back to (B, L, E)
    permute = m.user(sdpa.output, _PERMUTE)
    m.expect(m.sizes(permute.inputs[1]) == [_known(d) for d in (2, 0, 1, 3)])
    merge = m.user(permute.output, _RESHAPE)
    m.expect(m.sizes(merge.inputs[1]) == [_times(seq, batch), _known(embed)])
    out_proj = m.user(merge.output, _LINEAR)
    m.expect(out_proj.inputs[0] is merge.output)
    m.tensor(out_proj.inputs[1], (embed, embed))
    m.tensor(out_proj.inputs[2], (embed,))
    m.args.update(proj_weight=out_proj.inputs[1], proj_bias=out_proj.inputs[2])
    unmerge = m.user(out_proj.output, _VIEW)
    m.expect(m.sizes(unmerge.inputs[1]) == [seq, batch, _known(embed)])
    to_batch_first = m.user(unmerge.output, _TRANSPOSE)
    m.expect({m.dim(to_batch_first.inputs[1], 3), m.dim(to_batch_first.inputs[2], 3)} == {0, 1})
    attended = m.skip_dropouts(to_batch_first.output)
    residual = _residual_add(m, attended, src)

    # -- norms and feed-forward
    if norm_first:
        eps = _layer_norm(m, first_norm, embed, 1)
        m.expect(len(residual.output.uses) == 2)
        second_norm = next((u.user for u in residual.output.uses
                            if u.user.schema == _LAYER_NORM and u.index == 0), None)
        m.expect(second_norm is not None)
        m.nodes.append(second_norm)
        m.expect(_layer_norm(m, second_norm, embed, 2) == eps)
        ff_out = _feed_forward(m, second_norm.output, embed)
        last = _residual_add(m, ff_out, residual.output)
    else:
        first_norm = m.user(residual.output, _LAYER_NORM)
        eps = _layer_norm(m, first_norm, embed, 1)
        ff_in = first_norm.output
        m.expect(len(ff_in.uses) == 2)
        ff_out = _feed_forward(m, ff_in, embed)
        add = _residual_add(m, ff_out, ff_in)
        second_norm = m.user(add.output, _LAYER_NORM)
        m.expect(_layer_norm(m, second_norm, embed, 2) == eps)
        last = second_norm
    m.args["eps"] = eps
    m.expect(len({m.const(m.args[k]).dtype for k in _WEIGHTS}) == 1)
    _only_used_inside(m, last)
    return last


def _residual_add(m: _Match, branch: Value, skip: Value) -> Node:
    """``skip + branch`` (either order, alpha 1): the only user of ``branch``."""
    if len(branch.uses) != 1:
        raise _NoMatch
    add = branch.uses[0].user
    m.expect(add.owning_block is m.block and set(add.inputs[:2]) == {branch, skip}
             and branch is not skip)
    if add.schema == _ADD:
        m.expect(m.const(add.inputs[2]) == 1 and type(m.const(add.inputs[2])) is int)
    else:
        m.expect(add.schema == _ADD_NO_ALPHA)
    m.nodes.append(add)
    return add


def _layer_norm(m: _Match, norm: Node, embed: int, which: int) -> float:
    """Check ``layer_norm(x, [E], weight, bias, eps, _)``; record its weights; its eps."""
    _, shape, weight, bias, eps, _cudnn = norm.inputs
    m.expect(m.sizes(shape) == [_known(embed)])
    m.tensor(weight, (embed,))
    m.tensor(bias, (embed,))
    m.args[f"norm_weight_{which}"] = weight
    m.args[f"norm_bias_{which}"] = bias
    eps = m.const(eps)
    m.expect(type(eps) is float)
    return eps


def _feed_forward(m: _Match, x: Value, embed: int) -> Value:
    """``linear2(dropout(activation(linear1(x))))`` with ``x`` also the residual's other
    operand; the block's output (after dropouts)."""
    first = next((u.user for u in x.uses if u.user.schema == _LINEAR and u.index == 0), None)
    m.expect(first is not None and first.owning_block is m.block)
    m.nodes.append(first)
    weight = m.const(first.inputs[1])
    m.expect(isinstance(weight, torch.Tensor) and weight.dim() == 2)
    hidden = weight.shape[0]
    m.tensor(first.inputs[1], (hidden, embed))
    m.tensor(first.inputs[2], (hidden,))
    if len(first.output.uses) != 1:
        raise _NoMatch
    activation = first.output.uses[0].user
    if activation.schema == _RELU:
        use_gelu = False
    elif activation.schema == _GELU:
        m.expect(m.const(activation.inputs[1]) == "none")
        use_gelu = True
    else:
        raise _NoMatch
    m.expect(activation.owning_block is m.block)
    m.nodes.append(activation)
    second = m.user(m.skip_dropouts(activation.output), _LINEAR)
    m.tensor(second.inputs[1], (embed, hidden))
    m.tensor(second.inputs[2], (embed,))
    m.args.update(use_gelu=use_gelu, ffn_weight_1=first.inputs[1], ffn_bias_1=first.inputs[2],
                  ffn_weight_2=second.inputs[1], ffn_bias_2=second.inputs[2])
    return m.skip_dropouts(second.output)


def _only_used_inside(m: _Match, last: Node) -> None:
    inside = set(m.nodes)
    m.expect(len(inside) == len(m.nodes))
    for node in m.nodes:
        if node is last:
            continue
        for out in node.outputs:
            m.expect(all(use.user in inside for use in out.uses))


def _replace(graph: Graph, m: _Match, last: Node) -> Value:
    a = m.args
    before = last

    def const(value: object, type_: T.Type) -> Value:
        return graph.constant(value, type_, before=before)

    inputs = [
        a["src"], const(a["embed_dim"], T.Int), const(a["num_heads"], T.Int),
        a["qkv_weight"], a["qkv_bias"], a["proj_weight"], a["proj_bias"],
        const(a["use_gelu"], T.Bool), const(a["norm_first"], T.Bool), const(a["eps"], T.Float),
        a["norm_weight_1"], a["norm_bias_1"], a["norm_weight_2"], a["norm_bias_2"],
        a["ffn_weight_1"], a["ffn_bias_1"], a["ffn_weight_2"], a["ffn_bias_2"],
        const(None, T.NoneT), const(None, T.NoneT),
    ]
    operands = {v for node in m.nodes for v in node.inputs}
    fused = graph.replace_node(
        last, "aten::_transformer_encoder_layer_fwd", inputs, schema=ENCODER_LAYER,
        remove=sorted(m.nodes, key=lambda n: n.owning_block.nodes.index(n), reverse=True))
    _drop_unused_scalars(operands)
    return fused.output


def _drop_unused_scalars(values: set[Value]) -> None:
    """Remove the size arithmetic and constants only the fused pattern used."""
    work = list(values)
    while work:
        value = work.pop()
        node = value.node
        if value.uses or node.owning_block is None \
                or (node.schema or node.kind) not in _PURE_SCALARS \
                or any(o.uses for o in node.outputs):
            continue
        inputs = list(node.inputs)
        node.destroy()
        work.extend(inputs)
