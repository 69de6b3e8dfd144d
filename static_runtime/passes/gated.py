"""``fuse_gated_linear``: a SwiGLU MLP's gate and up projections and their gated product —
LLaMA's, Mistral's, Qwen's, a mixture of experts' experts — become one
``static_runtime::gated_linear`` node (``ir/own_ops.py``). Matched by schema and constants::

    g = aten::linear(x, W_gate, b_gate)      W_gate a constant 2-D tensor, b_gate one or None
    a = aten::silu(g)
    u = aten::linear(x, W_up, b_up)          the same x; W_up of W_gate's shape and dtype
    y = aten::mul.Tensor(a, u)               (either order)

with ``g``, ``a`` and ``u`` used only by the next; in any block (an expert's body behind
``if rows.numel() > 0`` too). ``y`` becomes ``gated_linear(x, W_gate, b_gate, W_up, b_up)``,
whose meaning is that composite (``ops/gated.py``); with ``kernel_choice="measure"`` — the
only option it is made under (``StaticModuleOptions.passes_enabled``) — our kernel, one
product whose epilogue makes the gated values (``ops/ckernels/gemm.c``, ``sr_gemm_gated``),
is timed against the two projections packed into one ATen product, what ``pack_linears``
would have made of them. It runs before ``pack_linears``, which would take the two apart.
"""

from __future__ import annotations

import torch

from static_runtime.ir.graph import Graph, Node
from static_runtime.ir.own_ops import GATED_LINEAR
from static_runtime.passes.constant_propagation import constant_value

_aten = torch.ops.aten
_LINEAR = str(_aten.linear.default._schema)
_SILU = str(_aten.silu.default._schema)
_MUL = str(_aten.mul.Tensor._schema)


def fuse_gated_linear(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is not None and node.schema == _MUL:
            changed |= _fuse(graph, node)
    return changed


def _only_use(node: Node, user: Node) -> bool:
    return len(node.outputs) == 1 and len(node.output.uses) == 1 \
        and node.output.uses[0].user is user


def _fuse(graph: Graph, mul: Node) -> bool:
    for side in (0, 1):
        silu, up = mul.inputs[side].node, mul.inputs[1 - side].node
        if silu.schema != _SILU or up.schema != _LINEAR:
            continue
        gate = silu.inputs[0].node
        if gate.schema != _LINEAR or gate is up or not _only_use(gate, silu) \
                or not _only_use(silu, mul) or not _only_use(up, mul) \
                or gate.inputs[0] is not up.inputs[0]:
            continue
        known = [constant_value(v) for v in (*gate.inputs[1:3], *up.inputs[1:3])]
        if not all(k for k, _ in known):
            continue
        w_gate, b_gate, w_up, b_up = (value for _, value in known)
        if not (_weight(w_gate) and _weight(w_up) and w_gate.shape == w_up.shape
                and w_gate.dtype == w_up.dtype and _bias(b_gate, w_gate) and _bias(b_up, w_up)):
            continue
        fused = graph.replace_node(
            mul, "static_runtime::gated_linear",
            [gate.inputs[0], gate.inputs[1], gate.inputs[2], up.inputs[1], up.inputs[2]],
            schema=GATED_LINEAR, remove=[mul, silu, gate, up])
        fused.source = up.source or mul.source
        return True
    return False


def _weight(w) -> bool:
    return isinstance(w, torch.Tensor) and w.dim() == 2 and w.layout == torch.strided \
        and w.dtype.is_floating_point and not w.is_meta


def _bias(b, w: torch.Tensor) -> bool:
    return b is None or (isinstance(b, torch.Tensor) and b.dim() == 1
                         and b.shape[0] == w.shape[0] and b.dtype == w.dtype)
