"""``conv1d_as_2d``: a chain of 1-D convolutions as 2-D convolutions of height 1, so that the
2-D convolutions' machinery — activations kept channels-last from convolution to convolution
(``channels_last``), the measured fused convolution with its activation (``fuse_convolution``)
and residual add (``fuse_conv_residual``) — serves temporal and audio conv nets too.

A 1-D convolution of (N, C, L) activations is the 2-D one of (N, C, 1, L):

    conv1d(x, w, b, [s], [p], [d], g) == conv2d(x.unsqueeze(-2), w.unsqueeze(-2), b,
                                                [1, s], [0, p], [1, d], g).squeeze(-2)

(``-2``: an unbatched (C, L) input is the unbatched (C, 1, L) one). Our 1-D candidates run
our kernel on a channels-last copy of the input and copy its result back (the kernel itself
57–95 µs of a TCN convolution's 229–257 at batch 8 here); as 2-D convolutions in one
channels-last region, the (N, 1, L, C) result of one is the next one's input as it is.

A 1-D convolution is rewritten when it is *chained*: its input comes from, or its output
reaches, another rewritable 1-D convolution through element-wise operators and
``constant_pad_nd`` (the left padding of ``causal_conv1d``). A convolution on its own keeps
its own measured candidates (``ops/conv1d.py``; the strided 1 × 1 one among them). Then, so
that the 2-D passes see the patterns they fuse:

* a ``constant_pad_nd`` of the last dimension feeding only the convolution pads the 4-D
  view (channels-last in, channels-last out; padding ``L`` is padding ``W``);
* an element-wise operator whose every tensor input is such a squeezed result (or a constant
  of at most one dimension, which broadcasts the same way) runs on the 4-D values, and its
  result is squeezed instead: ``relu(conv)`` and ``relu(conv + shortcut)`` become what
  ``fuse_convolution`` and ``fuse_conv_residual`` fuse;
* ``unsqueeze(squeeze(v, -2), -2)`` is ``v`` (its dimension -2 has size 1).

Decided by schema and constant facts only: a constant float32 3-D weight, constant stride,
padding, dilation and groups, the top-level block (where ``channels_last`` seeds regions).
"""

from __future__ import annotations

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.constant_propagation import constant_value
from static_runtime.passes.layout import BINARY, UNARY

_aten = torch.ops.aten
_CONV1D = str(_aten.conv1d.default._schema)
_CONV2D = str(_aten.conv2d.default._schema)
_PAD = str(_aten.constant_pad_nd.default._schema)
_UNSQUEEZE = str(_aten.unsqueeze.default._schema)
_SQUEEZE = str(_aten.squeeze.dim._schema)


def _elementwise_kinds() -> dict[str, tuple[int, ...]]:
    kinds: dict[str, tuple[int, ...]] = {}
    for op in UNARY:
        kinds[f"aten::{op}"] = (0,)
    for op in BINARY:
        kinds[f"aten::{op}"] = (0, 1)
    kinds["static_runtime::add"] = kinds["static_runtime::sub"] = (0, 1)
    return kinds


#: Functional element-wise operators (kind → the positions tensors may come in at).
ELEMENTWISE = _elementwise_kinds()


def conv1d_as_2d(graph: Graph) -> bool:
    top = graph.block
    convs = [n for n in top.nodes if _rewritable(n)]
    if len(convs) < 2:
        return False
    chained = _chained(convs)
    if not chained:
        return False
    squeezed: set[Value] = set()
    for conv in convs:
        if conv in chained:
            squeezed.add(_rewrite(graph, conv))
    _sink_squeezes(graph, squeezed)
    _cancel(squeezed)
    return True


def _rewritable(node: Node) -> bool:
    if node.schema != _CONV1D or len(node.inputs) != 7:
        return False
    known_w, weight = constant_value(node.inputs[1])
    known_b, bias = constant_value(node.inputs[2])
    if not (known_w and isinstance(weight, torch.Tensor) and weight.dim() == 3
            and weight.dtype is torch.float32 and weight.layout == torch.strided
            and not weight.is_meta):
        return False
    if not known_b or not (bias is None or isinstance(bias, torch.Tensor)):
        return False
    for v in node.inputs[3:6]:
        known, value = constant_value(v)
        if not (known and isinstance(value, (list, tuple)) and len(value) == 1
                and isinstance(value[0], int)):
            return False
    known_g, groups = constant_value(node.inputs[6])
    return known_g and isinstance(groups, int)


def _chained(convs: list[Node]) -> set[Node]:
    """The convolutions another one reaches, or that reach another, through element-wise
    operators and pads (union of the pairs found walking forward from each output)."""
    members = set(convs)
    chained: set[Node] = set()
    for conv in convs:
        seen, work = {conv.output}, [conv.output]
        while work:
            value = work.pop()
            for use in value.uses:
                user = use.user
                if user in members and use.index == 0:
                    chained |= {conv, user}
                    continue
                positions = ELEMENTWISE.get(user.kind)
                follows = (positions is not None and use.index in positions) or (
                    user.schema == _PAD and use.index == 0)
                if follows and len(user.outputs) == 1 and user.output not in seen:
                    seen.add(user.output)
                    work.append(user.output)
    return chained


