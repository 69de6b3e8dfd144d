"""``fuse_regions``: runs of small operators → one ``static_runtime::fused_region`` node,
compiled into fused kernels by Inductor (``StaticModuleOptions(fusion_compiler=...)``).

Every node we run costs a trip through a Python binding into ATen (about 1 µs); a compiled
region costs one call (about 3 µs) whatever it holds, and its kernels read each input once.
So a region pays when it holds several operators that Inductor turns into loops of its own:

* **kernels** — operators PyTorch tags ``pointwise`` or ``reduction`` (``add``, ``tanh``,
  ``where``, ``gelu``, comparisons, ``sum``, ``amax``...) and the normalisations
  (``softmax``, ``log_softmax``, ``layer_norm``, ``group_norm``), which Inductor decomposes
  into those;
* **views and casts** — operators whose result may alias their input (``view``, ``transpose``,
  ``expand``, ``select``, ``to``, ``contiguous``...): inside a region they cost nothing, but
  never as a region's result (a compiled view of an input would alias it, and the alias
  analysis treats the region's results as fresh tensors).

A region is a run of such nodes of one block (the top level, an ``If`` branch or a ``Loop``
body), in program order, with at least ``MIN_KERNELS`` kernels. Other nodes between its
members stay where they are, and the region runs where its last member was, so a node
between members must not read a member's result (the region ends there) and must not act on
the world or write anything (``AliasDb``; the region would read after the write); control
flow ends a region. A member:

* is an ``aten`` operator with a schema that writes nothing, draws no random numbers, and
  has no data-dependent output shape; a view that takes a ``storage_offset`` (``as_strided``)
  is not one: it addresses its input's storage, where compiled code addresses the input;
* takes tensors, numbers (constants are copied into the region; others become inputs, passed
  to the compiled code as 0-dim tensors of the dtype that keeps the operator's promotion),
  and constant everything else (lists of sizes, dims, dtypes, ``None``);
* returns tensors.

Tensor constants are inputs of the region, not part of it, so a compiled region holds no
weights and a saved module's file holds them once.

The subgraph is the region's own ``Graph`` (attribute ``SUBGRAPH``), printed under the node in
``mod.graph``; passes that walk the graph do not enter it.
"""

from __future__ import annotations

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import SUBGRAPH, Block, Graph, Node, Value
from static_runtime.ir.own_ops import SPECIALIZED_SCHEMAS
from static_runtime.passes.alias import AliasDb
from static_runtime.passes.constant_propagation import constant_value
from static_runtime.passes.effects import has_side_effects, is_nondeterministic

FUSED_REGION = "static_runtime::fused_region"

#: Fewest kernels a region must hold to be compiled. On bare chains a compiled call pays from
#: three small operators (``benchmarks/fusion.py``, "region size"), but in models the
#: three-kernel regions measured slower (BERT, RoBERTa, BART, DCN-v2: 1.01–1.05 × without
#: them): a region's results are fresh tensors, not arena memory, and its arguments are
#: checked on every call; from four kernels on they paid (GPT-2's GELU, T5's RMSNorm, a
#: two-tower model's normalisation, the control-flow loop body). BENCHMARKS.md, issue 12.
MIN_KERNELS = 4

#: Normalisations Inductor decomposes into reductions and pointwise loops.
NORMALIZATIONS = frozenset({
    "aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax",
    "aten::layer_norm", "aten::native_layer_norm", "aten::group_norm",
})

_KERNEL_TAGS = frozenset({"pointwise", "reduction"})

#: ``static_runtime::add``/``sub`` (``passes/alpha.py``: ``aten::add``/``sub`` whose alpha was
#: 1) → the ATen overload they came from; in a region they are that again, with alpha 1.
_ATEN_FORM = {
    schema: str(getattr(getattr(torch.ops.aten, name.split("::")[1].split(".")[0]),
                        name.split(".")[1])._schema)
    for name, schema in SPECIALIZED_SCHEMAS.items()
}
_SCALARS = (T.Int, T.Float, T.Bool, T.Number)


def fuse_regions(graph: Graph) -> bool:
    db = AliasDb(graph)
    classes = {n: member_class(n) for n in graph.walk()}
    blocks = [graph.block] + [b for n in graph.walk() for b in n.blocks]
    changed = False
    for block in blocks:
        for region in _regions_of(block, db, classes):
            changed |= _form(graph, region, classes)
    return changed


# --------------------------------------------------------------------------- membership


