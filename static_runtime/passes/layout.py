"""``channels_last``: a conv net's activations kept in channels-last memory from convolution
to convolution, converted back once where eager's layout can be seen.

A fused convolution (``static_runtime::conv2d_pointwise``, oneDNN on a prepacked weight)
writes channels-last output; so does ATen's ``conv2d`` (and ``conv_transpose2d``) given a
channels-last input. ``fuse_convolution`` on its own only fuses a convolution whose output
reaches layout-insensitive uses; this pass instead makes every fusable ``conv2d`` of the
graph's top level a *seed* and grows a *region* of values from the seeds' outputs, through
operators whose result has the same values whatever their inputs' strides and whose output
follows their input's memory format (``PRESERVE``: convolutions, batch norm, pooling,
upsampling, element-wise unary and binary operators, concatenation, ``mean``/``sum`` with
``keepdim``), in any block; a value an ``if`` branch returns makes the ``if``'s output part
of the region (scripted ``interpolate`` branches on the rank). Inside the region the values
are what eager computes, only laid out channels-last; what could see the difference is an
*exit*:

* a graph output, a loop's carried value, and every operator not listed here (a
  ``view``, ``reshape`` or ``flatten`` of the 4-D tensor, ``contiguous``, a slice...) gets
  the value through ``static_runtime::layout_as(value, like)``: the value in the memory
  format eager gives a convolution's output for an input like ``like`` (the seed's input;
  channels-last if that is a channels-last, non-contiguous 4-D tensor, else contiguous) —
  a no-op when it already is, otherwise one copy;
* ``SINK`` uses need nothing: their results do not depend on the input's strides, and
  their outputs are laid out the same either way (``size``, ``dim``, ``layer_norm``,
  ``linear``, ``mean``/``sum`` without ``keepdim``; ``benchmarks/channels_last.py`` checks
  strides against eager);
* a ``permute`` whose every use is a ``SINK`` (ConvNeXt's NCHW → NHWC before its layer
  norm: on a channels-last tensor that permute is already contiguous) needs nothing either.

Decided by these schema facts only, never by model. A write is the one case a conversion
could change meaning: an in-place operator at an exit would write the copy, not the value,
and a write after an exit (through any alias, by the alias analysis) would reach eager's view
of the value but not our copy. A seed whose region has such an exit is left out, with every
seed sharing its region; an element-wise in-place operator inside the region is fine.
"""

from __future__ import annotations

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import RETURN, Graph, Node, Value
from static_runtime.ir.own_ops import LAYOUT_AS
from static_runtime.passes.alias import AliasDb
from static_runtime.passes.constant_propagation import constant_value
from static_runtime.passes.fusion import _fusable_conv, _rewrite_conv

#: Converts an activation at a region's exit (``ops/native/layout.py`` runs it).

_FUSED_CONV = "static_runtime::conv2d_pointwise"

UNARY = ("relu", "relu6", "hardtanh", "hardswish", "hardsigmoid", "silu", "sigmoid", "tanh",
         "gelu", "elu", "leaky_relu", "clamp", "clamp_min", "clamp_max", "neg", "abs",
         "exp", "sqrt", "rsqrt", "dropout", "mish")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")

#: Operators whose output takes the memory format of their (first) input, and the input
#: positions at which a region value may come in (None: every tensor position).
PRESERVE: dict[str, tuple[int, ...] | None] = {
    **{f"aten::{op}": (0,) for op in UNARY},
    **{f"aten::{op}_": (0,) for op in UNARY},
    **{f"aten::{op}": (0, 1) for op in BINARY},
    **{f"aten::{op}_": (0,) for op in BINARY},
    "static_runtime::add": (0, 1), "static_runtime::sub": (0, 1),
    "aten::conv2d": (0,), "aten::conv_transpose2d": (0,),
    "aten::batch_norm": (0,), "aten::max_pool2d": (0,), "aten::avg_pool2d": (0,),
    "aten::adaptive_avg_pool2d": (0,), "prim::VarConcat": None, "aten::where": (1, 2),
    # views and a pad whose result follows the input's strides (``conv1d_as_2d``'s (N, C, 1, L)
    # activations; a 3-D value squeezed from a channels-last one is (N, L, C) in memory)
    "aten::unsqueeze": (0,), "aten::squeeze": (0,), "aten::constant_pad_nd": (0,),
    # ``interpolate``, scripted, branches on the rank: every branch's operator
    **{f"aten::upsample_{mode}": (0,) for mode in (
        "nearest1d", "nearest2d", "nearest3d", "linear1d", "bilinear2d", "bicubic2d",
        "trilinear3d")},
}