def _last_dim_pad(value: Value, conv: Node) -> Node | None:
    """The ``constant_pad_nd`` of the last dimension making ``value`` (the convolution's
    input), if the convolution is its only use."""
    pad = value.node
    if pad.schema != _PAD or value.sole_user() is not conv \
            or pad.owning_block is not conv.owning_block:
        return None
    known, amounts = constant_value(pad.inputs[1])
    return pad if known and isinstance(amounts, (list, tuple)) and len(amounts) == 2 else None


def _rewrite(graph: Graph, conv: Node) -> Value:
    """Replace ``conv`` by ``squeeze(conv2d(unsqueeze(x)), -2)``; returns the squeeze's output."""
    ints = T.ListType(T.Int)
    x = conv.inputs[0]
    pad = _last_dim_pad(x, conv)
    source = pad.inputs[0] if pad is not None else x
    anchor = pad if pad is not None else conv
    unsqueeze = _node(graph, "aten::unsqueeze", _UNSQUEEZE,
                      [source, graph.constant(-2, T.Int, before=anchor)], anchor)
    x4 = unsqueeze.output
    if pad is not None:
        padded = _node(graph, "aten::constant_pad_nd", _PAD, [x4, *pad.inputs[1:]], pad)
        x4 = padded.output
    _, weight = constant_value(conv.inputs[1])
    _, stride = constant_value(conv.inputs[3])
    _, padding = constant_value(conv.inputs[4])
    _, dilation = constant_value(conv.inputs[5])
    weight4 = graph.constant(weight.detach().unsqueeze(-2).contiguous(),
                             T.TensorType(torch.float32), before=conv)
    conv2d = _node(graph, "aten::conv2d", _CONV2D, [
        x4, weight4, conv.inputs[2], graph.constant([1, stride[0]], ints, before=conv),
        graph.constant([0, padding[0]], ints, before=conv),
        graph.constant([1, dilation[0]], ints, before=conv), conv.inputs[6]], conv)
    squeeze = _node(graph, "aten::squeeze", _SQUEEZE,
                    [conv2d.output, graph.constant(-2, T.Int, before=conv)], conv)
    name = conv.output.name
    conv.output.replace_all_uses_with(squeeze.output)
    conv.destroy()
    if pad is not None:
        pad.destroy()
    squeeze.output.set_name(name)
    return squeeze.output


def _node(graph: Graph, kind: str, schema: str, inputs: list[Value], before: Node) -> Node:
    node = graph.create(kind, inputs, output_types=[T.TensorType()])
    node.schema, node.source = schema, before.source
    node.insert_before(before)
    return node


def _sink_squeezes(graph: Graph, squeezed: set[Value]) -> None:
    """Element-wise operators on squeezed results run on the 4-D values (the result squeezed
    after them), until none is left to move."""
    moved = True
    while moved:
        moved = False
        for value in list(squeezed):
            for use in list(value.uses):
                user = use.user
                if user.owning_block is not value.node.owning_block:
                    continue
                lifted = _lifted_inputs(user, squeezed)
                if lifted is None:
                    continue
                for index, inner in lifted.items():
                    user.replace_input(index, inner)
                user.output.type = T.TensorType()
                squeeze = _squeeze_after(graph, user)
                squeezed.add(squeeze.output)
                moved = True
        for value in [v for v in squeezed if not v.uses]:
            squeezed.discard(value)
            value.node.destroy()


def _lifted_inputs(node: Node, squeezed: set[Value]) -> dict[int, Value] | None:
    """position → the 4-D value to take instead of the squeezed one, when every tensor input
    of the element-wise ``node`` is a squeezed result or a constant of ≤ 1 dimension."""
    positions = ELEMENTWISE.get(node.kind)
    if positions is None or len(node.outputs) != 1 \
            or not isinstance(node.output.type, T.TensorType):
        return None
    lifted: dict[int, Value] = {}
    for index, value in enumerate(node.inputs):
        if not isinstance(value.type, T.TensorType):
            continue
        if index not in positions:
            return None
        if value in squeezed:
            lifted[index] = value.node.inputs[0]
            continue
        known, constant = constant_value(value)
        if not (known and isinstance(constant, torch.Tensor) and constant.dim() <= 1):
            return None
    return lifted or None


def _squeeze_after(graph: Graph, node: Node) -> Node:
    """``squeeze(node's output, -2)`` after ``node``, taking every use of that output."""
    out = node.output
    users = list(out.uses)
    dim = graph.constant(-2, T.Int, before=node)
    squeeze = graph.create("aten::squeeze", [out, dim], output_types=[T.TensorType()])
    squeeze.schema, squeeze.source = _SQUEEZE, node.source
    squeeze.insert_after(node)
    for use in users:
        use.user.replace_input(use.index, squeeze.output)
    return squeeze


def _cancel(squeezed: set[Value]) -> None:
    """``unsqueeze(squeeze(v, -2), -2)`` → ``v``; squeezes left unused are removed."""
    for value in list(squeezed):
        for use in list(value.uses):
            user = use.user
            if user.schema == _UNSQUEEZE and use.index == 0 \
                    and constant_value(user.inputs[1]) == (True, -2):
                user.output.replace_all_uses_with(value.node.inputs[0])
                user.destroy()
        if not value.uses:
            value.node.destroy()
