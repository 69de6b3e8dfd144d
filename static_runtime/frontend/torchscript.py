"""TorchScript importer: ScriptModule, ScriptFunction, ``torch._C.Graph`` or a ``.pt`` path → IR.

Modules are frozen as the seed describes (``torch.jit.freeze`` in eval mode): parameters and
unmutated attributes become constants, methods are inlined. Freezing runs without its
numerics folds (``optimize_numerics=False``): its Linear+BatchNorm fold rewrites the linear
layer's weights even where its result has other uses (a residual ``h + f(bn(h))`` then adds
the normalised ``h``), a wrong answer. ``passes/fold.py`` folds batch norms where it is exact.

Attributes the forward writes (``self.b = 20``, ``self.history.append(n)``,
``self.buf.add_(x)``) survive freezing; the module object they live on becomes a constant the
graph reads and writes with ``prim::GetAttr``/``prim::SetAttr``.

That constant is not the TorchScript module itself but a Python mirror of its state
(``ScriptObjectValue``s, one per module object): reading a list or dict attribute of a
``torch._C.ScriptModule`` returns a *copy*, so writes into it (``append``, ``d[k] = v``) would
be lost. The mirror's tensors are copies too, so a ``StaticModule`` owns its state: running
it never changes the user's module, nor another ``StaticModule`` built from the same one
(``torch.jit.freeze`` shares buffer storage with the module it was given).
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Argument, Block, Graph, Signature, Value
from static_runtime.ir.values import ScriptObjectValue, UnrepresentableConstant


class FrontendError(ValueError):
    """The model could not be imported."""


def import_torchscript(model: Any, *, freeze: bool = True) -> Graph:
    """Import a TorchScript model into an IR graph with ``graph.signature`` filled in."""
    if isinstance(model, (str, os.PathLike)):
        model = load_archive(model)
    if isinstance(model, torch.jit.ScriptModule):
        return _import_module(model, freeze=freeze)
    if isinstance(model, torch.jit.ScriptFunction):
        graph = import_graph(model.graph)
        graph.signature = _signature_from_schema(model.schema, has_self=False)
        return graph
    if isinstance(model, torch._C.Graph):
        graph = import_graph(model)
        graph.signature = Signature(
            [Argument(_arg_name(v.name)) for v in graph.inputs], has_self=False)
        return graph
    raise FrontendError(
        f"cannot import a {type(model).__name__}: expected a torch.jit.ScriptModule, "
        "ScriptFunction, torch._C.Graph or a path to a TorchScript archive")


def load_archive(path: str | os.PathLike) -> torch.jit.ScriptModule:
    """``torch.jit.load`` with errors that say what is wrong with the file."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such TorchScript archive: {p}")
    if p.is_dir():
        raise FrontendError(f"{p} is a directory, not a TorchScript archive")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(p), map_location="cpu")
    except Exception as e:  # torch raises RuntimeError/ValueError with long C++ traces
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FrontendError(
            f"{p} is not a TorchScript archive that torch.jit.load can read ({first})") from e


def _import_module(module: torch.jit.ScriptModule, *, freeze: bool) -> Graph:
    # A module torch.jit.freeze already froze has lost its ``training`` attribute; it is
    # taken as it is (freezing again would fail).
    if freeze and module._c.hasattr("training"):
        # Freezing needs eval mode; afterwards every submodule gets its own flag back (a
        # recursive ``train(was_training)`` would overwrite a submodule the user set apart).
        was_training = [(m, m.training) for m in module.modules()]
        module.eval()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                # (no numerics folds: see the module docstring)
                frozen = torch.jit.freeze(module, optimize_numerics=False)
        except Exception as e:
            raise FrontendError(f"freezing the module failed: {e}") from e
        finally:
            for m, training in was_training:
                m.training = training
    else:
        frozen = module
    if not hasattr(frozen, "forward"):
        raise FrontendError("the TorchScript module has no forward method")
    graph = import_graph(frozen.forward.graph, self_object=mirror_object(frozen._c))
    graph.signature = _signature_from_schema(frozen.forward.schema, has_self=True)
    return graph


def _signature_from_schema(schema: torch._C.FunctionSchema, *, has_self: bool) -> Signature:
    args = list(schema.arguments)
    if has_self:
        args = args[1:]
    return Signature(
        [Argument(a.name, a.has_default_value(), a.default_value if a.has_default_value()
                  else None, a.kwarg_only) for a in args],
        has_self=has_self)


def _arg_name(debug_name: str) -> str:
    return re.sub(r"\.\d+$", "", debug_name)


