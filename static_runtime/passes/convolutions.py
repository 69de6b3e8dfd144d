"""``plain_convolutions``: a convolution as ``torch.jit.trace`` records it — ``aten::_convolution``
(or ``aten::convolution``) with its transposition and cuDNN flags — becomes the
``aten::conv1d``/``conv2d``/``conv3d`` a scripted model has, the form the later passes know
(``fold_batchnorm``, ``fuse_convolution``, ``channels_last``, ``causal_conv1d``). A traced
ResNet or RegNet from ``transformers`` kept every batch norm and ran ATen's convolutions in
eager's layout.

``conv2d(x, w, b, stride, padding, dilation, groups)`` is ``_convolution(x, w, b, stride,
padding, dilation, False, [0, 0], groups, benchmark, deterministic, cudnn_enabled,
allow_tf32)`` with the last four taken from the process's cuDNN settings, which CPU kernels
do not read: for the inputs ``_convolution`` takes, the same computation. ``conv2d`` also
takes an unbatched input, which ``_convolution`` refuses: the rewritten graph checks the
input's rank first and raises as the traced model does (a check the code generated per
input signature resolves once). Rewritten where that holds: not transposed, output padding
all zero, and a constant weight of rank 3, 4 or 5, which picks the operator.
"""

from __future__ import annotations

import torch

from static_runtime.ir.graph import Graph, Node
from static_runtime.passes.constant_propagation import constant_value
from static_runtime.passes.fold import check_rank

_aten = torch.ops.aten
_TRACED = str(_aten._convolution.default._schema)
_GENERIC = str(_aten.convolution.default._schema)
#: weight rank → (kind, schema) of the plain operator
_PLAIN = {rank: (f"aten::{op._schema.name.split('::')[1]}", str(op._schema))
          for rank, op in ((3, _aten.conv1d.default), (4, _aten.conv2d.default),
                           (5, _aten.conv3d.default))}


def plain_convolutions(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.schema in (_TRACED, _GENERIC):
            changed |= _rewrite(graph, node)
    return changed


def _rewrite(graph: Graph, node: Node) -> bool:
    known_w, weight = constant_value(node.inputs[1])
    known_t, transposed = constant_value(node.inputs[6])
    known_p, output_padding = constant_value(node.inputs[7])
    if not (known_w and known_t and known_p and isinstance(weight, torch.Tensor)
            and weight.dim() in _PLAIN and transposed is False
            and isinstance(output_padding, (list, tuple))
            and all(p == 0 for p in output_padding)):
        return False
    kind, schema = _PLAIN[weight.dim()]
    # input, weight, bias, stride, padding, dilation, groups
    inputs = [*node.inputs[:6], node.inputs[8]]
    plain = graph.create(kind, inputs, output_types=[node.output.type])
    plain.schema = schema
    plain.source = node.source
    plain.insert_before(node)
    rank = weight.dim()
    where = f" at {node.source}" if node.source else ""
    check_rank(graph, plain, rank,
               f"the convolution{where} was traced as aten::_convolution, which expects a "
               f"batched {rank}-dimensional input for its {rank}-dimensional weight "
               f"{list(weight.shape)}; got a {{}}-dimensional input", "builtins.RuntimeError",
               node.source)
    name = node.output.name
    node.output.replace_all_uses_with(plain.output)
    node.destroy()
    plain.output.set_name(name)
    return True
