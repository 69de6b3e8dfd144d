"""Fusions into operators PyTorch has fused kernels for (``ops/native/fused.py`` runs them).

``fuse_attention``: ``matmul(softmax(matmul(q, k_t) * s, dim), v)`` — the written-out
attention, with the scaling ``* s``, ``/ s`` (``mul``/``div``, ``.Scalar`` or, as
``torch.export`` records it, ``.Tensor`` with the number as operand) or none — becomes one
``static_runtime::attention`` node, which runs ``scaled_dot_product_attention`` where that is
faster. Only when each intermediate (scores, scaled scores, weights) has that chain as its
only user, all in one block, ``s`` is a constant number and ``softmax`` has no ``dtype``.
With a mask between the scaling and the softmax — ``scores + mask`` (a float mask, as
causal and padding masks are added; ``alpha`` 1), ``scores.masked_fill(mask, -inf)`` or
``torch.where(mask, scores, -inf)`` (a boolean mask) — it becomes
``static_runtime::masked_attention``, which also takes the mask and how it applies. Grouped-
query attention needs nothing more: the key and value heads repeated (``repeat_interleave``,
or ``expand`` + ``reshape`` as Meta's ``repeat_kv``) are the operands the fused node reads.
A ``masked_fill`` with a finite value is left alone (it replaces a score where the fused
kernel would add to it; a row masked entirely would differ), and so is masked attention
whose query is computed anew rather than a view of a projection (``_may_be_head_view``:
rotary embeddings make it contiguous, and there PyTorch's fused kernel was measured slower)
unless kernels are chosen by measurement, where the fused node times ours against its own
default.

``fuse_convolution``: ``conv2d`` with a constant weight and bias, and constant stride,
padding, dilation and groups, becomes ``static_runtime::conv2d_pointwise``, taking a ``relu``
that is its output's only user along — ``relu``, ReLU6 (``relu6``, or ``hardtanh`` with
the constant bounds 0 and 6), ``hardswish`` or ``silu`` (oneDNN runs the pair as one kernel
on a weight reordered once; ``benchmarks/onednn_postops.py``: depthwise convolutions at
MobileNet's sizes take half the time of ``conv2d`` on NCHW tensors). The oneDNN kernel writes channels-last output, and a convolution fed a
channels-last tensor writes channels-last too; the values are the same, the strides are
not. So a convolution is fused only when everything its output flows into — through other
convolutions and element-wise operators that keep the layout — is insensitive to layout:
another convolution, a unary element-wise activation (``relu``, ``hardtanh``,
``hardswish``, ``silu``, ``sigmoid``...), ``add``/``mul`` of tensors, pooling, ``size``, or an
``adaptive_avg_pool2d`` to 1 × 1 (whose output has the same strides either way). A
convolution whose region reaches a graph output, a view, a reshape or anything else keeps
``conv2d``; its output's layout is then what it always was.

``fuse_linear_pointwise``: ``linear`` with a constant float32 weight of at least
``LINEAR_MIN_WEIGHT`` elements (512 × 512) and a constant bias becomes
``static_runtime::linear_pointwise``, taking the activation that is its output's only user
along (``relu``, ``gelu``, ``tanh``, ``sigmoid``, ``hardswish``, ReLU6, ``silu``). It runs
oneDNN's fused linear from 8 rows on and ``addmm`` + the activation below that (see
``ops/native/fused.py``); its output is contiguous either way, as ``linear``'s is, so no
layout rule is needed. Smaller weights keep ``linear``: at their sizes oneDNN's ~20 µs fixed
cost per call is paid back only at hundreds of rows (``benchmarks/onednn_postops.py
--sweep``).
"""

from __future__ import annotations

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import PARAM, RETURN, Graph, Node, Value
from static_runtime.ir.own_ops import (
    ATTENTION,
    CONV2D_POINTWISE,
    LINEAR_POINTWISE,
    MASKED_ATTENTION,
)
from static_runtime.passes.constant_propagation import constant_value

_MATMUL = "aten::matmul(Tensor self, Tensor other) -> Tensor"
_SOFTMAX = "aten::softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"
_SCALE = {
    "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor": False,
    "aten::div.Scalar(Tensor self, Scalar other) -> Tensor": True,
    # torch.export records ``scores * s`` as mul.Tensor with the number as ``other``
    "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor": False,
    "aten::div.Tensor(Tensor self, Tensor other) -> Tensor": True,
}
_CONV2D = str(torch.ops.aten.conv2d.default._schema)


