"""``fuse_rms_norm``: RMS normalisation written out — as LLaMA's and T5's layers write it —
becomes one ``static_runtime::rms_norm`` node (``ir/own_ops.py``); ``fuse_l2_normalize``:
``nn.functional.normalize(x, p=2, dim)`` (four operators) one ``static_runtime::l2_normalize``.

Matched exactly, by schema and constants, anything else left alone::

    p = aten::pow.Tensor_Scalar(x, 2)
    v = aten::mean.dim(p, [-1], keepdim=True, dtype=None)
    e = static_runtime::add.Scalar(v, eps)  |  static_runtime::add.Tensor(v, <0-dim constant>)
    r = aten::rsqrt(e)
    y = aten::mul.Tensor(x, r)                       (either order)
    [y = aten::to.dtype(y, dtype, non_blocking=False, copy=False, memory_format=None)]
    z = aten::mul.Tensor(weight, y)                  (either order; weight a 1-D constant)

with every intermediate used only by the next (the normalised value may also be checked by
``torch.export``'s ``_assert_tensor_metadata``, which then checks ``x``: the same dtype,
device and layout). ``z`` becomes ``rms_norm(x, weight, eps, dtype)``, whose meaning is that composite (``ops/norms.py``); with ``kernel_choice="measure"``
our kernel (``ops/ckernels/norms.c``) is timed against it. The pass runs only with that
option (``StaticModuleOptions.passes_enabled``): without our kernel the fused node would run
the same five operators, outside the arena.

``fuse_l2_normalize`` matches, by schema and constants::

    n = aten::norm.ScalarOpt_dim(x, 2, [d], keepdim=True)   |  (scripted)
        aten::linalg_vector_norm(x, 2, [d], keepdim=True, dtype=None)   (exported)
    c = aten::clamp_min(n, eps)                     (eps a constant number)
    e = aten::expand_as(c, x)                       (optional: ``div`` broadcasts)
    y = aten::div.Tensor(x, e)

every intermediate used only by the next; ``y`` becomes ``l2_normalize(x, d, eps)``, the same
composite (``ops/norms.py``) with our kernel timed against it, under the same option.
"""

from __future__ import annotations

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.ir.own_ops import L2_NORMALIZE, RMS_NORM
from static_runtime.passes.constant_propagation import UNKNOWN as _UNKNOWN
from static_runtime.passes.constant_propagation import constant_or_unknown as constant_value

_aten = torch.ops.aten
_POW = str(_aten.pow.Tensor_Scalar._schema)
_MEAN = str(_aten.mean.dim._schema)
_RSQRT = str(_aten.rsqrt.default._schema)
_MUL = str(_aten.mul.Tensor._schema)
_TO = str(_aten.to.dtype._schema)
_ADDS = ("static_runtime::add.Scalar", "static_runtime::add.Tensor")
_NORMS = (str(_aten.norm.ScalarOpt_dim._schema), str(_aten.linalg_vector_norm.default._schema))
_CLAMP_MIN = str(_aten.clamp_min.default._schema)
_EXPAND_AS = str(_aten.expand_as.default._schema)
_DIV = str(_aten.div.Tensor._schema)
_ASSERT_METADATA = str(_aten._assert_tensor_metadata.default._schema)


