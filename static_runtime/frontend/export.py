"""torch.export importer: ``ExportedProgram``, a ``.pt2`` archive, or ``nn.Module`` plus example
inputs → IR.

An exported program's graph is ATen-level: every ``call_function`` target is an
``OpOverload`` whose ``_schema`` is exactly the schema a TorchScript node of the same operator
carries (``aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor``), so the
nodes made here are the TorchScript importer's nodes — same kinds, same schemas, every
argument present (defaults filled in) — and the same passes and operator registry run them.

* Parameters, buffers and lifted constants (``graph_signature.input_specs``) become constants;
  user inputs become graph inputs, flattened by pytree: ``ExportSignature`` keeps the input
  and output ``TreeSpec``s, so the runtime can take the user's nested arguments (tuples,
  lists, dicts, keyword arguments) and give back the user's structure.
* Multi-output operators become multi-output nodes (``getitem`` picks an output); operators
  returning ``Tensor[]`` are unpacked with ``prim::ListUnpack``.
* Symbolic sizes are ordinary ints: ``sym_size`` becomes ``aten::size.int``, Python arithmetic
  on them (``operator.mul``...) the TorchScript scalar operators (``aten::mul.int``).
* ``torch.cond`` becomes ``prim::If`` and ``while_loop`` becomes ``prim::Loop``, with the
  branch and body graphs inlined into the blocks.
* Batch norms stay as they are; ``passes/fold.py`` (``fold_batchnorm``) folds an inference
  batch norm after a constant-weight convolution, for both frontends.

The program runs for inference: an ``nn.Module`` is exported in eval mode (every submodule's
training flag is restored afterwards). A program that writes its buffers or its inputs
(``buffers_to_mutate``, ``user_inputs_to_mutate``: batch norm in training mode, a KV cache) is
refused, naming what it writes: the runtime's constants are read-only and its inputs are never
written.
"""

from __future__ import annotations

import math
import operator
import os
import re
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from static_runtime.frontend.torchscript import FrontendError
from static_runtime.ir import types as T
from static_runtime.ir.graph import Argument, Block, Graph, Signature, Value

__all__ = ["ExportSignature", "InputGuard", "export_module", "import_export", "load_pt2"]


@dataclass(frozen=True)
class InputGuard:
    """What the program assumed of one flat user input (``torch.export``'s own input check,
    ``_check_input_constraints_for_graph``, as data).

    For a tensor, ``dims`` has one entry per dimension: an ``int`` for a size that was
    specialised, or the name of its symbol (two dimensions with one symbol must agree; the
    symbol's range is in ``ExportSignature.ranges``). For a non-tensor input that was
    specialised, ``value`` is the value it must have; a symbolic int has ``symbol``."""

    path: str
    is_tensor: bool
    dims: tuple[int | str, ...] = ()
    value: Any = None
    symbol: str | None = None
    specialised: bool = False


@dataclass
class ExportSignature(Signature):
    """The signature of an exported program: graph inputs are the flattened user inputs.

    ``in_spec`` is the pytree ``TreeSpec`` of ``(args, kwargs)`` as exported, ``out_spec``
    that of the outputs; ``guards`` and ``ranges`` say which inputs the program accepts."""

    in_spec: Any = None
    out_spec: Any = None
    guards: tuple[InputGuard, ...] = ()
    ranges: dict[str, tuple[int, float]] = field(default_factory=dict)

    @property
    def flat_positional(self) -> bool:
        """Whether the program takes plain positional leaves (no nesting, no keywords): the
        call's ``args`` are then the graph inputs themselves."""
        spec = self.in_spec
        if spec is None or spec.type is not tuple or spec.num_children != 2:
            return False
        args, kwargs = spec.children()
        return (args.type is tuple and all(c.is_leaf() for c in args.children())
                and kwargs.type is dict and kwargs.num_children == 0)

    @property
    def out_is_leaf(self) -> bool:
        return self.out_spec is None or self.out_spec.is_leaf()


# --------------------------------------------------------------------------- entry points


def import_export(model: Any, *, example_inputs: Any = None, dynamic_shapes: Any = None,
                  decompose: bool = False) -> Graph:
    """Import an ``ExportedProgram``, a ``.pt2`` path, or an ``nn.Module`` (exported here
    from ``example_inputs``, a tuple of positional arguments or ``(args, kwargs)``, with
    ``dynamic_shapes`` passed to ``torch.export.export``).

    ``decompose`` runs ``ep.run_decompositions()`` first (core ATen); the default imports
    the program as exported, which ran faster on every built-in model (BENCHMARKS.md)."""
    if isinstance(model, (str, os.PathLike)):
        model = load_pt2(model)
    elif isinstance(model, torch.nn.Module) and not isinstance(model, torch.fx.GraphModule):
        model = export_module(model, example_inputs, dynamic_shapes)
    if not isinstance(model, ExportedProgram):
        raise FrontendError(f"cannot import a {type(model).__name__} as a torch.export program")
    if decompose:
        model = model.run_decompositions()
    return _Importer(model).run()


