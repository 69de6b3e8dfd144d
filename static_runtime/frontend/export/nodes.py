"""FX nodes → IR nodes: one block of an exported graph appended to an IR block, operators
with their full schemas, symbolic scalar arithmetic as TorchScript's scalar operators,
``torch.cond``/``while_loop`` as ``prim::If``/``prim::Loop`` with their subgraphs inlined."""

from __future__ import annotations

import math
import operator
import os
import re
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from static_runtime.frontend.torchscript import FrontendError
from static_runtime.ir import types as T
from static_runtime.ir.graph import MASK_WIDENS_NOTHING_META, Block, Value

if TYPE_CHECKING:
    from static_runtime.frontend.export.importer import Importer

#: Python operators on symbolic scalars → the TorchScript scalar operator of the same meaning
#: (``aten::<name>.<int|float|bool|int_float|float_int>``, or ``prim::`` where so marked);
#: truediv always gives a float. ``torch.sym_min``/``sym_max`` are what ``min``/``max`` of sizes
#: become under export (SEW's ``min(length, ...)``).
_SYM_BINARY = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul",
    operator.floordiv: "floordiv", operator.mod: "remainder", operator.truediv: "div",
    operator.pow: "pow", operator.eq: "eq", operator.ne: "ne", operator.lt: "lt",
    operator.le: "le", operator.gt: "gt", operator.ge: "ge",
    operator.and_: "__and__", operator.or_: "__or__", operator.xor: "__xor__",
    torch.sym_min: "prim::min", torch.sym_max: "prim::max",
}
_SYM_UNARY = {
    operator.neg: "neg", operator.abs: "prim::abs", torch.sym_not: "__not__",
    math.floor: "floor", math.ceil: "ceil", math.sqrt: "sqrt", torch._sym_sqrt: "sqrt",
    math.trunc: "Int", torch.sym_int: "Int", torch.sym_float: "Float",
}
#: unary conversions that are the identity on a value of their result's kind
_SYM_CONVERSIONS = {math.trunc: T.Int, torch.sym_int: T.Int, torch.sym_float: T.Float}

_SDPA = torch.ops.aten.scaled_dot_product_attention.default

#: Symbolic size queries → the TorchScript operators that ask the same (and run natively).
_SYM_QUERIES = {
    torch.ops.aten.sym_size.int: torch.ops.aten.size.int,
    torch.ops.aten.sym_numel.default: torch.ops.aten.numel.default,
    torch.ops.aten.sym_stride.int: torch.ops.aten.stride.int,
}

#: TorchScript's trip count for a ``while`` loop (``prim::Loop`` bounded by its condition).
_WHILE_TRIPS = 2**63 - 1


def type_of_val(val: Any, node: torch.fx.Node | None = None) -> T.Type:
    """The IR type of a traced value (``node.meta['val']``)."""
    if isinstance(val, torch.Tensor):
        return T.Tensor
    if isinstance(val, (torch.SymBool, bool)):
        return T.Bool
    if isinstance(val, (torch.SymInt, int)):
        return T.Int
    if isinstance(val, (torch.SymFloat, float)):
        return T.Float
    if isinstance(val, str):
        return T.Str
    if val is None:
        return T.NoneT
    if isinstance(val, (list, tuple)) and val:
        elems = [type_of_val(v) for v in val]
        if isinstance(val, tuple):
            return T.TupleType(tuple(elems))
        if all(e == elems[0] for e in elems):
            return T.ListType(elems[0])
    where = f" of {node.name!r}" if node is not None else ""
    raise FrontendError(f"cannot type the value{where}: {type(val).__name__} {val!r:.80}")


def _ir_type(t: torch._C.Type) -> T.Type:
    """A schema type as an IR type; ``SymInt``/``SymFloat``/``SymBool`` are plain scalars."""
    kind = t.kind()
    sym = {"SymIntType": T.Int, "SymFloatType": T.Float, "SymBoolType": T.Bool}.get(kind)
    if sym is not None:
        return sym
    if kind == "ListType":
        return T.ListType(_ir_type(t.getElementType()))
    if kind == "OptionalType":
        return T.OptionalType(_ir_type(t.getElementType()))
    return T.from_torch(t)


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


_TORCH_DIR = os.path.dirname(torch.__file__)


