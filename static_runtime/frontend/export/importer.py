"""An exported program → an IR graph (``import_export``, which also takes a ``.pt2`` path or
an ``nn.Module`` plus example inputs and gets the program first).

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

import os
import re
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from static_runtime.frontend.export.nodes import ImportBlock, source_of, type_of_val
from static_runtime.frontend.export.program import export_module, load_pt2
from static_runtime.frontend.export.signature import (
    ExportSignature,
    input_guard,
    ranges_of,
    user_paths,
)
from static_runtime.frontend.torchscript import FrontendError
from static_runtime.ir import types as T
from static_runtime.ir.graph import Argument, Graph, Value


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
    return Importer(model).run()



class Importer:
    """Makes the IR graph of one exported program: lifted constants, user inputs, nodes,
    user outputs and the ``ExportSignature``."""

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
        paths = user_paths(ep)
        for node, spec in zip(placeholders, sig.input_specs, strict=True):
            if spec.kind == InputKind.USER_INPUT:
                val = node.meta.get("val")
                v = graph.add_input(type_of_val(val, node), node.name)
                env[node] = v
                names.append(Argument(v.name))
                guards.append(input_guard(paths[len(guards)], val))
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER,
                               InputKind.CONSTANT_TENSOR):
                env[node] = self._lifted(node, spec)
            else:
                raise FrontendError(
                    f"input {node.name!r} of kind {spec.kind.name} is not supported (only "
                    "user inputs, parameters, buffers and constant tensors are)")
        _refuse_inplace_writes(gm.graph, placeholders, sig.input_specs)
        top = ImportBlock(self, gm, graph.block, env)
        top.nodes(n for n in gm.graph.nodes if n.op not in ("placeholder", "output"))
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        for value, spec in zip(out_node.args[0], sig.output_specs, strict=True):
            if spec.kind == OutputKind.USER_OUTPUT:
                graph.add_output(top.value(value))
        call = ep.call_spec
        graph.signature = ExportSignature(
            names, in_spec=call.in_spec, out_spec=call.out_spec, guards=tuple(guards),
            ranges=ranges_of(ep))
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
                        f"{n.name!r} ({schema.name}, {source_of(n) or 'no source'}) writes "
                        f"{owner[arg]} in place: the runtime's constants are read-only and its "
                        "inputs are never written; compute a new tensor instead")
                sources.update({s: owner[arg] for s in a.alias_info.before_set})
        for r in schema.returns:  # a view of a protected tensor is protected too
            if r.alias_info is not None:
                for s in r.alias_info.before_set & set(sources):
                    owner[n] = sources[s]



def _legal(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", name)

