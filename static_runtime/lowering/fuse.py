"""Lower the parts of a TorchScript module our runtime supports into it; the TorchScript
interpreter keeps the rest (the seed's ``torch._C._fuse_to_static_module``).

``fuse_to_static_runtime(scripted)`` freezes a copy of the module and walks its forward graph.
A *region* is a maximal run of consecutive nodes of one block that

* our registry can run (``ops.registry.select`` claims the node; for ``prim::If`` and
  ``prim::Loop``, every node of their blocks too),
* write into none of their inputs (no ``(a!)`` in the schema: a region runs as one opaque call,
  and TorchScript must not lose track of a mutation), and
* take from outside and give to outside only values a custom operator can carry: tensors,
  ``int``, ``float``, ``bool``, ``str``, ``Tensor?`` and lists of tensors, ints or floats
  (constants it reads are copied into it instead).

Each region becomes a ``StaticModule`` built from a ``torch._C.Graph`` of its nodes, and a
custom operator ``static_runtime_fused::region_N`` (``torch.library``, alias analysis
``CONSERVATIVE`` so TorchScript assumes nothing about what it reads or returns) that calls
it. The region's nodes are replaced by one call of that operator, and the module keeps
running in the TorchScript interpreter.

The operators exist in this process only. ``torch.jit.save`` of the returned module is
refused with an error saying so; an archive holding a fused module some other way (saved as
a submodule of another module) loads only in a process that fused the same regions under the
same names, and fails elsewhere with TorchScript's "Unknown builtin op".
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from static_runtime.frontend import FrontendError
from static_runtime.frontend.torchscript import import_graph
from static_runtime.ir import schema as S
from static_runtime.ops.registry import UnsupportedOperatorError, select
from static_runtime.runtime.module import StaticModule
from static_runtime.runtime.options import StaticModuleOptions

NAMESPACE = "static_runtime_fused"


@dataclass(frozen=True)
class FusedRegion:
    """One lowered region: the operator that calls it and the module that runs it."""

    op: str
    module: StaticModule
    #: kinds of the region's top-level nodes, in order
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class FusionReport:
    """What ``fuse_to_static_runtime`` did (``fused.static_runtime_fusion``)."""

    regions: tuple[FusedRegion, ...]
    #: top-level kinds left to the TorchScript interpreter (constants not counted)
    left_to_torchscript: tuple[str, ...]


def fuse_to_static_runtime(module: torch.jit.ScriptModule,
                           options: StaticModuleOptions | None = None, *,
                           min_nodes: int = 1) -> torch.jit.ScriptModule:
    """A frozen copy of ``module`` whose supported regions run in our runtime.

    ``options`` are the regions' ``StaticModuleOptions``; regions with fewer than
    ``min_nodes`` nodes (constants not counted) are left to TorchScript. The module given is
    not changed. The result's ``static_runtime_fusion`` attribute is a ``FusionReport``.
    """
    if not isinstance(module, torch.jit.ScriptModule):
        raise TypeError(f"fuse_to_static_runtime takes a torch.jit.ScriptModule, got "
                        f"{type(module).__name__} (script it first: torch.jit.script(model))")
    options = options or StaticModuleOptions()
    frozen = _freeze(module)
    graph = frozen.graph
    excluded, writes = _unsupported(graph, options)
    regions = _regions(graph.block(), excluded, writes, min_nodes)
    fused: list[FusedRegion] = []
    for nodes in regions:
        region = _lower(graph, nodes, options)
        if region is not None:
            fused.append(region)
    torch._C._jit_pass_dce(graph)
    graph.lint()
    left = tuple(n.kind() for n in graph.nodes()
                 if n.kind() != "prim::Constant" and not n.kind().startswith(NAMESPACE + "::"))
    report = FusionReport(tuple(fused), left)
    # Plain Python attributes of the wrapper: TorchScript never sees them.
    object.__setattr__(frozen, "static_runtime_fusion", report)
    object.__setattr__(frozen, "save", _refuse_save)
    object.__setattr__(frozen, "save_to_buffer", _refuse_save)
    return frozen


def _refuse_save(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError(
        "this module was fused by static_runtime.fuse_to_static_runtime: its "
        f"{NAMESPACE}::region_N operators exist in this process only, so an archive of it "
        "could not be loaded anywhere else. Save the original TorchScript module and fuse it "
        "again after loading")


def _freeze(module: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    # As the frontend does: eval mode to freeze, every submodule's own flag back afterwards.
    was_training = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.freeze(module)
    except Exception as e:
        raise FrontendError(f"freezing the module failed: {e}") from e
    finally:
        for m, training in was_training:
            m.training = training


# --------------------------------------------------------------------------- finding regions


def _walk(block: torch._C.Block):
    for n in block.nodes():
        yield n
        for b in n.blocks():
            yield from _walk(b)


def _reads(node: torch._C.Node):
    """Every value ``node`` and the nodes in its blocks read (block outputs included)."""
    yield from node.inputs()
    for b in node.blocks():
        for n in b.nodes():
            yield from _reads(n)
        yield from b.outputs()


def _unsupported(graph: torch._C.Graph, options: StaticModuleOptions
                 ) -> tuple[set[torch._C.Node], dict[torch._C.Node, list[torch._C.Value]]]:
    """Nodes that may not be in a region — the registry refuses them, they write into
    something other than a list made by ``prim::ListConstruct``, or a node in one of their
    blocks is such a node — and the lists each remaining writer writes into."""
    ir = import_graph(graph)  # a copy, same nodes in the same order
    ts_nodes = list(_walk(graph.block()))
    ir_nodes = list(ir.walk())
    if [n.kind() for n in ts_nodes] != [n.kind for n in ir_nodes]:
        raise RuntimeError("internal error: the imported graph's nodes do not line up with "
                           "the TorchScript graph's")
    excluded: set[torch._C.Node] = set()
    writes: dict[torch._C.Node, list[torch._C.Value]] = {}
    for tn, node in zip(ts_nodes, ir_nodes):
        if tn.kind() in _COPIED:
            continue
        written = [i for i, a in enumerate(S.parse(node.schema).arguments if node.schema
                                           else ()) if a.is_write and i < len(node.inputs)]
        bad = any(node.inputs[i].node.kind != "prim::ListConstruct" for i in written)
        if written and not bad:
            writes[tn] = [list(tn.inputs())[i] for i in written]
        if not bad:
            try:
                select(node, enable_out_variant=options.enable_out_variant,
                       fast_bindings=options.fast_bindings)
            except UnsupportedOperatorError:
                bad = True
        if bad:
            while tn is not None:  # the node and every control-flow node around it
                excluded.add(tn)
                tn = tn.owningBlock().owningNode()
    return excluded, writes


def _regions(block: torch._C.Block, excluded: set, writes: dict,
             min_nodes: int) -> list[list[torch._C.Node]]:
    """Maximal runs of non-excluded nodes whose boundary values a custom operator can carry;
    a boundary it cannot carry excludes the node on the region's side, and runs are found
    again (each round excludes at least one node, so this ends). A list a region writes into
    must be made in it: one passed in arrives as a copy, and the write would be lost."""
    while True:
        runs = _runs(block, excluded)
        newly = set()
        for run in runs:
            inputs, outputs = _boundary(run)
            members = set(run)
            written = {v: w for w, vs in writes.items() if _top(w, members) is not None
                       for v in vs}
            for v, users in inputs:
                if _schema_type(v.type()) is None:
                    newly.update(users)
                elif v in written:
                    newly.add(_top(written[v], members))
            for v in outputs:
                if _schema_type(v.type()) is None:
                    newly.add(_top(v.node(), set(run)))
        if not newly:
            return [r for r in runs
                    if sum(1 for n in r if n.kind() != "prim::Constant") >= min_nodes]
        excluded |= newly


def _runs(block: torch._C.Block, excluded: set) -> list[list[torch._C.Node]]:
    runs: list[list[torch._C.Node]] = []
    current: list[torch._C.Node] = []
    for n in block.nodes():
        if n.kind() in _COPIED:
            continue  # copied into the regions that read it; never splits a run
        if n in excluded:
            if current:
                runs.append(current)
            current = []
            for b in n.blocks():
                runs += _runs(b, excluded)
        else:
            current.append(n)
    if current:
        runs.append(current)
    return runs


def _top(node: torch._C.Node, members: set) -> torch._C.Node | None:
    """The member of ``members`` that is ``node`` or holds it in a block, or None."""
    while node is not None:
        if node in members:
            return node
        node = node.owningBlock().owningNode()
    return None


def _boundary(run: list[torch._C.Node]):
    """``(inputs, outputs)`` of a region: the non-constant values its nodes read that are
    defined outside it, each with the region's top-level nodes that read it, and the values
    it defines that are read outside it. Both in first-use/definition order."""
    members = set(run)
    inputs: dict[Any, list] = {}
    outputs: list = []
    for top in run:
        for v in _reads(top):
            if v.node().kind() in _COPIED or _top(v.node(), members) is not None:
                continue
            inputs.setdefault(v, [])
            if top not in inputs[v]:
                inputs[v].append(top)
        for v in top.outputs():
            if any(_top(u.user, members) is None for u in v.uses()):
                outputs.append(v)
    return list(inputs.items()), outputs


#: Nodes without inputs or effects, copied into every region that reads them (an uninitialized
#: value, which TorchScript puts where a branch raises, is not a value an operator can pass).
_COPIED = frozenset({"prim::Constant", "prim::Uninitialized"})

_SCALARS = {"TensorType": "Tensor", "IntType": "int", "FloatType": "float", "BoolType": "bool",
            "StringType": "str"}


def _schema_type(t: torch._C.JitType) -> str | None:
    """How a custom operator's schema spells a value of type ``t``; None if it cannot."""
    kind = t.kind()
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "ListType" and t.getElementType().kind() in ("TensorType", "IntType",
                                                            "FloatType", "BoolType"):
        return _SCALARS[t.getElementType().kind()] + "[]"
    if kind == "OptionalType" and t.getElementType().kind() == "TensorType":
        return "Tensor?"
    return None