def is_pt2(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a ``torch.export.save`` archive: a ``.pt2`` file, or a zip with
    the ``archive_format`` record that ``torch.export.save`` writes (a TorchScript archive
    has none)."""
    p = Path(path)
    if p.suffix == ".pt2":
        return True
    if not p.is_file() or not zipfile.is_zipfile(p):
        return False
    with zipfile.ZipFile(p) as z:
        return any(n.rsplit("/", 1)[-1] == "archive_format" for n in z.namelist())


def load_pt2(path: str | os.PathLike) -> ExportedProgram:
    """``torch.export.load`` with errors that say what is wrong with the file."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such torch.export archive: {p}")
    if p.is_dir():
        raise FrontendError(f"{p} is a directory, not a torch.export archive")
    try:
        return torch.export.load(str(p))
    except Exception as e:  # torch raises RuntimeError/ValueError/KeyError from deep inside
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FrontendError(
            f"{p} is not a torch.export archive that torch.export.load can read "
            f"({type(e).__name__}: {first[:200]})") from e


def export_module(module: torch.nn.Module, example_inputs: Any,
                  dynamic_shapes: Any = None) -> ExportedProgram:
    """``torch.export.export`` in eval mode; every submodule gets its own flag back."""
    if example_inputs is None:
        raise FrontendError(
            f"{type(module).__name__} is a plain nn.Module: give example_inputs= to export it "
            "with torch.export (or pass a torch.jit.script'ed module)")
    args, kwargs = split_example(example_inputs)
    was_training = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FrontendError(
            f"torch.export could not export {type(module).__name__} "
            f"({type(e).__name__}: {first[:300]})") from e
    finally:
        for m, training in was_training:
            m.training = training


def split_example(example_inputs: Any) -> tuple[tuple, dict]:
    """``example_inputs`` is a tuple of positional arguments, or ``(args, kwargs)``."""
    if (isinstance(example_inputs, tuple) and len(example_inputs) == 2
            and isinstance(example_inputs[0], tuple) and isinstance(example_inputs[1], dict)):
        return example_inputs[0], example_inputs[1]
    if isinstance(example_inputs, tuple):
        return example_inputs, {}
    if isinstance(example_inputs, list):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


# --------------------------------------------------------------------------- the importer

#: Python operators on symbolic scalars → the ATen scalar operator of the same meaning
#: (``aten::<name>.<int|float|int_float|float_int>``); truediv always gives a float.
_SYM_BINARY = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul",
    operator.floordiv: "floordiv", operator.mod: "remainder", operator.truediv: "div",
    operator.pow: "pow", operator.eq: "eq", operator.ne: "ne", operator.lt: "lt",
    operator.le: "le", operator.gt: "gt", operator.ge: "ge",
}
_SYM_UNARY = {operator.neg: "neg"}

#: Symbolic size queries → the TorchScript operators that ask the same (and run natively).
_SYM_QUERIES = {
    torch.ops.aten.sym_size.int: torch.ops.aten.size.int,
    torch.ops.aten.sym_numel.default: torch.ops.aten.numel.default,
    torch.ops.aten.sym_stride.int: torch.ops.aten.stride.int,
}

#: TorchScript's trip count for a ``while`` loop (``prim::Loop`` bounded by its condition).
_WHILE_TRIPS = 2**63 - 1