def _schemas(*names: str) -> set[str]:
    return {str(getattr(torch.ops.aten, n).default._schema) for n in names}


#: Activations a fused convolution or linear takes along (oneDNN's post-op; our kernels'
#: epilogue): schema → ``attr``. ``hardtanh`` only with the constant bounds (0, 6), i.e.
#: ReLU6, and ``gelu`` by its approximation (see ``_postop_attr``).
_POSTOPS = {
    **dict.fromkeys(_schemas("relu", "relu_"), "relu"),
    **dict.fromkeys(_schemas("relu6", "relu6_", "hardtanh", "hardtanh_"), "relu6"),
    **dict.fromkeys(_schemas("hardswish", "hardswish_"), "hardswish"),
    **dict.fromkeys(_schemas("silu", "silu_"), "silu"),
    **dict.fromkeys(_schemas("gelu", "gelu_"), "gelu"),
    **dict.fromkeys(_schemas("tanh", "tanh_"), "tanh"),
    **dict.fromkeys(_schemas("sigmoid", "sigmoid_"), "sigmoid"),
}


# --------------------------------------------------------------------------- attention


def fuse_attention(graph: Graph, any_query: bool = False) -> bool:
    """``any_query``: masked attention is fused whatever makes its query (kernels chosen by
    measurement: the fused node times ours against its own default, which includes the
    written-out form); else only where the query may be a head view of a projection
    (``_may_be_head_view``)."""
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is not None and node.schema == _MATMUL:
            changed |= _fuse_attention_at(graph, node, any_query)
    return changed


def _only_use_is(value: Value, node: Node) -> bool:
    return len(value.uses) == 1 and value.uses[0].user is node \
        and value.node.owning_block is node.owning_block


def _fuse_attention_at(graph: Graph, last: Node, any_query: bool) -> bool:
    weights, value = last.inputs
    softmax = weights.node
    if softmax.schema != _SOFTMAX or not _only_use_is(weights, last):
        return False
    known_dim, dim = constant_value(softmax.inputs[1])
    known_dtype, dtype = constant_value(softmax.inputs[2])
    if not (known_dim and type(dim) is int and known_dtype and dtype is None):
        return False
    scores = softmax.inputs[0]
    chain = [last, softmax]
    scores_user = softmax
    masking = _mask_step(scores.node)
    if masking is not None:
        if not _only_use_is(scores, softmax):
            return False
        step, mask, mask_kind = masking
        chain.append(step)
        scores_user, scores = step, _masked_operand(step, mask_kind, mask)
    scale, divide = None, False
    if scores.node.schema in _SCALE:
        scaling = scores.node
        known, scale = constant_value(scaling.inputs[1])
        if not (known and type(scale) in (int, float)) or not _only_use_is(scores, scores_user):
            return False
        divide = _SCALE[scaling.schema]
        chain.append(scaling)
        scores_user, scores = scaling, scaling.inputs[0]
    first = scores.node
    if first.schema != _MATMUL or not _only_use_is(scores, scores_user):
        return False
    chain.append(first)
    query, key_t = first.inputs
    if masking is not None and not any_query and not _may_be_head_view(query):
        return False

    consts = [graph.constant(scale, T.Float if type(scale) is float else T.Int, before=last)
              if scale is not None else graph.constant(None, T.NoneT, before=last),
              graph.constant(divide, T.Bool, before=last),
              graph.constant(dim, T.Int, before=last)]
    if masking is None:
        graph.replace_node(last, "static_runtime::attention", [query, key_t, value, *consts],
                           schema=ATTENTION, remove=chain)  # chain: users before producers
    else:
        kind_value = graph.constant(mask_kind, T.Str, before=last)
        graph.replace_node(last, "static_runtime::masked_attention",
                           [query, key_t, value, *consts, mask, kind_value],
                           schema=MASKED_ATTENTION, remove=chain)
    return True