def member_class(node: Node) -> str | None:
    """``"kernel"``, ``"view"``, or None when ``node`` cannot be in a region."""
    schema = _ATEN_FORM.get(node.schema, node.schema)
    if node.blocks or schema is None or not schema.startswith("aten::"):
        return None
    info = S.parse(schema)
    if info.writes_any_input() or has_side_effects(node) or is_nondeterministic(node):
        return None
    tags = S.tags(schema)
    if tags & S.DATA_DEPENDENT_TAGS:
        return None
    if not node.outputs or not all(isinstance(v.type, T.TensorType) for v in node.outputs):
        return None
    for v in node.inputs:
        if not _acceptable_input(v):
            return None
    numbers = dynamic_scalar_positions(node)
    if numbers and S.scalar_as_tensor_overload(schema, numbers) is None:
        return None
    if any(r.alias_sets for r in info.returns):
        # A view taking a storage offset (as_strided) addresses its input's storage, not
        # its elements; compiled code addresses an input from its first element, so on an
        # input that starts inside its storage it read other elements.
        if any(a.name == "storage_offset" for a in info.arguments):
            return None
        return "view"
    if tags & _KERNEL_TAGS or info.name in NORMALIZATIONS:
        return "kernel"
    return None


def dynamic_scalar_positions(node: Node) -> frozenset[int]:
    """Positions of the inputs that are numbers known only at run time."""
    return frozenset(i for i, v in enumerate(node.inputs)
                     if v.type in _SCALARS and not constant_value(v)[0])


def _acceptable_input(v: Value) -> bool:
    if isinstance(v.type, T.TensorType) or v.type in _SCALARS:
        return True
    return constant_value(v)[0]  # sizes, dims, dtypes, None...: only as constants


def _regions_of(block: Block, db: AliasDb,
                classes: dict[Node, str | None]) -> list[list[Node]]:
    regions: list[list[Node]] = []
    current: list[Node] = []
    produced: set[Value] = set()

    def close() -> None:
        nonlocal current, produced
        if current:
            regions.extend(_split_at_escaping_views(current, classes))
        current, produced = [], set()

    for node in block.nodes:
        if classes[node] is not None:
            current.append(node)
            produced.update(node.outputs)
            continue
        if node.kind == "prim::Constant":
            continue
        # control flow ends a region whatever its blocks read
        if (node.blocks or any(v in produced for v in node.inputs) or has_side_effects(node)
                or db.writes(node)):
            close()
    close()
    return [r for r in regions if _kernels(r, classes) >= MIN_KERNELS]


def _kernels(region: list[Node], classes: dict[Node, str | None]) -> int:
    return sum(classes[n] == "kernel" for n in region)


def _escaping(region: list[Node]) -> set[Value]:
    members = set(region)
    out = set()
    for node in region:
        for v in node.outputs:
            if any(u.user not in members for u in v.uses):
                out.add(v)
    return out


def _split_at_escaping_views(region: list[Node],
                             classes: dict[Node, str | None]) -> list[list[Node]]:
    """Regions whose results are all computed (not views): a view whose result is read
    outside runs outside, and the region is cut there (the members after it may read it)."""
    escaping = _escaping(region)
    for i, node in enumerate(region):
        if classes[node] == "view" and node.outputs[0] in escaping:
            return (_split_at_escaping_views(region[:i], classes)
                    + _split_at_escaping_views(region[i + 1:], classes))
    return [region] if region else []


# --------------------------------------------------------------------------- rewriting


def _form(graph: Graph, region: list[Node], classes: dict[Node, str | None]) -> bool:
    members = set(region)
    escaping = _escaping(region)
    results = [v for n in region for v in n.outputs if v in escaping]
    if not results:
        return False
    sub = Graph()
    env: dict[Value, Value] = {}
    inputs: list[Value] = []
    for node in region:
        for v in node.inputs:
            if v in env:
                continue
            known, _ = constant_value(v)
            if known and not isinstance(v.type, T.TensorType):
                const = sub.create("prim::Constant", output_types=[v.type])
                const.attrs = dict(v.node.attrs)
                sub.block.append(const)
                env[v] = const.output
            else:
                inputs.append(v)
                env[v] = sub.add_input(v.type, v.name)
        args = [env[v] for v in node.inputs]
        schema = _ATEN_FORM.get(node.schema, node.schema)
        if schema != node.schema:  # alpha 1, as it was before passes/alpha.py
            one = sub.create("prim::Constant", output_types=[T.Int])
            one.attrs["value"] = 1
            sub.block.append(one)
            args.append(one.output)
        copy = sub.create(S.parse(schema).name, args)
        copy.schema, copy.attrs, copy.source = schema, dict(node.attrs), node.source
        for o in node.outputs:
            env[o] = copy.add_output(o.type, o.name)
        sub.block.append(copy)
    for v in results:
        sub.add_output(env[v])

    fused = graph.create(FUSED_REGION, inputs, output_types=[v.type for v in results])
    fused.attrs[SUBGRAPH] = sub
    fused.attrs["kernels"] = _kernels(region, classes)
    fused.source = region[-1].source
    fused.insert_after(region[-1])
    names = [v.name for v in results]
    for v, new in zip(results, fused.outputs):
        v.replace_all_uses_with(new)
    for node in reversed(region):
        assert all(u.user in members for v in node.outputs for u in v.uses)
        node.destroy()
    for new, name in zip(fused.outputs, names):
        new.set_name(name)
    return True