def mirror_object(value: Any, _memo: tuple[dict, dict] | None = None) -> Any:
    """A Python copy of ``value``'s state in which writes persist (see the module docstring).

    Modules become ``ScriptObjectValue``s with their attributes mirrored recursively; a module
    reachable by two paths stays one object, and so does a tensor. Tensors are cloned (only
    state the forward mutates survives freezing, so this is small). Lists, dicts and tuples
    are copied with mirrored elements. Instances of TorchScript classes already come out of
    ``getattr`` as Python objects with their own state and are kept, as are other script
    objects (custom C++ classes, ``torch.classes``), whose methods are C++.
    """
    tensors, modules = _memo if _memo is not None else ({}, {})
    memo = (tensors, modules)
    if isinstance(value, torch.Tensor):
        if id(value) not in tensors:
            tensors[id(value)] = (value, value.detach().clone())  # value held: its id stays
        return tensors[id(value)][1]
    if isinstance(value, torch._C.ScriptModule):
        if value in modules:  # ScriptObject equality and hash are the C++ object's identity
            return modules[value]
        obj = ScriptObjectValue(value._type().qualified_name())
        modules[value] = obj
        for name, attr in torch._C._jit_debug_module_iterators(value)["named_attributes"]:
            obj.attrs[name] = mirror_object(attr, memo)
        return obj
    if isinstance(value, list):
        return [mirror_object(v, memo) for v in value]
    if isinstance(value, dict):
        return {k: mirror_object(v, memo) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(mirror_object(v, memo) for v in value)
    return value


# --------------------------------------------------------------------------- graphs


def import_graph(torch_graph: torch._C.Graph, self_object: Any = None) -> Graph:
    """Convert a ``torch._C.Graph`` (copied and inlined first) into an IR graph.

    If ``self_object`` is given, the graph's first input (the module) is replaced by a
    constant holding it, so the IR graph's inputs are the user's arguments only.
    """
    tg = torch_graph.copy()
    torch._C._jit_pass_inline(tg)
    graph = Graph()
    env: dict[Any, Value] = {}
    inputs = list(tg.inputs())
    if self_object is not None:
        self_in = inputs.pop(0)
        env[self_in] = graph.constant(self_object, T.from_torch(self_in.type()))
        env[self_in].set_name("self")
    for tv in inputs:
        env[tv] = graph.add_input(T.from_torch(tv.type()), tv.debugName())
    _import_block(graph, graph.block, tg.nodes(), env)
    for tv in tg.outputs():
        graph.add_output(env[tv])
    return graph


def _import_block(graph: Graph, block: Block, nodes, env: dict[Any, Value]) -> None:
    for tn in nodes:
        node = graph.create(tn.kind())
        for ti in tn.inputs():
            node.add_input(env[ti])
        for to in tn.outputs():
            env[to] = node.add_output(T.from_torch(to.type()), to.debugName())
        schema = tn.schema()
        node.schema = None if schema == "(no schema)" else schema
        node.source = _source_of(tn)
        _import_attributes(tn, node)
        block.append(node)
        if tn.kind() == "prim::fork":
            _import_fork_subgraph(graph, node, tn.g("Subgraph"))
        for tb in tn.blocks():
            sub = node.add_block()
            for tv in tb.inputs():
                env[tv] = sub.add_input(T.from_torch(tv.type()), tv.debugName())
            _import_block(graph, sub, tb.nodes(), env)
            for tv in tb.outputs():
                sub.add_output(env[tv])


def _import_fork_subgraph(graph: Graph, node, subgraph: torch._C.Graph) -> None:
    """TorchScript keeps the forked function as the fork's ``Subgraph`` attribute, a graph
    whose inputs are the fork's inputs. In the IR it is the fork's one block, its inputs
    bound to the node's inputs. TorchScript's inliner does not enter fork subgraphs (it
    inlines them when the fork first runs), so calls inside are inlined here."""
    sg = subgraph.copy()
    torch._C._jit_pass_inline(sg)
    sub = node.add_block()
    env: dict[Any, Value] = {}
    for tv in sg.inputs():
        env[tv] = sub.add_input(T.from_torch(tv.type()), tv.debugName())
    _import_block(graph, sub, sg.nodes(), env)
    for tv in sg.outputs():
        sub.add_output(env[tv])


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def _source_of(tn: torch._C.Node) -> str | None:
    text = tn.sourceRange()
    m = _FILE_LINE.search(text) if text else None
    if not m:
        return None
    # Only the file name: the directory is noise in printouts and differs across machines.
    return f"{os.path.basename(m.group(1))}:{m.group(2)}"


def _import_attributes(tn: torch._C.Node, node) -> None:
    if tn.kind() == "prim::PythonOp":
        # A Python callable the script calls (``@torch.jit.ignore``, a module kept as a
        # Python value): the node holds it, and which inputs are values ("d") or scalars
        # fixed at compile time ("c", ``scalar_args``).
        node.attrs.update(callable=tn.pyobj(), cconv=tn.cconv(), name=tn.pyname(),
                          scalar_args=tuple(tn.scalar_args()))
        return
    if tn.kind() == "prim::Constant":
        if tn.hasAttribute("value") or tn.output().type().kind() != "NoneType":
            node.attrs["value"] = _constant_value(tn)
        return
    for name in tn.attributeNames():
        kind = tn.kindOf(name)
        if tn.kind() == "prim::fork" and name == "Subgraph":
            continue  # becomes the fork's block (``_import_fork_subgraph``)
        getter = {
            "i": tn.i, "f": tn.f, "s": tn.s, "t": tn.t, "is": tn.is_, "fs": tn.fs,
            "ss": tn.ss, "ts": tn.ts, "ival": tn.ival, "c": getattr(tn, "c", None),
        }.get(kind)
        if kind == "tys":
            node.attrs[name] = [T.from_torch(t) for t in tn.tys(name)]
        elif kind == "ty":
            node.attrs[name] = T.from_torch(tn.ty(name))
        elif getter is not None:
            node.attrs[name] = getter(name)
        else:
            raise FrontendError(
                f"{tn.kind()} has attribute {name!r} of kind {kind!r}, which the importer "
                "does not read")


def _constant_value(tn: torch._C.Node) -> Any:
    out = tn.output()
    kind = out.type().kind()
    if kind == "FunctionType":
        return UnrepresentableConstant(str(out.type()))
    try:
        value = out.toIValue()
    except (RuntimeError, TypeError, ValueError):
        return UnrepresentableConstant(str(out.type()))
    if kind == "DeviceObjType" and isinstance(value, str):
        value = torch.device(value)
    if isinstance(value, torch.Tensor):
        # Constants are read-only in the runtime's contract; keep the frozen tensor as is.
        value = value.detach()
    return value