def source_of(node: torch.fx.Node) -> str | None:
    """``file:line`` of the innermost frame of the user's code that made ``node`` (frames in
    torch itself and generated code are skipped)."""
    trace = node.meta.get("stack_trace")
    for path, line in reversed(_FILE_LINE.findall(trace) if trace else []):
        if not path.startswith("<") and not path.startswith(_TORCH_DIR):
            return f"{os.path.basename(path)}:{line}"
    return None


class ImportBlock:
    """Appends FX nodes to one IR block; ``env`` maps FX nodes to IR values (or tuples of
    values for multi-output nodes)."""

    def __init__(self, importer: Importer, gm: torch.fx.GraphModule, block: Block,
                 env: dict):
        self.importer = importer
        self.graph = importer.graph
        self.gm = gm
        self.block = block
        self.env = env

    # -- values
    def constant(self, value: Any, type: T.Type) -> Value:
        node = self.graph.create("prim::Constant", output_types=[type])
        if value is not None:
            node.attrs["value"] = value
        self.block.append(node)
        return node.output

    def value(self, arg: Any, schema_type: T.Type | None = None) -> Value:
        """The IR value of an FX argument: a node's value, a literal, or a list of either."""
        if isinstance(arg, torch.fx.Node):
            v = self.env.get(arg)
            if isinstance(v, Value):
                return v
            raise FrontendError(f"{arg.name!r} ({arg.op} {arg.target}) is used as a value but "
                                "the importer made none for it")
        if arg is None:
            return self.constant(None, T.NoneT)
        if isinstance(arg, bool):
            return self.constant(arg, T.Bool)
        if isinstance(arg, int):
            return self.constant(arg, T.Int)
        if isinstance(arg, float):
            return self.constant(arg, T.Float)
        if isinstance(arg, str):
            return self.constant(arg, T.Str)
        if isinstance(arg, torch.device):
            return self.constant(arg, T.Device)
        if isinstance(arg, (torch.dtype, torch.layout, torch.memory_format)):
            return self.constant(arg, T.Int)  # TorchScript's erasure of these enums
        if isinstance(arg, torch.Tensor):
            return self.constant(arg.detach(), T.Tensor)
        if isinstance(arg, (list, tuple)):
            return self.list_value(list(arg), schema_type)
        raise FrontendError(f"cannot import an argument of type {type(arg).__name__}: {arg!r:.80}")

    def list_value(self, items: list, schema_type: T.Type | None) -> Value:
        elem = schema_type.elem if isinstance(schema_type, T.ListType) else None
        if elem is not None and isinstance(elem, T.OptionalType) \
                and not any(x is None for x in items):
            elem = elem.elem if elem.elem != T.Tensor else elem
        if not any(isinstance(x, torch.fx.Node) for x in items) and all(
                isinstance(x, (int, float, bool)) for x in items):
            kinds = {type(x) for x in items}
            if elem is None:
                elem = {int: T.Int, float: T.Float, bool: T.Bool}.get(next(iter(kinds)), T.Int) \
                    if len(kinds) == 1 else T.Float
            return self.constant(list(items), T.ListType(elem))
        values = [self.value(x) for x in items]
        if elem is None:
            types = {v.type for v in values}
            if types <= {T.Tensor, T.NoneT} and T.NoneT in types:
                elem = T.OptionalType(T.Tensor)
            elif len(types) == 1:
                elem = next(iter(types))
            else:
                raise FrontendError(f"a list of mixed types {sorted(map(str, types))}")
        node = self.graph.create("prim::ListConstruct", values,
                                 output_types=[T.ListType(elem)])
        self.block.append(node)
        return node.output

    # -- nodes
    def nodes(self, fx_nodes) -> None:
        for n in fx_nodes:
            if n.op == "call_function":
                self.call(n)
            elif n.op == "get_attr":
                attr = _fetch_attr(self.gm, n.target)
                if isinstance(attr, torch.Tensor):
                    self.env[n] = self.constant(attr.detach(), T.Tensor)
                else:
                    self.env[n] = attr  # a subgraph, read by the higher-order op using it
            else:
                raise FrontendError(f"FX node {n.name!r} has op {n.op!r}, which an exported "
                                    "graph does not contain")

    def call(self, n: torch.fx.Node) -> None:
        target = n.target
        if isinstance(target, torch._ops.OpOverload):
            self.op(n, target)
        elif target is operator.getitem:
            self.getitem(n)
        elif target in _SYM_BINARY or target in _SYM_UNARY:
            self.sym_op(n)
        elif isinstance(target, torch._ops.HigherOrderOperator):
            if target is torch.ops.higher_order.cond:
                self.cond(n)
            elif target is torch.ops.higher_order.while_loop:
                self.while_loop(n)
            else:
                raise FrontendError(
                    f"higher-order operator {target.name()} ({n.name!r}, "
                    f"{source_of(n) or 'no source'}) is not supported; supported: cond, "
                    "while_loop")
        elif isinstance(target, torch._ops.OpOverloadPacket):
            raise FrontendError(f"{n.name!r} calls the overload packet {target}, not an "
                                "overload: the program is not ATen-level")
        else:
            name = getattr(target, "__qualname__", None) or repr(target)
            raise FrontendError(
                f"{n.name!r} calls {getattr(target, '__module__', '')}.{name} "
                f"({source_of(n) or 'no source'}), which the importer does not map")

    def op(self, n: torch.fx.Node, op: torch._ops.OpOverload) -> None:
        op = _SYM_QUERIES.get(op, op)
        inputs = self.arguments(op, n.args, n.kwargs)
        node = self._emit(n, op, inputs)
        if len(node.outputs) == 1:
            out = node.output
            val = n.meta.get("val")
            if isinstance(out.type, T.ListType) and isinstance(val, (list, tuple)):
                unpack = self.graph.create("prim::ListUnpack", [out],
                                           output_types=[out.type.elem] * len(val))
                self.block.append(unpack)
                self.env[n] = tuple(unpack.outputs)
            else:
                self.env[n] = out
        else:
            self.env[n] = tuple(node.outputs)

    def _emit(self, n: torch.fx.Node, op: torch._ops.OpOverload, inputs: list[Value]):
        schema = op._schema
        node = self.graph.create(schema.name, inputs,
                                 output_types=[_ir_type(r.type) for r in schema.returns])
        node.schema = str(schema)
        node.source = source_of(n)
        if op is _SDPA and _mask_widens_nothing(n):
            node.meta[MASK_WIDENS_NOTHING_META] = True
        self.block.append(node)
        for o, hint in zip(node.outputs, [n.name] if len(node.outputs) == 1 else [], strict=False):
            o.set_name(hint)
        return node

    def arguments(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list[Value]:
        """Every schema argument, in order, defaults filled in (as TorchScript has them)."""
        out = []
        for i, a in enumerate(op._schema.arguments):
            if i < len(args) and not a.kwarg_only:
                arg = args[i]
            elif a.name in kwargs:
                arg = kwargs[a.name]
            elif a.has_default_value():
                arg = a.default_value
            else:
                raise FrontendError(f"{op} is called without its argument {a.name!r}")
            out.append(self.value(arg, _ir_type(a.type)))
        return out

    def getitem(self, n: torch.fx.Node) -> None:
        src, index = n.args
        got = self.env.get(src)
        if isinstance(got, tuple):
            self.env[n] = got[index]
            return
        raise FrontendError(f"{n.name!r} indexes {src.name!r}, which has no multiple outputs")

    def sym_op(self, n: torch.fx.Node) -> None:
        """Python arithmetic on symbolic scalars: the TorchScript scalar operator."""
        args = [self.value(a) for a in n.args]
        if _SYM_CONVERSIONS.get(n.target) == args[0].type:
            self.env[n] = args[0]  # (int() of an int, float() of a float)
            return
        table = _SYM_BINARY if n.target in _SYM_BINARY else _SYM_UNARY
        namespace, _, name = table[n.target].rpartition("::")
        kinds = [{T.Float: "float", T.Bool: "bool"}.get(a.type, "int") for a in args]
        overload = kinds[0] if len(set(kinds)) == 1 else "_".join(kinds)
        packet = getattr(getattr(torch.ops, namespace or "aten"), name)
        if name == "pow" and overload == "int" and isinstance(n.meta.get("val"),
                                                              (int, torch.SymInt)):
            overload = "int_to_int"  # (a size squared is an int; ``pow.int`` gives a float)
        if overload not in packet.overloads() and "default" in packet.overloads():
            overload = "default"  # (``aten::__not__(bool self)``)
        if overload not in packet.overloads():
            raise FrontendError(f"no {namespace or 'aten'}::{name}.{overload} for {n.name!r} "
                                f"({source_of(n) or 'no source'})")
        op = getattr(packet, overload)
        node = self.graph.create(op._schema.name, args,
                                 output_types=[_ir_type(op._schema.returns[0].type)])
        node.schema = str(op._schema)
        node.source = source_of(n)
        self.block.append(node)
        self.env[n] = node.output

    def as_bool(self, v: Value) -> Value:
        if v.type == T.Bool:
            return v
        op = torch.ops.aten.Bool.Tensor
        node = self.graph.create("aten::Bool", [v], output_types=[T.Bool])
        node.schema = str(op._schema)
        self.block.append(node)
        return node.output

    def _inline(self, gm: torch.fx.GraphModule, block: Block, inputs: list[Value]) -> list[Value]:
        """Append ``gm``'s nodes to ``block`` with its placeholders bound to ``inputs``;
        returns the values of its outputs."""
        env: dict = dict(self.env)  # outer values stay visible (they dominate the block)
        phs = [p for p in gm.graph.nodes if p.op == "placeholder"]
        if len(phs) != len(inputs):
            raise FrontendError(f"subgraph takes {len(phs)} inputs, given {len(inputs)}")
        env.update(zip(phs, inputs, strict=True))
        sub = ImportBlock(self.importer, gm, block, env)
        sub.nodes(n for n in gm.graph.nodes if n.op not in ("placeholder", "output"))
        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        return [sub.value(o) for o in outs]

    def cond(self, n: torch.fx.Node) -> None:
        pred, true_gm, false_gm, operands = n.args
        pred_v = self.as_bool(self.value(pred))
        operand_vs = [self.value(o) for o in operands]
        vals = n.meta.get("val")
        types = [type_of_val(v) for v in vals]
        node = self.graph.create("prim::If", [pred_v], output_types=types)
        node.source = source_of(n)
        self.block.append(node)
        for branch in (true_gm, false_gm):
            gm = self.env[branch]
            block = node.add_block()
            for v in self._inline(gm, block, operand_vs):
                block.add_output(v)
        self.env[n] = tuple(node.outputs)

    def while_loop(self, n: torch.fx.Node) -> None:
        cond_node, body_node, carried, additional = n.args[:4]
        cond_gm, body_gm = self.env[cond_node], self.env[body_node]
        carried_vs = [self.value(c) for c in carried]
        extra_vs = [self.value(a) for a in additional]
        first = self.as_bool(self._inline(cond_gm, self.block, carried_vs + extra_vs)[0])
        trips = self.constant(_WHILE_TRIPS, T.Int)
        types = [type_of_val(v) for v in n.meta["val"]]
        node = self.graph.create("prim::Loop", [trips, first, *carried_vs], output_types=types)
        node.source = source_of(n)
        self.block.append(node)
        body = node.add_block()
        body.add_input(T.Int, "i")
        params = [body.add_input(t) for t in types]
        nexts = self._inline(body_gm, body, params + extra_vs)
        inner = ImportBlock(self.importer, self.gm, body, self.env)
        again = inner.as_bool(self._inline(cond_gm, body, nexts + extra_vs)[0])
        body.add_output(again)
        for v in nexts:
            body.add_output(v)
        self.env[n] = tuple(node.outputs)


def _mask_widens_nothing(n: torch.fx.Node) -> bool:
    """Whether the traced shapes show that ``n``'s (a ``scaled_dot_product_attention``)
    ``attn_mask`` does not widen its result: each mask dimension, aligned from the right with
    the scores ``query @ keyᵀ``, is 1 or the size of that dimension."""
    args = list(n.args) + [None] * 4
    q, k = (a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in args[:2])
    mask = args[3] if len(n.args) > 3 else n.kwargs.get("attn_mask")
    m = mask.meta.get("val") if isinstance(mask, torch.fx.Node) else None
    if not all(isinstance(t, torch.Tensor) for t in (q, k, m)) or q.dim() < 2:
        return False
    scores = (*q.shape[:-1], k.shape[-2])
    return m.dim() <= len(scores) and all(
        statically_known_true(size == 1) or statically_known_true(size == target)
        for size, target in zip(reversed(m.shape), reversed(scores), strict=False))


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