_ADDS = ("static_runtime::add.Tensor(Tensor self, Tensor other) -> Tensor",
         "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
_MASKED_FILL = "aten::masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor"
_WHERE = "aten::where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> Tensor"


def _mask_step(node: Node) -> tuple[Node, Value, str] | None:
    """``(node, mask, kind)`` if ``node`` masks attention scores: ``scores + mask`` or ``mask +
    scores`` (kind ``"add"``, ``alpha`` 1), ``scores.masked_fill(mask, -inf)`` (``"fill"``), or
    ``where(mask, scores, -inf)`` (``"keep"``). Another fill value is not taken: a finite one
    replaces a masked score where ``scaled_dot_product_attention`` would add to it.
    For ``"add"`` the scores are the operand that is not returned as the mask; which one that
    is, is decided by what produces it (``_masked_operand``)."""
    if node.schema in _ADDS:
        if node.schema == _ADDS[1]:
            known, alpha = constant_value(node.inputs[2])
            if not (known and type(alpha) in (int, float) and alpha == 1):
                return None
        a, b = node.inputs[:2]
        # the scores are the operand a scaling or the first matmul produced
        mask = b if _scores_like(a) else a if _scores_like(b) else None
        return None if mask is None else (node, mask, "add")
    if node.schema == _MASKED_FILL:
        known, fill = constant_value(node.inputs[2])
        if known and type(fill) is float and fill == float("-inf"):
            return node, node.inputs[1], "fill"
        return None
    if node.schema == _WHERE:
        known, fill = constant_value(node.inputs[2])
        if known and type(fill) is float and fill == float("-inf"):
            return node, node.inputs[0], "keep"
    return None


#: Views that can give a query heads inside its rows (``(batch, L, heads, d)`` seen as
#: ``(batch, heads, L, d)``), the layout where the fused kernel beats the written-out form.
_HEAD_VIEWS = frozenset({"aten::transpose.int", "aten::permute"})


def _may_be_head_view(query: Value) -> bool:
    """Whether ``query`` may be laid out as views of projections are: a graph input, or a
    transposed or permuted view. A query computed anew (rotary embeddings, a copy) is a
    contiguous ``(batch, heads, L, d)`` tensor, where the fused kernel loses to the written-out
    form with an added mask (1.0–1.3 ×) and mostly with a boolean one
    (``benchmarks/attention_forms.py --layout contiguous``), and where the fused node, running
    the written-out form, would allocate what the unfused nodes write into the arena."""
    return query.node.kind == PARAM or query.node.schema_name() in _HEAD_VIEWS


def _scores_like(value: Value) -> bool:
    return value.node.schema == _MATMUL or value.node.schema in _SCALE


def _masked_operand(step: Node, kind: str, mask: Value) -> Value:
    if kind == "add":
        a, b = step.inputs[:2]
        return a if b is mask else b
    return step.inputs[0] if kind == "fill" else step.inputs[1]


# --------------------------------------------------------------------------- convolution

#: Element-wise operators whose output takes its layout from its inputs.
_KEEPS_LAYOUT = {
    "aten::relu", "aten::relu_", "static_runtime::add", "aten::add", "aten::add_",
    "aten::mul", "aten::mul_", "static_runtime::sub", "aten::sub", "aten::sub_",
    "aten::max_pool2d", "aten::avg_pool2d", "aten::conv2d",
    # unary element-wise: the output is laid out as the input
    "aten::relu6", "aten::relu6_", "aten::hardtanh", "aten::hardtanh_", "aten::hardswish",
    "aten::hardswish_", "aten::silu", "aten::silu_", "aten::hardsigmoid", "aten::hardsigmoid_",
    "aten::sigmoid", "aten::sigmoid_", "aten::tanh", "aten::tanh_",
}
#: Operators whose result does not depend on their input's layout.
_LAYOUT_BLIND = {"aten::size", "aten::dim", "aten::numel"}


def fuse_convolution(graph: Graph) -> bool:
    candidates = [n for n in graph.walk() if _fusable_conv(n)]
    fused = set(candidates)
    while True:
        escaped = _escaping_sources(fused)
        if not escaped:
            break
        fused -= escaped
    for conv in candidates:
        if conv in fused:
            _rewrite_conv(graph, conv)
    return bool(fused)


def _fusable_conv(node: Node) -> bool:
    if node.schema != _CONV2D:
        return False
    known_w, weight = constant_value(node.inputs[1])
    known_b, bias = constant_value(node.inputs[2])
    if not (known_w and isinstance(weight, torch.Tensor) and weight.dim() == 4
            and weight.dtype is torch.float32 and not weight.is_mkldnn):
        return False
    if not known_b or not (bias is None or isinstance(bias, torch.Tensor)):
        return False
    return all(constant_value(v)[0] for v in node.inputs[3:])


def _escaping_sources(fused: set[Node]) -> set[Node]:
    """The fused convolutions whose channels-last output may reach a layout-sensitive use."""
    origins: dict[Value, set[Node]] = {conv.output: {conv} for conv in fused}
    work = list(origins)
    escaped: set[Node] = set()
    while work:
        value = work.pop()
        sources = origins[value]
        for use in value.uses:
            user = use.user
            if user in fused and use.index == 0:
                continue
            if user.kind in _LAYOUT_BLIND or _pools_to_one(user):
                continue
            if user.kind in _KEEPS_LAYOUT and user.kind != RETURN:
                for out in user.outputs:
                    before = origins.setdefault(out, set())
                    if not sources <= before:
                        before |= sources
                        work.append(out)
                continue
            escaped |= sources
    return escaped


def _pools_to_one(node: Node) -> bool:
    if node.kind != "aten::adaptive_avg_pool2d":
        return False
    known, size = constant_value(node.inputs[1])
    return known and size in ([1, 1], (1, 1), 1, [1])


def _postop_attr(node: Node) -> str | None:
    """The post-op ``attr`` that computes ``node`` on a convolution's or a linear's output,
    or None."""
    attr = _POSTOPS.get(node.schema)
    if attr == "gelu":
        if len(node.inputs) == 1:  # the default left out
            return "gelu"
        known, approximate = constant_value(node.inputs[1])
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(approximate) if known else None
    if attr == "relu6" and node.kind.startswith("aten::hardtanh"):
        if len(node.inputs) != 3:
            return None
        known_lo, lo = constant_value(node.inputs[1])
        known_hi, hi = constant_value(node.inputs[2])
        if not (known_lo and known_hi and type(lo) in (int, float) and type(hi) in (int, float)
                and lo == 0 and hi == 6):
            return None
    return attr


def _rewrite_conv(graph: Graph, conv: Node) -> None:
    out = conv.output
    act = out.sole_user()
    attr = _postop_attr(act) if act is not None and act.owning_block is conv.owning_block \
        else None
    fuse_act = attr is not None and act.inputs[0] is out
    attr_value = graph.constant(attr if fuse_act else "none", T.Str, before=conv)
    fused = graph.replace_node(act if fuse_act else conv, "static_runtime::conv2d_pointwise",
                               [*conv.inputs, attr_value], schema=CONV2D_POINTWISE,
                               remove=(act, conv) if fuse_act else (conv,))
    fused.source = conv.source


# --------------------------------------------------------------------------- linear

_LINEAR = "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"

#: Fewest weight elements (out × in features) for which ``linear`` is rewritten.
LINEAR_MIN_WEIGHT = 512 * 512


def fuse_linear_pointwise(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is not None and node.schema == _LINEAR and _fusable_linear(node):
            _rewrite_linear(graph, node)
            changed = True
    return changed


def fuse_linear_activation(graph: Graph) -> bool:
    """``linear`` with a constant float32 weight of any size and the activation that is its
    output's only user → ``static_runtime::linear_pointwise``, the pair as one node (weights
    of ``LINEAR_MIN_WEIGHT`` or more were taken by ``fuse_linear_pointwise`` already). Only
    under ``kernel_choice="measure"``: the measured product applies the activation in its
    kernel's epilogue where ours wins (one call instead of two: a 1 × 64 · 64 × 64 product
    and its ReLU take 0.4 µs as one call, 2.0 as two), and ``addmm`` + the activation in
    place, what the two nodes ran, where ATen's wins. GPT-2's ``Conv1D`` (``addmm`` of a
    constant weight, viewed back, then the activation) too: ``_fuse_addmm_activation``."""
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is not None and node.schema == _ADDMM:
            changed |= _fuse_addmm_activation(graph, node)
            continue
        if node.owning_block is None or node.schema != _LINEAR \
                or not _fusable_linear(node, min_weight=1):
            continue
        act = node.output.sole_user()
        if act is not None and act.owning_block is node.owning_block \
                and act.inputs[0] is node.output and _postop_attr(act) is not None:
            _rewrite_linear(graph, node)
            changed = True
    return changed


_ADDMM = str(torch.ops.aten.addmm.default._schema)
_VIEWS = (str(torch.ops.aten.view.default._schema), str(torch.ops.aten.reshape.default._schema))


def _two_dim_view(value: Value) -> bool:
    """Whether ``value`` is a view or reshape to a list of two sizes (``x.view(-1, d)``)."""
    node = value.node
    if node.schema not in _VIEWS:
        return False
    sizes = node.inputs[1]
    if sizes.node.kind == "prim::ListConstruct":
        return len(sizes.node.inputs) == 2
    known, value_ = constant_value(sizes)
    return known and isinstance(value_, (list, tuple)) and len(value_) == 2


def _fuse_addmm_activation(graph: Graph, addmm: Node) -> bool:
    """GPT-2's ``Conv1D``: ``act(view(addmm(b, x.view(-1, d), W), sizes))`` with a constant
    (K, N) ``W`` and (N,) ``b``, β = α = 1 → ``view(linear_pointwise(x2, Wᵀ, b, act), sizes)``
    (the activation is element-wise, so it commutes with the view; ``Wᵀ`` a new constant).
    ``x2`` must be a view to two sizes, so that ``addmm``'s 2-D requirement holds as before."""
    if len(addmm.inputs) != 5 or any(constant_value(v) != (True, 1)
                                     for v in addmm.inputs[3:5]):
        return False
    (kb, bias), (kw, weight) = constant_value(addmm.inputs[0]), constant_value(addmm.inputs[2])
    if not (kb and kw and isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
            and weight.dim() == 2 and bias.dim() == 1 and bias.shape[0] == weight.shape[1]
            and weight.dtype is torch.float32 and bias.dtype is torch.float32
            and weight.layout == torch.strided and bias.layout == torch.strided
            and _two_dim_view(addmm.inputs[1])):
        return False
    view = addmm.output.sole_user()
    if view is None or view.owning_block is not addmm.owning_block:
        return False
    act = view
    if view.schema in _VIEWS and view.inputs[0] is addmm.output:
        act = view.output.sole_user()
    else:
        view = None
    if act is None or act.owning_block is not addmm.owning_block \
            or act.inputs[0] is not (view or addmm).output:
        return False
    attr = _postop_attr(act)
    if attr is None:
        return False
    weight_t = graph.constant(weight.detach().t().contiguous(), T.Tensor, before=addmm)
    fused = graph.create("static_runtime::linear_pointwise", [
        addmm.inputs[1], weight_t, addmm.inputs[0],
        graph.constant(attr, T.Str, before=addmm)], output_types=[addmm.output.type])
    fused.schema, fused.source = LINEAR_POINTWISE, addmm.source
    fused.insert_before(addmm)
    name = act.output.name
    if view is not None:
        view.replace_input(0, fused.output)
        act.output.replace_all_uses_with(view.output)
        act.destroy()
        view.output.set_name(name)
    else:
        act.output.replace_all_uses_with(fused.output)
        act.destroy()
        fused.output.set_name(name)
    addmm.destroy()
    return True


def _fusable_linear(node: Node, min_weight: int = LINEAR_MIN_WEIGHT) -> bool:
    if len(node.inputs) != 3:  # (an exported graph may leave the default bias out)
        return False
    known_w, weight = constant_value(node.inputs[1])
    known_b, bias = constant_value(node.inputs[2])
    if not (known_w and isinstance(weight, torch.Tensor) and weight.dim() == 2
            and weight.dtype is torch.float32 and weight.layout == torch.strided
            and weight.numel() >= min_weight):
        return False
    return known_b and (bias is None or (isinstance(bias, torch.Tensor) and bias.dim() == 1
                                         and bias.dtype is torch.float32
                                         and bias.layout == torch.strided))


def _rewrite_linear(graph: Graph, linear: Node) -> None:
    out = linear.output
    act = out.sole_user()
    attr = _postop_attr(act) \
        if act is not None and act.owning_block is linear.owning_block \
        and act.inputs[0] is out else None
    attr_value = graph.constant(attr or "none", T.Str, before=linear)
    fused = graph.replace_node(act if attr else linear, "static_runtime::linear_pointwise",
                               [*linear.inputs, attr_value], schema=LINEAR_POINTWISE,
                               remove=(act, linear) if attr else (linear,))
    fused.source = linear.source