class _Importer:
    def __init__(self, ep: ExportedProgram):
        self.ep = ep
        self.graph = Graph()

    def run(self) -> Graph:
        ep, graph = self.ep, self.graph
        sig = ep.graph_signature
        self._refuse_mutations()
        gm = ep.graph_module
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        env: dict[torch.fx.Node, Any] = {}
        names, guards = [], []
        user_paths = self._user_paths()
        for node, spec in zip(placeholders, sig.input_specs, strict=True):
            if spec.kind == InputKind.USER_INPUT:
                val = node.meta.get("val")
                v = graph.add_input(_type_of_val(val, node), node.name)
                env[node] = v
                names.append(Argument(v.name))
                guards.append(_guard(user_paths[len(guards)], val))
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER,
                               InputKind.CONSTANT_TENSOR):
                env[node] = self._lifted(node, spec)
            else:
                raise FrontendError(
                    f"input {node.name!r} of kind {spec.kind.name} is not supported (only "
                    "user inputs, parameters, buffers and constant tensors are)")
        _refuse_inplace_writes(gm.graph, placeholders, sig.input_specs)
        top = _ImportBlock(self, gm, graph.block, env)
        top.nodes(n for n in gm.graph.nodes if n.op not in ("placeholder", "output"))
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        for value, spec in zip(out_node.args[0], sig.output_specs, strict=True):
            if spec.kind == OutputKind.USER_OUTPUT:
                graph.add_output(top.value(value))
        call = ep.call_spec
        graph.signature = ExportSignature(
            names, in_spec=call.in_spec, out_spec=call.out_spec, guards=tuple(guards),
            ranges=_ranges(ep))
        return graph

    def _refuse_mutations(self) -> None:
        sig = self.ep.graph_signature
        written = [f"buffer {b!r}" for b in sig.buffers_to_mutate.values()]
        written += [f"input {i!r}" for i in sig.user_inputs_to_mutate.values()]
        if written:
            raise FrontendError(
                f"the exported program writes {', '.join(written)}; the runtime's constants "
                "are read-only and its inputs are never written (batch norm in training mode "
                "writes its running statistics: export the module in eval mode)")
        kinds = {s.kind for s in sig.output_specs} - {OutputKind.USER_OUTPUT}
        if kinds:
            raise FrontendError(
                f"the exported program has outputs of kind {sorted(k.name for k in kinds)}, "
                "which inference does not use (export for inference, in eval mode)")

    def _user_paths(self) -> list[str]:
        spec = self.ep.call_spec.in_spec
        if spec is None:
            return []
        dummy = pytree.tree_unflatten([0] * spec.num_leaves, spec)
        return [_path_str(p) for p, _ in pytree.tree_flatten_with_path(dummy)[0]]

    def _lifted(self, node: torch.fx.Node, spec) -> Value:
        ep = self.ep
        target = spec.target
        if spec.kind == InputKind.CONSTANT_TENSOR or spec.persistent is False:
            tensor = ep.constants[target]
        else:
            tensor = ep.state_dict[target]
        if not isinstance(tensor, torch.Tensor):
            raise FrontendError(f"constant {target!r} is a {type(tensor).__name__}, not a tensor")
        v = self.graph.constant(tensor.detach(), T.Tensor)
        v.set_name(_legal(target))
        return v


def _refuse_inplace_writes(fx_graph: torch.fx.Graph, placeholders: list, specs) -> None:
    """Refuse an operator that writes (``Tensor(a!)``) a parameter, buffer, constant or user
    input, or a view of one: the training IR ``torch.export`` gives keeps such in-place
    operators (``self.count.add_(1)``) instead of listing them in ``buffers_to_mutate``."""
    owner: dict[torch.fx.Node, str] = {}
    for node, spec in zip(placeholders, specs, strict=True):
        owner[node] = (f"input {node.name!r}" if spec.kind == InputKind.USER_INPUT
                       else f"{spec.kind.name.lower().replace('_', ' ')} {spec.target!r}")
    for n in fx_graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        schema = n.target._schema
        args = list(n.args) + [n.kwargs.get(a.name) for a in schema.arguments[len(n.args):]]
        sources = {}
        for a, arg in zip(schema.arguments, args, strict=False):
            if isinstance(arg, torch.fx.Node) and arg in owner and a.alias_info is not None:
                if a.alias_info.is_write:
                    raise FrontendError(
                        f"{n.name!r} ({schema.name}, {_source_of(n) or 'no source'}) writes "
                        f"{owner[arg]} in place: the runtime's constants are read-only and its "
                        "inputs are never written; compute a new tensor instead")
                sources.update({s: owner[arg] for s in a.alias_info.before_set})
        for r in schema.returns:  # a view of a protected tensor is protected too
            if r.alias_info is not None:
                for s in r.alias_info.before_set & set(sources):
                    owner[n] = sources[s]


def _path_str(path) -> str:
    """``args[0]['x']`` for a pytree key path into ``(args, kwargs)``."""
    if not path:
        return "input"
    head = "args" if getattr(path[0], "idx", None) == 0 else "kwargs"
    return head + "".join(str(k) for k in path[1:])


