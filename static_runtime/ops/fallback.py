"""The fallback tier: the registered PyTorch operator a node's schema names.

Two routes, both PyTorch's own:

* when the schema has concrete types, the operator's Python binding (``torch.addmm``,
  ``Tensor.view``...) where it provably runs the same overload (``bindings.py``; the
  ``fast_bindings`` option), else ``torch.ops.<ns>.<name>.<overload>``;
* a one-node TorchScript function when the schema is generic (``t``, ``t[]``, ``Dict(t, t)``):
  ``torch.ops`` cannot convert Python values to a type variable, but the TorchScript
  interpreter, given the node's concrete input types, can.

Operators that write into a non-tensor input (``aten::append(t[](a!) self, ...)``) are never
run this way: the conversion to TorchScript values copies the list, so the write would be
lost. They need a native implementation; without one, the node is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import Node
from static_runtime.ops import bindings
from static_runtime.ops.registry import labelled


def resolve(node: Node, *, fast_bindings: bool = True) -> tuple[Callable[..., Any] | None, str]:
    """A callable running ``node`` through PyTorch, or ``(None, why not)``.

    With ``fast_bindings``, the operator's Python binding where it provably runs the same
    overload (``bindings.bind``), else its ``torch.ops`` overload."""
    if node.schema is None:
        return None, "it has no schema, and no native implementation is registered"
    info = S.parse(node.schema)
    if any(a.is_write and a.type != "Tensor" and not a.type.startswith("Tensor(")
           for a in info.arguments):
        return None, ("it writes into a non-tensor input, which only a native "
                      "implementation can do")
    if node.attrs:
        return None, f"it has attributes {sorted(node.attrs)} that the schema cannot carry"
    op = None if info.is_generic() or info.is_vararg else S.resolve_overload(node.schema)
    if op is not None:
        if fast_bindings:
            fn, why = bindings.bind(node)
            if fn is not None:
                return fn, ""
            return bind_overload(op, info, len(node.inputs), why=why), ""
        return bind_overload(op, info, len(node.inputs)), ""
    try:
        return _interpreter_function(node), ""
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"PyTorch has no operator for it ({first})"


def bind_overload(op: torch._ops.OpOverload, info: S.SchemaInfo, n_inputs: int,
                  out_name: str | None = None, why: str = "") -> Callable[..., Any]:
    """A callable taking the node's inputs positionally (and ``out`` first, if ``out_name``);
    ``why`` says, in its label, why no Python binding is used."""
    n_pos = sum(1 for a in info.arguments if not a.kwarg_only)
    kw_names = tuple(a.name for a in info.arguments if a.kwarg_only)[: max(0, n_inputs - n_pos)]
    label = f"torch.ops.{info.namespace}.{info.base_name}.{op._overloadname}"
    if why:
        label += f" ({why})"
    if out_name is None:
        if not kw_names:
            return labelled(label)(lambda *a: op(*a))
        return labelled(label)(
            lambda *a: op(*a[:n_pos], **dict(zip(kw_names, a[n_pos:], strict=True))))

    def out_fn(out, *a):
        kw = dict(zip(kw_names, a[n_pos:], strict=True))
        kw[out_name] = out
        return op(*a[:n_pos], **kw)

    return labelled(label)(out_fn)


def _ts_type(t: T.Type) -> str:
    """The TorchScript spelling of an IR type, for a graph that ``torch._C.parse_ir`` reads."""
    if isinstance(t, T.TensorType):
        return "Tensor"
    if isinstance(t, T.ListType):
        return f"{_ts_type(t.elem)}[]"
    if isinstance(t, T.OptionalType):
        return f"{_ts_type(t.elem)}?"
    if isinstance(t, T.TupleType):
        return "(" + ", ".join(_ts_type(e) for e in t.elems) + ")"
    if isinstance(t, T.DictType):
        return f"Dict({_ts_type(t.key)}, {_ts_type(t.value)})"
    if isinstance(t, T.FutureType):
        return f"Future({_ts_type(t.elem)})"
    if isinstance(t, T.UnionType):
        return "Union(" + ", ".join(_ts_type(m) for m in t.members) + ")"
    if t is T.ScalarTypeT or t is T.Layout or t is T.MemoryFormat:
        return "int"
    return str(t)


def _interpreter_function(node: Node) -> Callable[..., Any]:
    params = ", ".join(f"%i{k} : {_ts_type(v.type)}" for k, v in enumerate(node.inputs))
    args = ", ".join(f"%i{k}" for k in range(len(node.inputs)))
    outs = ", ".join(f"%o{k} : {_ts_type(v.type)}" for k, v in enumerate(node.outputs))
    lines = [f"graph({params}):"]
    call = f"{node.kind}({args})"
    lines.append(f"  {outs} = {call}" if outs else f"  {call}")
    if len(node.outputs) > 1:
        tuple_t = "(" + ", ".join(_ts_type(v.type) for v in node.outputs) + ")"
        names = ", ".join(f"%o{k}" for k in range(len(node.outputs)))
        lines.append(f"  %r : {tuple_t} = prim::TupleConstruct({names})")
        lines.append("  return (%r)")
    elif node.outputs:
        lines.append("  return (%o0)")
    else:
        lines.append("  %r : NoneType = prim::Constant()")
        lines.append("  return (%r)")
    g = torch._C.parse_ir("\n".join(lines))
    fn = torch._C._create_function_from_graph(f"sr_fallback_{node.kind.replace('::', '_')}", g)
    return labelled(f"TorchScript interpreter: {node.schema_name() or node.kind}")(
        lambda *a: fn(*a))
