"""``batch_embeddings``: lookups in several constant tables, one per column (or row) of one
index tensor, joined — a recommender's sparse features, one table per feature — become one
lookup in the tables laid end to end (FBGEMM's *table-batched embeddings*).

Matched by schema and constants; a run of list elements, in order, each one of::

    r_t = aten::embedding(W_t, aten::select.int(X, 1, c + t), ...)                 (any padding_idx)
    r_t = aten::embedding_bag.padding_idx(W_t, I_t, O_t, _, mode, _, None, False, None)[0]

with ``I_t, O_t`` either

* the flat indices and bag starts of ``S_t = select(X, 1, c + t)`` as
  ``nn.functional.embedding_bag`` makes them for a 2-D input — ``reshape(S_t, [-1])`` and
  ``arange(0, numel(S_t), size(S_t, 1), dtype(S_t), None, device(S_t), None)`` — written out
  (traced, with the dtype and device as constants) or in its ``if input.dim() == 2:`` branch
  (scripted; the other branch raises on every path); or ``reshape(S_t, [-1])`` and
  ``arange(0, end, step, ...)`` with ``end`` and ``step`` ints computed otherwise (an exported
  program's symbolic sizes) or that ``arange`` folded into a constant (one exported at a
  fixed size) — the kernel compares them with the indices' sizes; or
* rows ``select(X, 0, c + t)`` and ``select(O, 0, c + t)`` of flat indices and bag starts
  (DLRM's form), as a trace passes them or through that function's 1-D branch (whose other
  paths raise and whose only work is checking ranks).

The tables ``W_t`` are constants of one floating dtype and width, at most
``MAX_TABLE_BYTES`` in all (they are copied end to end); the bags share ``mode``. Each ``r_t``
is used only by the list; the list (a ``prim::ListConstruct`` and the ``aten::append`` calls
after it, in one block) only by ``aten::cat(list, 1)`` for columns, ``aten::stack(list, 1)``
for rows, after its appends; nothing writes ``X`` (or ``O``). At least two such elements in a
row, over one ``X`` with consecutive columns (rows), become one element: a
``static_runtime::embeddings``, ``embedding_bags`` or ``embedding_bag_rows`` node
(``ir/own_ops.py``, ``ops/embeddings.py``) whose value is those elements joined along
dimension 1; a stack becomes a cat of the other elements unsqueezed at 1 and the rows
(``(batch, tables, width)``), which is what a stack is.

Its kernel shifts each table's indices by the table's first row and looks all of them up in
one call. What the tables end to end would hide — an index out of its own table's range, a
row of bag starts that does not start at 0, decreases or runs past its row — or an input of
another rank runs the lookups one by one, as before, and raises (or computes) what they did.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Block, Graph, Node, Value
from static_runtime.ir.own_ops import EMBEDDING_BAG_ROWS, EMBEDDING_BAGS, EMBEDDINGS
from static_runtime.passes.alias import AliasDb
from static_runtime.passes.constant_propagation import constant_or_unknown as _const

#: Tables larger than this in all are left alone: batching copies them end to end.
MAX_TABLE_BYTES = 256 * 2**20

_SCHEMAS = {"embeddings": EMBEDDINGS, "embedding_bags": EMBEDDING_BAGS,
            "embedding_bag_rows": EMBEDDING_BAG_ROWS}
_CAT = str(torch.ops.aten.cat.default._schema)
_UNSQUEEZE = str(torch.ops.aten.unsqueeze.default._schema)


@dataclass
class _Lookup:
    """One list element that is a lookup in a constant table by a column of ``x``."""

    value: Value
    x: Value
    column: int
    weight: torch.Tensor
    #: None for ``embedding``; the ``embedding_bag`` mode (0 sum, 1 mean, 2 max) else
    mode: int | None
    #: the nodes computing it, destroyed once it is batched (users before producers)
    nodes: list[Node]
    #: the bag starts' tensor (row ``column`` of it) of a lookup by a row of flat indices
    offsets: Value | None = None
    #: ``(end, step)`` of the bag starts ``arange(0, end, step)`` of a column's bags, when
    #: they are not the column's ``numel`` and row length as the graph computes them (ints:
    #: read from an ``arange`` folded into a constant)
    bounds: tuple[Value | int, Value | int] | None = None

    @property
    def kind(self) -> str:
        """``embeddings``, ``embedding_bags`` (by columns) or ``embedding_bag_rows``."""
        if self.offsets is not None:
            return "embedding_bag_rows"
        return "embeddings" if self.mode is None else "embedding_bags"


def batch_embeddings(graph: Graph) -> bool:
    changed = False
    db = None
    for node in list(graph.walk()):
        if node.schema_name() in ("aten::cat", "aten::stack") and node.owning_block is not None:
            if db is None:
                db = AliasDb(graph)  # (what may write the indices: only where a list is read)
            changed |= _batch_list(graph, node, db)
    return changed


def _list_elements(cat: Node) -> tuple[Node, list[Node], list[Value]] | None:
    """The list ``cat`` concatenates as its construction, the appends after it and its
    elements in order, when nothing else uses the list and ``cat`` comes after them."""
    build = cat.inputs[0].node
    if build is None or build.kind != "prim::ListConstruct" \
            or build.owning_block is not cat.owning_block:
        return None
    appends, elements = [], list(build.inputs)
    for use in build.output.uses:
        user = use.user
        if user is cat:
            continue
        if user.schema_name() != "aten::append.t" or use.index != 0 \
                or user.owning_block is not cat.owning_block or not user.is_before(cat) \
                or user.output.uses:
            return None
        appends.append(user)
    if len(build.output.uses) != len(appends) + 1:
        return None  # (the cat uses it more than once)
    appends.sort(key=lambda n: n.owning_block.nodes.index(n))
    elements += [a.inputs[1] for a in appends]
    return build, appends, elements


def _column(s: Value, along: int = 1) -> tuple[Value, int] | None:
    """``(X, c)`` for ``s = aten::select.int(X, along, c)`` with constant ``c ≥ 0``."""
    node = s.node
    if node is None or node.schema_name() != "aten::select.int":
        return None
    dim, index = _const(node.inputs[1]), _const(node.inputs[2])
    if dim != along or type(index) is not int or index < 0:
        return None
    return node.inputs[0], index


def _table(value: Value) -> torch.Tensor | None:
    w = _const(value)
    if isinstance(w, torch.Tensor) and w.dim() == 2 and w.is_floating_point() \
            and w.layout == torch.strided and w.device.type == "cpu" and w.shape[0] > 0:
        return w
    return None


def _embedding(r: Value) -> _Lookup | None:
    node = r.node
    if node is None or node.schema_name() != "aten::embedding" or r.offset != 0:
        return None
    weight = _table(node.inputs[0])
    found = _column(node.inputs[1])
    if weight is None or found is None or len(node.inputs[1].uses) != 1:
        return None
    return _Lookup(r, *found, weight, None, [node, node.inputs[1].node])


def _flat_and_starts(s: Value, flat: Value, starts: Value
                     ) -> tuple[list[Node], tuple[Value, Value] | None] | None:
    """The nodes of ``flat = reshape(s, [-1])`` and ``starts = arange(0, end, step, dtype,
    None, device, pin_memory)`` (users before producers), and ``(end, step)`` — None when
    they are ``numel(s)`` and ``size(s, 1)`` (whose nodes are then among the nodes), as a
    script or trace computes them; ints computed otherwise (an exported program's symbolic
    sizes) are kept, and the kernel compares them with the indices' sizes. The dtype
    ``prim::dtype(s)`` or an integer one (``embedding_bag`` takes int32 and int64 indices and
    bag starts in any mix), the device ``prim::device(s)`` or the CPU."""
    reshape, arange = flat.node, starts.node
    if reshape is None or reshape.schema_name() != "aten::reshape" \
            or reshape.inputs[0] is not s or _const(reshape.inputs[1]) not in ([-1], (-1,)):
        return None
    folded = _const(starts)
    if isinstance(folded, torch.Tensor):
        # an arange of constants folded (a program exported at one size): its bounds
        step = _arange_step(folded)
        if step is None:
            return None
        return [reshape], (len(folded) * step, step)
    if arange is None or arange.schema_name() != "aten::arange.start_step" \
            or len(arange.inputs) != 7 or _const(arange.inputs[0]) != 0 \
            or _const(arange.inputs[4]) is not None \
            or _const(arange.inputs[6]) not in (None, False):
        return None
    nodes = [reshape, arange]
    end, step = arange.inputs[1:3]
    numel, size = end.node, step.node
    bounds: tuple[Value, Value] | None = (end, step)
    if numel is not None and numel.schema_name() == "aten::numel" and numel.inputs[0] is s \
            and size is not None and size.schema_name() == "aten::size.int" \
            and size.inputs[0] is s and _const(size.inputs[1]) == 1:
        nodes += [numel, size]
        bounds = None
    elif not (end.type == T.Int and step.type == T.Int):
        return None
    for value, kind, constants in ((arange.inputs[3], "prim::dtype",
                                    (3, 4, torch.int32, torch.int64)),
                                   (arange.inputs[5], "prim::device", (torch.device("cpu"),))):
        if value.node is not None and value.node.kind == kind and value.node.inputs[0] is s:
            nodes.append(value.node)
        elif _const(value) not in constants:
            return None
    return nodes, bounds


def _arange_step(t: torch.Tensor) -> int | None:
    """``k`` if ``t`` is ``arange(0, n · k, k)`` of an integer dtype with ``n ≥ 2``, else None."""
    if t.dim() != 1 or len(t) < 2 or t.dtype not in (torch.int32, torch.int64) \
            or t.device.type != "cpu":
        return None
    step = int(t[1])
    if step <= 0 or not torch.equal(t, torch.arange(0, len(t) * step, step, dtype=t.dtype)):
        return None
    return step


def _always_raises(block: Block) -> bool:
    for node in block.nodes:
        if node.kind == "prim::RaiseException":
            return True
        if node.kind == "prim::If" and all(_always_raises(b) for b in node.blocks):
            return True
    return False


def _embedding_bag(r: Value) -> _Lookup | None:
    node = r.node
    if node is None or node.schema_name() != "aten::embedding_bag.padding_idx" \
            or r.offset != 0 or any(o.uses for o in node.outputs[1:]):
        return None
    weight = _table(node.inputs[0])
    mode = _const(node.inputs[4])
    if weight is None or mode not in (0, 1, 2) or _const(node.inputs[6]) is not None \
            or _const(node.inputs[7]) is not False or _const(node.inputs[8]) is not None:
        return None
    flat, starts = node.inputs[1], node.inputs[2]
    if len(flat.uses) != 1 or len(starts.uses) != 1:
        return None
    rows = _flat_rows(flat, starts)
    if rows is not None:
        (x, column), (offsets, same), prologue = rows
        if same != column:
            return None
        return _Lookup(r, x, column, weight, mode, [node, *prologue], offsets)
    branch = flat.node
    if branch is not None and branch.kind == "prim::If" and starts.node is branch:
        # scripted: ``if input.dim() == 2: <flat, starts> else: <raises>``
        if (flat.offset, starts.offset) != (0, 1) or len(branch.outputs) != 2:
            return None
        taken, other = branch.blocks
        s = _ranked(branch.inputs[0], 2)
        if s is None or not _always_raises(other):
            return None
        inner = _flat_and_starts(s, *taken.outputs)
        if inner is None or inner[1] is not None:
            return None
        nodes, bounds = [node, branch], None
    else:
        s = flat.node.inputs[0] if flat.node is not None and flat.node.inputs else None
        inner = None if s is None else _flat_and_starts(s, flat, starts)
        if inner is None:
            return None
        prologue, bounds = inner
        # the select is read only by what goes with the lookup (reshape, numel, size, ...)
        if any(len(n.output.uses) != 1 for n in prologue[2:]) \
                or len(s.uses) != sum(s in n.inputs for n in prologue):
            return None
        nodes = [node, *prologue]
    found = _column(s)
    if found is None:
        return None
    return _Lookup(r, *found, weight, mode, nodes, bounds=bounds)


def _ranked(cond: Value, rank: int, op: str = "aten::eq.int") -> Value | None:
    """``x`` if ``cond`` is ``op(dim(x), rank)``, else None."""
    test = cond.node
    if test is None or test.schema_name() != op or _const(test.inputs[1]) != rank:
        return None
    dim = test.inputs[0].node
    return dim.inputs[0] if dim is not None and dim.schema_name() == "aten::dim" else None


def _checks_offsets_rank(block: Block, offsets: Value) -> bool:
    """Whether ``block`` only raises when ``offsets`` is not 1-D (``if offsets.dim() != 1:
    raise``) and computes nothing else."""
    raising = [n for n in block.nodes if n.kind == "prim::If"]
    if len(raising) != 1 or raising[0].outputs \
            or _ranked(raising[0].inputs[0], 1, "aten::ne.int") is not offsets:
        return False
    taken, other = raising[0].blocks
    return _always_raises(taken) and not other.nodes and all(
        n is raising[0] or n.schema_name() in ("aten::dim", "aten::ne.int")
        for n in block.nodes)


def _flat_rows(flat: Value, starts: Value):
    """``((X, t), (O, t'), prologue nodes)`` when ``flat`` and ``starts`` are the rows
    ``select(X, 0, t)`` and ``select(O, 0, t')`` (DLRM's flat indices and bag starts, one
    row per table), as a trace shows them or through ``nn.functional.embedding_bag``'s
    prologue for a 1-D input: ``if input.dim() == 2: <raises> else: if input.dim() == 1:
    <offsets' rank checked> (input, offsets) else: <raises>``."""
    prologue: list[Node] = []
    branch = flat.node
    if branch is not None and branch.kind == "prim::If" and starts.node is branch:
        if (flat.offset, starts.offset) != (0, 1) or len(branch.outputs) != 2:
            return None
        two, other = branch.blocks
        if not _always_raises(two):
            return None
        flat, starts = other.outputs
        inner = starts.node
        if inner is None or inner.kind != "prim::If" or inner.owning_block is not other \
                or len(inner.outputs) != 1 or not _always_raises(inner.blocks[1]) \
                or _ranked(branch.inputs[0], 2) is not flat \
                or _ranked(inner.inputs[0], 1) is not flat:
            return None
        checked = inner.blocks[0]
        starts = checked.outputs[0]
        if not _checks_offsets_rank(checked, starts):
            return None
        if any(n is not inner and n.schema_name() != "aten::eq.int" for n in other.nodes):
            return None
        prologue = [branch]
    found = _column(flat, 0)
    rows = _column(starts, 0)
    if found is None or rows is None:
        return None
    if prologue:
        # the selects are read by the prologue's checks only (dropped with it)
        return found, rows, prologue
    if len(flat.uses) != 1 or len(starts.uses) != 1:
        return None
    return found, rows, [flat.node, starts.node]


def _lookup(r: Value, block: Block) -> _Lookup | None:
    if len(r.uses) != 1 or r.node is None or r.node.owning_block is not block:
        return None
    return _embedding(r) or _embedding_bag(r)


def _same_bounds(a: tuple | None, b: tuple | None) -> bool:
    """Whether two lookups' bag-start bounds are the same ints: the same values, or equal
    constants (an int: a bound read from a folded ``arange``)."""
    if a is None or b is None:
        return a is b
    return all(x is y or _int(x) is not None and _int(x) == _int(y) for x, y in zip(a, b))


def _int(x: Value | int) -> int | None:
    v = x if isinstance(x, int) else _const(x)
    return v if type(v) is int else None


def _runs(lookups: list[_Lookup | None]) -> list[tuple[int, int]]:
    """``(start, stop)`` of each run of two or more lookups that batch together."""
    runs, i = [], 0
    while i < len(lookups):
        j = i + 1
        first = lookups[i]
        if first is not None:
            total = first.weight.nbytes
            while j < len(lookups):
                nxt, prev = lookups[j], lookups[j - 1]
                if nxt is None or nxt.x is not first.x or nxt.offsets is not first.offsets \
                        or not _same_bounds(nxt.bounds, first.bounds) \
                        or nxt.mode != first.mode or nxt.column != prev.column + 1 \
                        or nxt.weight.dtype != first.weight.dtype \
                        or nxt.weight.shape[1] != first.weight.shape[1] \
                        or total + nxt.weight.nbytes > MAX_TABLE_BYTES:
                    break
                total += nxt.weight.nbytes
                j += 1
            if j - i >= 2:
                runs.append((i, j))
        i = j
    return runs


def _batch_list(graph: Graph, joined: Node, db: AliasDb) -> bool:
    """Batch the lookups of the list ``joined`` (``cat(list, 1)`` or ``stack(list, 1)``)
    concatenates. A stack becomes a cat of each other element unsqueezed at 1 and the
    batched rows (which come out ``(batch, tables, width)``): what stack is."""
    stack = joined.schema_name() == "aten::stack"
    if _const(joined.inputs[1]) != 1:
        return False
    found = _list_elements(joined)
    if found is None:
        return False
    build, appends, elements = found
    lookups = [_lookup(r, joined.owning_block) for r in elements]
    # The batched lookup runs where the list is read: nothing may write the indices (or the
    # bag starts) before that; a stack takes rows of flat indices, a cat columns.
    lookups = [lk if lk is not None and (lk.kind == "embedding_bag_rows") == stack
               and not db.has_writers(lk.x)
               and (lk.offsets is None or not db.has_writers(lk.offsets)) else None
               for lk in lookups]
    runs = _runs(lookups)
    if not runs:
        return False
    merged: list[Value] = []
    done = 0
    for start, stop in runs:
        merged += _unsqueezed(graph, elements[done:start], joined) if stack \
            else elements[done:start]
        merged.append(_batched(graph, lookups[start:stop], joined))
        done = stop
    merged += _unsqueezed(graph, elements[done:], joined) if stack else elements[done:]
    # One list, made where it is read (every element is computed by then).
    new_list = graph.create("prim::ListConstruct", merged, output_types=[build.output.type])
    new_list.insert_before(joined)
    joined.replace_input(0, new_list.output)
    if stack:
        graph.replace_node(joined, "aten::cat", list(joined.inputs), schema=_CAT)
    for node in (*reversed(appends), build):
        node.destroy()
    for start, stop in runs:
        for lookup in lookups[start:stop]:
            for node in lookup.nodes:
                node.destroy()
    return True


def _unsqueezed(graph: Graph, values: list[Value], before: Node) -> list[Value]:
    out = []
    for v in values:
        node = graph.create("aten::unsqueeze", [v, graph.constant(1, T.Int, before=before)],
                            output_types=[T.Tensor])
        node.schema, node.source = _UNSQUEEZE, before.source
        node.insert_before(before)
        out.append(node.output)
    return out


def _batched(graph: Graph, run: list[_Lookup], joined: Node) -> Value:
    """The node computing ``run``'s elements joined along dimension 1 (placed before
    ``joined``, where every table's indices are available)."""
    first = run[0]
    weights = [lk.weight for lk in run]
    packed = torch.cat(weights).contiguous()
    rows = [int(w.shape[0]) for w in weights]
    before = joined
    inputs = [first.x, graph.constant(packed, T.Tensor, before=before),
              graph.constant(rows, T.ListType(T.Int), before=before),
              graph.constant(first.column, T.Int, before=before)]
    kind = first.kind
    if kind == "embedding_bag_rows":
        inputs.insert(1, first.offsets)
    if first.mode is not None:
        inputs.append(graph.constant(first.mode, T.Int, before=before))
    if first.bounds is not None:
        inputs += [graph.constant(b, T.Int, before=before) if isinstance(b, int) else b
                   for b in first.bounds]
    node = graph.create(f"static_runtime::{kind}", inputs, output_types=[T.Tensor])
    node.schema, node.source = _SCHEMAS[kind], first.value.node.source
    node.insert_before(joined)
    return node.output