def _guard(path: str, val: Any) -> InputGuard:
    if isinstance(val, torch.Tensor):
        dims = tuple(int(d) if isinstance(d, int) else str(d.node.expr) if _is_symbol(d)
                     else "?" for d in val.shape)
        return InputGuard(path, True, dims)
    if isinstance(val, torch.SymInt) and _is_symbol(val):
        return InputGuard(path, False, symbol=str(val.node.expr))
    if isinstance(val, (bool, int, float, str)) or val is None:
        return InputGuard(path, False, value=val, specialised=True)
    return InputGuard(path, False)


def _is_symbol(d: Any) -> bool:
    return isinstance(d, torch.SymInt) and getattr(d.node.expr, "is_Symbol", False)


def _ranges(ep: ExportedProgram) -> dict[str, tuple[int, float]]:
    out = {}
    for sym, vr in ep.range_constraints.items():
        out[str(sym)] = (_bound(vr.lower, 0), _bound(vr.upper, math.inf))
    return out


def _bound(x: Any, unbounded: float) -> float:
    """A range bound as a number (``int_oo``/``oo``, which ``int()`` refuses, unbounded)."""
    try:
        return int(x)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return unbounded


def _legal(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", name)


def _type_of_val(val: Any, node: torch.fx.Node | None = None) -> T.Type:
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
        elems = [_type_of_val(v) for v in val]
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


def _source_of(node: torch.fx.Node) -> str | None:
    """``file:line`` of the innermost frame of the user's code that made ``node`` (frames in
    torch itself and generated code are skipped)."""
    trace = node.meta.get("stack_trace")
    for path, line in reversed(_FILE_LINE.findall(trace) if trace else []):
        if not path.startswith("<") and not path.startswith(_TORCH_DIR):
            return f"{os.path.basename(path)}:{line}"
    return None


class _ImportBlock:
    """Appends FX nodes to one IR block; ``env`` maps FX nodes to IR values (or tuples of
    values for multi-output nodes)."""

    def __init__(self, importer: _Importer, gm: torch.fx.GraphModule, block: Block,
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
                    f"{_source_of(n) or 'no source'}) is not supported; supported: cond, "
                    "while_loop")
        elif isinstance(target, torch._ops.OpOverloadPacket):
            raise FrontendError(f"{n.name!r} calls the overload packet {target}, not an "
                                "overload: the program is not ATen-level")
        else:
            name = getattr(target, "__qualname__", None) or repr(target)
            raise FrontendError(
                f"{n.name!r} calls {getattr(target, '__module__', '')}.{name} "
                f"({_source_of(n) or 'no source'}), which the importer does not map")

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
        node.source = _source_of(n)
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
        table = _SYM_BINARY if n.target in _SYM_BINARY else _SYM_UNARY
        name = table[n.target]
        kinds = ["float" if a.type == T.Float else "int" for a in args]
        overload = kinds[0] if len(set(kinds)) == 1 else "_".join(kinds)
        packet = getattr(torch.ops.aten, name)
        if overload not in packet.overloads():
            raise FrontendError(f"no aten::{name}.{overload} for {n.name!r} "
                                f"({_source_of(n) or 'no source'})")
        op = getattr(packet, overload)
        node = self.graph.create(op._schema.name, args,
                                 output_types=[_ir_type(op._schema.returns[0].type)])
        node.schema = str(op._schema)
        node.source = _source_of(n)
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
        sub = _ImportBlock(self.importer, gm, block, env)
        sub.nodes(n for n in gm.graph.nodes if n.op not in ("placeholder", "output"))
        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        return [sub.value(o) for o in outs]

    def cond(self, n: torch.fx.Node) -> None:
        pred, true_gm, false_gm, operands = n.args
        pred_v = self.as_bool(self.value(pred))
        operand_vs = [self.value(o) for o in operands]
        vals = n.meta.get("val")
        types = [_type_of_val(v) for v in vals]
        node = self.graph.create("prim::If", [pred_v], output_types=types)
        node.source = _source_of(n)
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
        types = [_type_of_val(v) for v in n.meta["val"]]
        node = self.graph.create("prim::Loop", [trips, first, *carried_vs], output_types=types)
        node.source = _source_of(n)
        self.block.append(node)
        body = node.add_block()
        body.add_input(T.Int, "i")
        params = [body.add_input(t) for t in types]
        nexts = self._inline(body_gm, body, params + extra_vs)
        inner = _ImportBlock(self.importer, self.gm, body, self.env)
        again = inner.as_bool(self._inline(cond_gm, body, nexts + extra_vs)[0])
        body.add_output(again)
        for v in nexts:
            body.add_output(v)
        self.env[n] = tuple(node.outputs)


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