# --------------------------------------------------------------------------- lowering


_LIBRARY: list[torch.library.Library] = []  # kept alive: dropping it deregisters the ops
_counter = itertools.count()


def _lower(graph: torch._C.Graph, run: list[torch._C.Node],
           options: StaticModuleOptions) -> FusedRegion | None:
    """Replace ``run`` by a call of a new operator running it in a ``StaticModule``; None (the
    run left as it is) if the module cannot be built."""
    boundary_inputs, outputs = _boundary(run)
    inputs = [v for v, _ in boundary_inputs]
    sub = _subgraph(run, inputs, outputs)
    try:
        module = StaticModule(sub, options=options)
    except (UnsupportedOperatorError, FrontendError):
        return None
    name = f"region_{next(_counter)}"
    args = ", ".join(f"{_schema_type(v.type())} in{i}" for i, v in enumerate(inputs))
    rets = ", ".join(_schema_type(v.type()) for v in outputs)
    if not _LIBRARY:
        _LIBRARY.append(torch.library.Library(NAMESPACE, "FRAGMENT"))
    lib = _LIBRARY[0]
    lib.define(f"{name}({args}) -> ({rets})", alias_analysis="CONSERVATIVE")
    lib.impl(name, _kernel(module, len(outputs)), "CompositeExplicitAutograd")

    kinds = tuple(n.kind() for n in run)
    call = graph.create(f"{NAMESPACE}::{name}", inputs, len(outputs))
    call.insertBefore(run[0])
    for old, new in zip(outputs, call.outputs()):
        new.setType(old.type())
        old.replaceAllUsesWith(new)
    for n in reversed(run):
        n.destroy()
    return FusedRegion(f"{NAMESPACE}::{name}", module, kinds)


def _subgraph(run: list[torch._C.Node], inputs: list, outputs: list) -> torch._C.Graph:
    sub = torch._C.Graph()
    env: dict[Any, Any] = {}
    for i, v in enumerate(inputs):
        env[v] = sub.addInput(f"in{i}")
        env[v].setType(v.type())

    def lookup(v):
        if v not in env:  # a constant defined outside the region: copied in
            const = sub.createClone(v.node(), lambda x: x)
            sub.insertNode(const)
            env[v] = const.output()
        return env[v]

    for n in run:
        for v in _reads(n):
            if v.node().kind() in _COPIED:
                lookup(v)  # before the clone: createClone must not be re-entered
        clone = sub.createClone(n, lookup)
        sub.insertNode(clone)
        for old, new in zip(n.outputs(), clone.outputs()):
            env[old] = new
    for v in outputs:
        sub.registerOutput(env[v])
    return sub


def _kernel(module: StaticModule, n_outputs: int):
    def run(*args: Any) -> Any:
        out = module(*args)
        if n_outputs == 1:
            return out
        return tuple(out)

    return run
