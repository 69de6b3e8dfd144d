"""``causal_conv1d``: a 1-D convolution padded on both sides whose last outputs are cut off
(a temporal convolutional network's "chomp") → the same convolution on the input padded on
the left only.

Written out, a causal convolution of a TCN or WaveNet-style model is

    y = conv1d(x, w, b, stride=1, padding=p, dilation=d)[:, :, :-p]

which computes ``p`` outputs only to drop them, and hands the next operator a strided view
(the paper's ``Chomp1d`` then makes it contiguous: a copy). With stride 1, output ``i`` of
either form reads the inputs ``i - p ... i - p + d·(k - 1)``, zeros outside ``x``, so

    y = conv1d(constant_pad_nd(x, [p, 0], 0), w, b, stride=1, padding=0, dilation=d)

is the same tensor, contiguous, of exactly the kept length: one small copy of the input in
place of a view, a copy of the output and ``p`` outputs' work (the zoo's TCN: 0.86 × its time
at batch 1, 0.94 × at batch 8). The rewrite needs, from schema and constant facts only: the
convolution's stride ``[1]`` and padding ``[p]``, ``p > 0``, and its output's only use a
``slice`` of the last dimension (2, or -1 of the 3-D result) from 0 (or None) to ``-p`` with
step 1. Anything else is left alone.
"""

from __future__ import annotations

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node
from static_runtime.passes.constant_propagation import constant_value

_CONV1D = str(torch.ops.aten.conv1d.default._schema)
#: what a traced convolution records (stride and padding at the same positions as conv1d's)
_CONVOLUTION = str(torch.ops.aten._convolution.default._schema)
_SLICE = str(torch.ops.aten.slice.Tensor._schema)
_PAD = str(torch.ops.aten.constant_pad_nd.default._schema)
_CONTIGUOUS = str(torch.ops.aten.contiguous.default._schema)
#: The end TorchScript gives a slice ``x[a:]`` (INT64_MAX), as ``None`` does.
_WHOLE = 2**63 - 1


def causal_conv1d(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.schema in (_CONV1D, _CONVOLUTION) and node.owning_block is not None:
            changed |= _rewrite(graph, node)
    return changed


def _rewrite(graph: Graph, conv: Node) -> bool:
    if len(conv.inputs) != (7 if conv.schema == _CONV1D else 13):
        return False
    if conv.schema == _CONVOLUTION and constant_value(conv.inputs[6]) != (True, False):
        return False  # transposed
    known_s, stride = constant_value(conv.inputs[3])
    known_p, padding = constant_value(conv.inputs[4])
    if not (known_s and known_p and list(stride) == [1] and isinstance(padding, (list, tuple))
            and len(padding) == 1 and isinstance(padding[0], int) and padding[0] > 0):
        return False
    pad = padding[0]
    value = conv.output  # through whole slices of other dimensions (``x[:, :, :-p]``)
    chain: list[Node] = []
    while True:
        chomp = value.sole_user()
        if chomp is None or chomp.schema != _SLICE or chomp.inputs[0] is not value \
                or chomp.owning_block is not conv.owning_block:
            return False
        dim, start, end, step = (constant_value(v) for v in chomp.inputs[1:5])
        if not (dim[0] and start[0] and end[0] and step[0] and start[1] in (None, 0)
                and step[1] == 1):
            return False
        if dim[1] in (2, -1) and end[1] == -pad:
            break
        if dim[1] not in (0, 1, -2, -3) or end[1] not in (None, _WHOLE):
            return False
        chain.append(chomp)
        value = chomp.output
    chain.append(chomp)
    # ``.contiguous()`` after the chomp (``Chomp1d``'s): conv1d's 3-D result is contiguous
    after = chomp.output.sole_user()
    if after is not None and after.schema == _CONTIGUOUS and after.inputs[0] is chomp.output \
            and constant_value(after.inputs[1]) == (True, 0) \
            and after.owning_block is conv.owning_block:
        chain.append(after)
    x = conv.inputs[0]
    padded = graph.create("aten::constant_pad_nd",
                          [x, graph.constant([pad, 0], T.ListType(T.Int), before=conv),
                           graph.constant(0, T.Int, before=conv)],
                          output_types=[x.type])
    padded.schema, padded.source = _PAD, conv.source
    padded.insert_before(conv)
    conv.replace_input(0, padded.output)
    conv.replace_input(4, graph.constant([0], T.ListType(T.Int), before=conv))
    last = chain[-1].output
    name = last.name
    last.replace_all_uses_with(conv.output)
    for node in reversed(chain):  # (the whole slices: views of all of it, now of the result)
        node.destroy()
    conv.output.set_name(name)
    return True
