"""``compile_recurrent``: LSTM and GRU layers with constant weights → Inductor-compiled ones.

An ``aten::lstm.input`` / ``aten::gru.input`` node becomes ``static_runtime::lstm`` /
``static_runtime::gru`` (same arguments, same outputs; ``ops/native/recurrent.py`` compiles
the recurrence per input signature and runs ATen's kernel for anything else) when its
weights are a constant list of float32 CPU tensors shaped as a plain layer's (no LSTM
projection), and ``has_biases``, ``num_layers``, ``dropout``, ``train``, ``bidirectional``
and ``batch_first`` are constants with ``train`` false. Bidirectional layers and any number
of layers are accepted. The option ``StaticModuleOptions.fusion_compiler`` switches it on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node
from static_runtime.ir.own_ops import GRU, LSTM
from static_runtime.passes.constant_propagation import constant_value

#: Gate blocks per weight matrix (PyTorch's layout: LSTM i, f, g, o; GRU r, z, n).
GATES = {"lstm": 4, "gru": 3}

_TARGETS = {
    str(torch.ops.aten.lstm.input._schema): ("lstm", "static_runtime::lstm", LSTM),
    str(torch.ops.aten.gru.input._schema): ("gru", "static_runtime::gru", GRU),
}


def constant_weights(params: Any) -> list[torch.Tensor] | None:
    """``params`` as a list of float32 CPU strided tensors, or None if it is not that."""
    if not isinstance(params, (list, tuple)) or not params:
        return None
    if not all(isinstance(w, torch.Tensor) and w.dtype is torch.float32
               and w.layout == torch.strided and w.device.type == "cpu"
               and not w.requires_grad for w in params):
        return None
    return list(params)


def weights_fit(mode: str, weights: Sequence[torch.Tensor], has_biases: bool,
                num_layers: int, bidirectional: bool) -> str | None:
    """None if ``weights`` are the flat weights of a plain ``mode`` layer (no projection)
    with these settings, else what does not fit."""
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if num_layers < 1 or len(weights) != num_layers * dirs * per:
        return (f"{len(weights)} weight tensors for {num_layers} layer(s), "
                f"{dirs} direction(s), biases {has_biases} (a projection?)")
    w_hh = weights[1]
    if w_hh.dim() != 2 or w_hh.shape[0] % GATES[mode]:
        return f"recurrent weight of shape {tuple(w_hh.shape)}"
    hidden = w_hh.shape[0] // GATES[mode]
    rows = GATES[mode] * hidden
    for k in range(num_layers * dirs):
        w_ih, w_hh, *biases = weights[k * per:(k + 1) * per]
        inputs = w_ih.shape[1] if w_ih.dim() == 2 else -1
        if (w_ih.dim() != 2 or w_ih.shape[0] != rows
                or (k >= dirs and inputs != hidden * dirs)
                or tuple(w_hh.shape) != (rows, hidden)
                or any(tuple(b.shape) != (rows,) for b in biases)):
            return f"weights of layer {k // dirs} do not have the shapes of hidden size {hidden}"
    return None


def compile_recurrent(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        target = _TARGETS.get(node.schema)
        if target is not None and node.owning_block is not None and _accepts(node, target[0]):
            _rewrite(graph, node, target[1], target[2])
            changed = True
    return changed


def _constant_list(node: Node) -> list[torch.Tensor] | None:
    """The weights, if the ``params`` input is a constant list of float32 CPU tensors or a
    ``prim::ListConstruct`` of constant ones."""
    params = node.inputs[2]
    known, value = constant_value(params)
    if not known and params.node.kind == "prim::ListConstruct":
        items = [constant_value(v) for v in params.node.inputs]
        known, value = all(k for k, _ in items), [v for _, v in items]
    return constant_weights(value) if known else None


def _accepts(node: Node, mode: str) -> bool:
    flags = [constant_value(v) for v in node.inputs[3:]]
    if not all(known for known, _ in flags):
        return False
    has_biases, num_layers, _dropout, train, bidirectional, batch_first = (v for _, v in flags)
    if not (type(has_biases) is bool and type(num_layers) is int and train is False
            and type(bidirectional) is bool and type(batch_first) is bool):
        return False
    weights = _constant_list(node)
    return weights is not None and weights_fit(mode, weights, has_biases, num_layers,
                                               bidirectional) is None


def _rewrite(graph: Graph, old: Node, kind: str, schema: str) -> None:
    inputs = list(old.inputs)
    if not constant_value(inputs[2])[0]:
        # one constant list, which the implementation recognises when it is passed
        inputs[2] = graph.constant(_constant_list(old), T.ListType(T.Tensor), before=old)
    new = graph.create(kind, inputs, output_types=[o.type for o in old.outputs])
    new.schema = schema
    new.source = old.source
    new.meta = dict(old.meta)
    new.insert_before(old)
    names = [o.name for o in old.outputs]
    for before, after in zip(old.outputs, new.outputs):
        before.replace_all_uses_with(after)
    old.destroy()
    for value, name in zip(new.outputs, names):
        if name is not None:
            value.set_name(name)