#: Operators whose result is the same, strides included, whatever their input's strides.
SINK = frozenset({
    "aten::size", "aten::dim", "aten::numel", "aten::len", "prim::dtype", "prim::device",
    "aten::layer_norm", "aten::linear", "static_runtime::linear_pointwise",
    _FUSED_CONV,  # (channels-last output, whatever its input's layout)
})
#: In-place binaries whose second argument is only read.
_READ_OTHER = frozenset(f"aten::{op}_" for op in BINARY)
#: Reductions that keep the layout with ``keepdim`` and end it without (argument 2).
_REDUCTIONS = frozenset({"aten::mean", "aten::sum", "aten::amax"})


def channels_last(graph: Graph) -> bool:
    top = graph.block
    # (a fused convolution already there writes channels-last whatever its input: nothing to
    # keep for it, and nothing to convert after it; it is a sink of the regions it meets)
    seeds = [n for n in top.nodes if _fusable_conv(n)]
    if not seeds:
        return False
    kept = set(seeds)
    aliases = AliasDb(graph)
    while True:
        region, exits = _grow(kept)
        unsafe = {seed for value, user, index in exits
                  if _writes(user, index) or aliases.is_written_after(value, user)
                  for seed in region[value][1]}
        if not unsafe:
            break
        kept -= unsafe
    if not kept:
        return False
    _insert_exits(graph, region, exits)
    for conv in seeds:
        if conv in kept:
            _rewrite_conv(graph, conv)
    return True


def _grow(seeds: set[Node]
          ) -> tuple[dict[Value, tuple[Value, set[Node]]], list[tuple[Value, Node, int]]]:
    """The region (value → (its seed's input, the seeds it comes from)) and the exit uses
    ``(value, user, index)``."""
    region: dict[Value, tuple[Value, set[Node]]] = {}
    for conv in seeds:
        region[conv.output] = (conv.inputs[0], {conv})
    work = list(region)
    exits: list[tuple[Value, Node, int]] = []
    while work:
        value = work.pop()
        like, origins = region[value]
        for use in value.uses:
            user = use.user
            action = _classify(user, use.index)
            if action == "sink":
                continue
            if action == "exit":
                exits.append((value, user, use.index))
                continue
            out = user.owning_block.owning_node.outputs[use.index] if action == "branch" \
                else user.outputs[0]
            if out in region:
                before = region[out][1]
                if origins <= before:
                    continue
                region[out] = (region[out][0], before | origins)
            else:
                region[out] = (like, set(origins))
            work.append(out)
    return region, exits


def _classify(user: Node, index: int) -> str:
    """``"sink"``, ``"exit"``, ``"preserve"`` or ``"branch"`` (an ``if``'s branch returns it:
    the ``if``'s output joins the region) for a region value at ``user.inputs[index]``."""
    kind = user.kind
    if kind == RETURN:
        owner = user.owning_block.owning_node
        return "branch" if owner is not None and owner.kind == "prim::If" else "exit"
    if kind in SINK:
        return "sink"
    if kind in _READ_OTHER and index != 0:
        return "sink"
    if kind in _REDUCTIONS and index == 0 and len(user.inputs) >= 3:
        known, keepdim = constant_value(user.inputs[2])
        if known and keepdim is False:
            return "sink"
        if known and keepdim is True and _single_tensor_output(user):
            return "preserve"
        return "exit"
    if kind == "aten::permute" and index == 0 and all(
            u.user.kind in SINK for u in user.output.uses):
        return "sink"
    if kind in PRESERVE and _single_tensor_output(user):
        positions = PRESERVE[kind]
        if positions is None:
            if kind == "prim::VarConcat" and index < len(user.inputs) - 1:
                return "preserve"
        elif index in positions:
            return "preserve"
    return "exit"


def _single_tensor_output(node: Node) -> bool:
    return len(node.outputs) == 1 and isinstance(node.outputs[0].type, T.TensorType)


def _writes(node: Node, index: int) -> bool:
    if not node.schema:
        return node.kind != RETURN and not node.kind.startswith("prim::")
    args = S.parse(node.schema).arguments
    return index < len(args) and args[index].is_write


def _insert_exits(graph: Graph, region: dict[Value, tuple[Value, set[Node]]],
                  exits: list[tuple[Value, Node, int]]) -> None:
    """One ``layout_as`` per region value and block it leaves the region in, before its first
    exit use there; every exit use of that block reads it."""
    converted: dict[tuple[Value, int], Value] = {}
    for value, user, index in sorted(exits, key=lambda e: e[1]._position()):
        block = user.owning_block
        key = (value, id(block))
        if key not in converted:
            like = region[value][0]
            while like in region:  # a seed fed by the region: its entry's input decides
                like = region[like][0]
            node = graph.create("static_runtime::layout_as", [value, like],
                                output_types=[value.type])
            node.schema = LAYOUT_AS
            node.source = value.node.source
            if user.kind == RETURN:
                block.append(node)
            else:
                node.insert_before(user)
            converted[key] = node.output
        user.replace_input(index, converted[key])