def fuse_rms_norm(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.schema == _RSQRT and node.owning_block is not None:
            changed |= _fuse_from(graph, node)
    return changed



def _other(node: Node, value: Value) -> Value | None:
    """The other input of a binary ``mul`` whose one input is ``value``."""
    a, b = node.inputs[:2]
    return b if a is value else a if b is value else None


def _fuse_from(graph: Graph, rsqrt: Node) -> bool:
    add = rsqrt.inputs[0].node
    if add is None or add.schema_name() not in _ADDS or add.output.sole_user() is not rsqrt:
        return False
    eps = constant_value(add.inputs[1])
    if isinstance(eps, torch.Tensor):
        eps = float(eps) if eps.dim() == 0 and eps.is_floating_point() else None
    if type(eps) not in (int, float):  # (also _UNKNOWN)
        return False
    mean = add.inputs[0].node
    if mean is None or mean.schema != _MEAN or mean.output.sole_user() is not add:
        return False
    dims, keepdim, dtype = (constant_value(v) for v in mean.inputs[1:4])
    if not isinstance(dims, (list, tuple)) or list(dims) != [-1] or keepdim is not True \
            or dtype is not None:
        return False
    pow_ = mean.inputs[0].node
    if pow_ is None or pow_.schema != _POW or pow_.output.sole_user() is not mean \
            or constant_value(pow_.inputs[1]) not in (2, 2.0):
        return False
    x = pow_.inputs[0]
    scale = rsqrt.output.sole_user()
    if scale is None or scale.schema != _MUL or _other(scale, rsqrt.output) is not x:
        return False
    # torch.export checks the normalised value's dtype before the cast
    # (``_assert_tensor_metadata``): x's own dtype, device and layout, as a floating x gives
    # them to ``x * rsqrt(...)`` (an integer x raises at ``mean`` first) — so the check
    # moves to x
    checks = [u.user for u in scale.output.uses if u.user.schema == _ASSERT_METADATA]
    users = {u.user for u in scale.output.uses} - set(checks)
    last, cast = (next(iter(users)) if len(users) == 1 else None), None
    if last is not None and last.schema == _TO:
        cast = last
        dtype_, non_blocking, copy, memory_format = (constant_value(v) for v in last.inputs[1:5])
        if dtype_ is None or _UNKNOWN in (dtype_, non_blocking, copy, memory_format) \
                or non_blocking or copy or memory_format is not None:
            return False
        last = last.output.sole_user()
    if last is None or last.schema != _MUL:
        return False
    weight_value = _other(last, (cast or scale).output)
    weight = None if weight_value is None else constant_value(weight_value)
    if not (isinstance(weight, torch.Tensor) and weight.dim() == 1
            and weight.is_floating_point()):
        return False
    if any(n.owning_block is not last.owning_block for n in (pow_, mean, add, rsqrt, scale)):
        return False
    fused = graph.create("static_runtime::rms_norm", [
        x, weight_value, graph.constant(float(eps), T.Float, before=last),
        cast.inputs[1] if cast is not None else graph.constant(None, T.NoneT, before=last)],
        output_types=[last.output.type])
    fused.schema, fused.source = RMS_NORM, last.source
    fused.insert_before(last)
    for check in checks:
        check.replace_input(0, x)
    name = last.output.name
    last.output.replace_all_uses_with(fused.output)
    for node in (last, cast, scale, rsqrt, add, mean, pow_):
        if node is not None:
            node.destroy()
    fused.output.set_name(name)
    return True


def fuse_l2_normalize(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.schema == _CLAMP_MIN and node.owning_block is not None:
            changed |= _fuse_normalize(graph, node)
    return changed


def _fuse_normalize(graph: Graph, clamp: Node) -> bool:
    eps = constant_value(clamp.inputs[1])
    if type(eps) not in (int, float):
        return False
    norm = clamp.inputs[0].node
    if norm is None or norm.schema not in _NORMS or norm.output.sole_user() is not clamp:
        return False
    order, dims, keepdim = (constant_value(v) for v in norm.inputs[1:4])
    if norm.schema == _NORMS[1] and (len(norm.inputs) > 4
                                     and constant_value(norm.inputs[4]) is not None):
        return False  # a dtype to compute in
    if order not in (2, 2.0) or keepdim is not True or not isinstance(dims, (list, tuple)) \
            or len(dims) != 1 or type(dims[0]) is not int:
        return False
    x = norm.inputs[0]
    user = clamp.output.sole_user()
    expand = None
    if user is not None and user.schema == _EXPAND_AS and user.inputs[0] is clamp.output \
            and user.inputs[1] is x:
        expand, user = user, user.output.sole_user()
    denominator = (expand or clamp).output
    if user is None or user.schema != _DIV or user.inputs[0] is not x \
            or user.inputs[1] is not denominator:
        return False
    if any(n.owning_block is not user.owning_block for n in (norm, clamp, expand) if n):
        return False
    fused = graph.create("static_runtime::l2_normalize", [
        x, graph.constant(dims[0], T.Int, before=user),
        graph.constant(float(eps), T.Float, before=user)], output_types=[user.output.type])
    fused.schema, fused.source = L2_NORMALIZE, user.source
    fused.insert_before(user)
    name = user.output.name
    user.output.replace_all_uses_with(fused.output)
    for node in (user, expand, clamp, norm):
        if node is not None:
            node.destroy()
    fused.output.set_name(name)
    return True
