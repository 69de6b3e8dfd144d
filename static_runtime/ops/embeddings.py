"""``static_runtime::embeddings`` and ``static_runtime::embedding_bags`` (``passes/embeddings.py``
makes them): lookups in several tables laid end to end, one per column of the indices, their
results concatenated along dimension 1.

The meaning is the lookups one by one (``embeddings_reference``, ``embedding_bags_reference``):
what the graph computed before the pass, and what the fake-tensor runs of shape programs
follow. The kernel makes one lookup of it: each column's indices shifted by its table's first
row, then one ``embedding`` (or one ``embedding_bag`` over ``batch × tables`` bags) in the
packed tables, whose rows come out in the order the concatenation would put them. The same
rows are summed in the same order, so the values are the same bits.

The packed tables would take an index past its own table's end for a row of the next table.
So the kernel first checks every index against its own table's rows (``0 ≤ i < rows[t]``);
if one is out, or the indices are not of the rank, dtype or device the kernel takes, the
lookups run one by one and raise (or compute) exactly what they did before the pass.

Over float32 tables, lookups of a 2-D index tensor (``embeddings``) and bags in sum or mean
mode (``embedding_bags``, ``embedding_bag_rows``) are chosen by measurement
(``kernel_choice="measure"``) per bucket of sizes between that and our kernels
(``ops/ckernels/eltwise.c``: ``sr_embeddings``, ``sr_embedding_bags``,
``sr_embedding_bag_rows``): one pass that makes the same checks (each index against its own
table; the bag starts) and copies each row, or adds each bag's rows from zero in the order of
the indices (a mean divides by the bag size), as ``embedding_bag`` does — no check passes of
their own, no shifted copies of the indices or starts; 8.9 against 28.4 µs for 32 rows of
eight tables' bags of 4 on the Xeon.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.nn.functional as F

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import EMBEDDING_BAG_ROWS, EMBEDDING_BAGS, EMBEDDINGS
from static_runtime.ops import ckernels
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.registry import (
    implement_torch_ops,
    labelled,
    register_measured,
    register_native,
)
from static_runtime.ops.selection import constant_value

_MODES = ("sum", "mean", "max")
_INDEX_DTYPES = (torch.int64, torch.int32)


def _tables(weight: torch.Tensor, rows: list[int]) -> list[torch.Tensor]:
    starts = itertools.accumulate(rows, initial=0)
    return [weight[s:s + r] for s, r in zip(starts, rows)]


def embeddings_reference(indices, weight, rows, first):
    """What ``static_runtime::embeddings`` means: ``aten::embedding`` in each table by its
    column of ``indices``, concatenated along dimension 1."""
    return torch.cat([torch.embedding(w, indices.select(1, first + t))
                      for t, w in enumerate(_tables(weight, rows))], 1)


def embedding_bags_reference(indices, weight, rows, first, mode, end=None, step=None):
    """What ``static_runtime::embedding_bags`` means: ``nn.functional.embedding_bag`` (bags
    of one size: its 2-D form) in each table by its column of ``indices``, concatenated along
    dimension 1; given ``end`` and ``step``, ``embedding_bag`` of each column flattened, with
    the bag starts ``arange(0, end, step)`` (an exported program's form)."""
    tables = _tables(weight, rows)
    if end is None:
        return torch.cat([F.embedding_bag(indices.select(1, first + t), w, mode=_MODES[mode])
                          for t, w in enumerate(tables)], 1)
    columns = [indices.select(1, first + t) for t in range(len(tables))]
    return torch.cat([torch.embedding_bag(
        w, c.reshape(-1), torch.arange(0, end, step, dtype=c.dtype, device=c.device), False,
        mode, False, None, False, None)[0] for w, c in zip(tables, columns)], 1)


def embedding_bag_rows_reference(indices, offsets, weight, rows, first, mode):
    """What ``static_runtime::embedding_bag_rows`` means: ``nn.functional.embedding_bag`` in
    each table by its row of flat ``indices`` and of bag starts ``offsets`` (DLRM's form),
    stacked along dimension 1."""
    return torch.stack([F.embedding_bag(indices.select(0, first + t), w,
                                        offsets.select(0, first + t), mode=_MODES[mode])
                        for t, w in enumerate(_tables(weight, rows))], 1)


class _Packed:
    """What a node's kernel keeps: the tables laid end to end, and per index dtype and rank
    each table's first and last row, shaped to broadcast over the indices with the tables
    along ``axis`` (1: columns of a ``(batch, tables, ...)`` tensor; 0: rows of flat
    indices)."""

    def __init__(self, weight: torch.Tensor, rows: list[int], first: int, axis: int = 1):
        self.weight, self.rows, self.first, self.n, self.axis = weight, rows, first, len(rows), axis
        self.width = int(weight.shape[1])
        self.uniform = len(set(rows)) == 1
        self._shifts: dict[tuple[torch.dtype, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def shifts(self, dtype: torch.dtype, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(first row, last row)`` of each table as ``dtype`` tensors of rank ``rank``, the
        tables along ``axis``."""
        key = (dtype, rank)
        found = self._shifts.get(key)
        if found is None:
            shape = [1] * rank
            shape[self.axis] = self.n
            starts = list(itertools.accumulate(self.rows, initial=0))[:-1]
            found = self._shifts[key] = (torch.tensor(starts, dtype=dtype).view(shape),
                                         torch.tensor(self.rows, dtype=dtype).view(shape) - 1)
        return found

    def tables_of(self, indices: torch.Tensor) -> torch.Tensor:
        """The slice of ``indices`` (along ``axis``) these tables look up."""
        if self.first or indices.shape[self.axis] != self.n:
            return indices.narrow(self.axis, self.first, self.n)
        return indices

    def in_range(self, x: torch.Tensor) -> bool:
        """Whether every index of ``x`` (``tables_of``'s) is a row of its own table. (End to
        end, an index past its table reads the next one's.) Tables of one size: one
        ``aminmax`` pass. Otherwise ``0 ≤ i ≤ last`` both at once: the sign bit of
        ``i | (last - i)`` is set iff one of them is negative (two temporaries: at 300 × 8 × 4
        indices 16.9 µs against aminmax's 6.0, and 22.0 for ``min`` and ``lt(...).all()``)."""
        if self.uniform:
            # (compared as Python numbers: comparing the 0-d tensors made two more tensors
            # and read each back, 18.7 µs a call against 6.9 at 32 × 8 × 4)
            low, high = torch.aminmax(x)
            return low.item() >= 0 and high.item() < self.rows[0]
        _, last = self.shifts(x.dtype, x.dim())
        return torch.bitwise_or(x, torch.sub(last, x)).min().item() >= 0

    def columns(self, indices: Any) -> torch.Tensor | None:
        """The indices' columns of these tables, if the kernel takes them and every index is
        in its own table's range; None otherwise."""
        if not (type(indices) is torch.Tensor and indices.dtype in _INDEX_DTYPES
                and indices.is_cpu and indices.dim() >= 2
                and indices.shape[1] >= self.first + self.n and indices.numel() > 0):
            return None
        x = self.tables_of(indices)
        return x if self.in_range(x) else None


def _bag_constants(node: Node, schema: str, at: int
                   ) -> tuple[torch.Tensor, list[int], int, int] | None:
    """``(weight, rows, first, mode)``: the constant inputs from index ``at`` of a node of
    ``schema``, if they are what its kernel takes."""
    if node.schema != schema:
        return None
    weight, rows, first, mode = (constant_value(v) for v in node.inputs[at:at + 4])
    if not isinstance(weight, torch.Tensor) or not isinstance(rows, list) \
            or type(first) is not int or mode not in (0, 1, 2):
        return None
    return weight, rows, first, mode


@register_native("static_runtime::embeddings")
def _embeddings(node: Node):
    if node.schema != EMBEDDINGS:
        return None
    weight, rows, first = (constant_value(v) for v in node.inputs[1:4])
    if not isinstance(weight, torch.Tensor) or not isinstance(rows, list) \
            or type(first) is not int:
        return None
    packed = _Packed(weight, rows, first)
    lookup = torch.embedding

    @labelled(f"{len(rows)} tables looked up in one embedding call")
    def fn(indices, w, rows_, first_):
        x = packed.columns(indices) if w is weight else None
        if x is None:
            return embeddings_reference(indices, w, rows_, first_)
        starts, _ = packed.shifts(x.dtype, x.dim())
        return lookup(weight, x + starts).flatten(1, 2)

    return fn


@register_native("static_runtime::embedding_bags")
def _embedding_bags(node: Node):
    found = _bag_constants(node, EMBEDDING_BAGS, 1)
    if found is None:
        return None
    weight, rows, first, mode = found
    packed = _Packed(weight, rows, first)
    bags = torch.embedding_bag
    arange = torch.arange
    # ((count, bag size, dtype), the bag starts) of the latest call: a size's calls share
    # them. One tuple, replaced whole: the runtimes of a pool call this from their threads.
    last: list[Any] = [(None, None)]
    # (bag size, dtype) → the starts of the most bags seen, of which any count's are a
    # prefix: traffic of many sizes comes back to a size after others, and one slot made
    # them again (an ``arange``) on most calls
    longest: dict[tuple, torch.Tensor] = {}

    def bag_starts(total: int, size: int, dtype: torch.dtype) -> torch.Tensor:
        key = (total, size, dtype)
        kept = last[0]
        if kept[0] != key:
            count = -(-total // size)
            table = longest.get(key[1:])
            if table is None or table.numel() < count:  # (doubled: few tables made)
                grown = max(count, 64, 2 * (0 if table is None else table.numel()))
                table = longest[key[1:]] = arange(0, grown * size, size, dtype=dtype)
            kept = last[0] = (key, table[:count])
        return kept[1]

    @labelled(f"{len(rows)} tables' bags ({_MODES[mode]}) in one embedding_bag call")
    def fn(indices, w, rows_, first_, mode_, end=None, step=None):
        x = packed.columns(indices) if w is weight and indices.dim() == 3 else None
        if x is None or x.shape[2] == 0 or (end is not None and not (
                step == x.shape[2] and end == x.shape[0] * step)):
            return embedding_bags_reference(indices, w, rows_, first_, mode_, end, step)
        batch, n, size = x.shape
        starts, _ = packed.shifts(x.dtype, 3)
        flat = (x + starts).view(-1)
        out = bags(weight, flat, bag_starts(flat.numel(), size, x.dtype), False, mode, False,
                   None, False, None)[0]
        return out.view(batch, n * packed.width)

    return fn


def _table_block(weight: torch.Tensor, rows: list[int], *rest: int) -> tuple:
    """What our kernels keep for a node: the argument block (the tables' address, each
    table's first row and row count, then ``rest``), its address, and the objects its
    addresses name (to be held while the block is)."""
    starts = torch.tensor(list(itertools.accumulate(rows, initial=0))[:-1], dtype=torch.int64)
    counts = torch.tensor(rows, dtype=torch.int64)
    block, address = ckernels._block(weight.data_ptr(), starts.data_ptr(), counts.data_ptr(),
                                      len(rows), *rest)
    return block, address, (weight, starts, counts, block)


def _float_tables(weight: Any) -> bool:
    return (isinstance(weight, torch.Tensor) and weight.dtype is torch.float32
            and weight.dim() == 2 and weight.is_contiguous() and not weight.is_meta
            and weight.is_cpu)


def _decider(per_shape: PerShape, ours: Any, default: Any) -> Any:
    """``decide(key, problem, ours_args, args)``: the kernel for a bucket, measured (or
    remembered) between ``default(*args)`` and ``ours(*ours_args)``. A call whose arguments
    our checks refuse (an index outside its table) decides nothing: ATen's form answers it,
    and the bucket is measured on a later call — measured now, ours would be dropped and
    ATen's form kept for the bucket, on disk too."""
    def decide(key: tuple, problem: str, ours_args: tuple, args: tuple) -> str:
        if ours(*ours_args) is None:
            return "aten"

        def native():
            out = ours(*ours_args)
            if out is None:
                raise RuntimeError("refused by the kernel's checks")
            return out

        return per_shape.choose(key, problem, lambda: {"aten": lambda: default(*args),
                                                       "native": native})

    return decide


def _bag_kernel(node: Node, schema: str, at: int, kernel: str, chooser: KernelChooser
                ) -> tuple | None:
    """``(weight, first, mode, tables, width, run, address, keep, per_shape)`` for a bag
    node whose constants our kernel ``kernel`` takes (float32 tables, sum or mean:
    ``_table_block``'s block and what it names; the node's choices), or None."""
    found = _bag_constants(node, schema, at)
    if found is None or not ckernels.available():
        return None
    weight, rows, first, mode = found
    if mode not in (0, 1) or not _float_tables(weight):
        return None
    width = int(weight.shape[1])
    _, address, keep = _table_block(weight, rows, width, mode)
    return (weight, first, mode, len(rows), width, getattr(ckernels.library(), kernel),
            address, keep, PerShape(chooser, ("aten", "native")))


@register_measured("static_runtime::embeddings")
def _measured_lookups(node: Node, chooser: KernelChooser, default: Any) -> Any:
    """The lookups of a 2-D index tensor by measurement, per bucket of batch sizes, between
    ``aten`` (``default``: the range check, the shifted indices and one ``embedding``) and
    ``native`` (``sr_embeddings``: each index checked against its own table, then each row
    copied), for float32 tables. Anything else, and an index outside its table, runs
    ``default``."""
    if node.schema != EMBEDDINGS or not ckernels.available():
        return None
    weight, rows, first = (constant_value(v) for v in node.inputs[1:4])
    if not _float_tables(weight) or not isinstance(rows, list) or type(first) is not int:
        return None
    n, width = len(rows), int(weight.shape[1])
    _, address, keep = _table_block(weight, rows, width)
    run = ckernels.library().sr_embeddings
    per_shape = PerShape(chooser, ("aten", "native"))
    chosen = per_shape.chosen
    threads, empty, int32, plain = torch.get_num_threads, torch.empty, torch.int32, torch.Tensor

    def ours(x: torch.Tensor) -> torch.Tensor | None:
        batch = x.shape[0]
        sb, st = x.stride()
        out = empty(batch, n * width)
        if run(x.data_ptr(), x.dtype is int32, batch, sb, st, out.data_ptr(), address):
            return None
        return out

    decide = _decider(per_shape, ours, default)

    @labelled(f"{n} tables looked up: kernel chosen per batch size by measurement")
    def fn(indices, w, rows_, first_, _keep=keep):
        if w is weight and type(indices) is plain and indices.dim() == 2 \
                and indices.dtype in _INDEX_DTYPES and indices.is_cpu \
                and indices.shape[1] >= first + n and indices.shape[0] > 0:
            x = indices.narrow(1, first, n) if first or indices.shape[1] != n else indices
            key = ((size_bucket(x.shape[0]), n), threads())
            name = chosen.get(key) or decide(
                key, f"embeddings float32 batch<={key[0][0]} tables={n} width={width}", (x,),
                (indices, w, rows_, first_))
            if name == "native":
                out = ours(x)
                if out is not None:
                    return out
        return default(indices, w, rows_, first_)

    return per_shape.expose(fn, ("embeddings", n, width), ("batch<=", "tables="))


@register_measured("static_runtime::embedding_bags")
def _measured_bags(node: Node, chooser: KernelChooser, default: Any) -> Any:
    """The bags by measurement (``ops/kernels.py``), per bucket of batch sizes and bag size,
    between ``aten`` (``default``: the range check, the shift of the indices and one
    ``embedding_bag``, four operators and two temporaries) and ``native``
    (``sr_embedding_bags``: one pass checking each index against its own table and adding
    its rows, in the order ``embedding_bag`` adds them), for sum and mean over float32
    tables. Anything else, and an index outside its table, runs ``default``."""
    found = _bag_kernel(node, EMBEDDING_BAGS, 1, "sr_embedding_bags", chooser)
    if found is None:
        return None
    weight, first, mode, n, width, run, address, keep, per_shape = found
    threads, empty, int32, plain = torch.get_num_threads, torch.empty, torch.int32, torch.Tensor

    def ours(x: torch.Tensor) -> torch.Tensor | None:
        """The bags of ``x`` (batch, n, size), or None where an index is outside its table."""
        batch, _, size = x.shape
        sb, st, ss = x.stride()
        out = empty(batch, n * width)
        if run(x.data_ptr(), x.dtype is int32, out.data_ptr(), batch, sb, st, ss, size,
               address):
            return None
        return out

    decide = _decider(per_shape, ours, default)

    @labelled(f"{n} tables' bags ({_MODES[mode]}): kernel chosen per batch size by "
              "measurement")
    def fn(indices, w, rows_, first_, mode_, end=None, step=None, _keep=keep):
        if w is weight and type(indices) is plain and indices.dim() == 3 \
                and indices.dtype in _INDEX_DTYPES and indices.is_cpu \
                and indices.shape[1] >= first + n and indices.shape[2] > 0 \
                and indices.shape[0] > 0 and (end is None or (
                    step == indices.shape[2] and end == indices.shape[0] * step)):
            x = indices.narrow(1, first, n) if first or indices.shape[1] != n else indices
            key = ((size_bucket(x.shape[0]), n, x.shape[2]), threads())
            name = per_shape.chosen.get(key) or decide(
                key, f"embedding_bags {_MODES[mode]} float32 batch<={key[0][0]} tables={n} "
                     f"bag={key[0][2]} width={width}", (x,),
                (indices, w, rows_, first_, mode_, end, step))
            if name == "native":
                out = ours(x)
                if out is not None:
                    return out
        return default(indices, w, rows_, first_, mode_, end, step)

    return per_shape.expose(fn, ("embedding_bags", n, width, mode), ("batch<=", "tables=",
                                                                     "bag="))


@register_native("static_runtime::embedding_bag_rows")
def _embedding_bag_rows(node: Node):
    found = _bag_constants(node, EMBEDDING_BAG_ROWS, 2)
    if found is None:
        return None
    weight, rows, first, mode = found
    n = len(rows)
    packed = _Packed(weight, rows, first, axis=0)
    bags, diff = torch.embedding_bag, torch.diff
    # per dtype: each row's place t in the tables, as an (n, 1) column (× the row length:
    # where its flat indices start end to end); and the latest row length as that column
    places: dict[torch.dtype, torch.Tensor] = {}
    latest: list[Any] = [(None, None)]  # (one tuple, replaced whole: see bag_starts)

    def steps(dtype):
        found = places.get(dtype)
        if found is None:
            found = places[dtype] = torch.arange(n, dtype=dtype).view(n, 1)
        return found

    def ends(length, dtype):
        kept = latest[0]
        if kept[0] != (length, dtype):
            kept = latest[0] = ((length, dtype), torch.full((n, 1), length, dtype=dtype))
        return kept[1]

    def fast(indices, offsets):
        """The stacked lookups in one call, or None where the kernel does not take them:
        every index in its own table, every row's bag starts from 0, not decreasing, within
        its row (end to end, a bag running past its row would take the next row's first
        indices)."""
        if not (type(indices) is torch.Tensor and type(offsets) is torch.Tensor
                and indices.dtype in _INDEX_DTYPES and offsets.dtype in _INDEX_DTYPES
                and indices.is_cpu and offsets.is_cpu and indices.dim() == 2
                and offsets.dim() == 2 and indices.shape[0] >= first + n
                and offsets.shape[0] >= first + n and offsets.shape[1] > 0
                and indices.shape[1] > 0):
            return None
        x, o = packed.tables_of(indices), packed.tables_of(offsets)
        if not packed.in_range(x):
            return None
        start, _ = packed.shifts(x.dtype, 2)
        length = x.shape[1]
        # every row of bag starts from 0, not decreasing, none past the row's length
        if o[:, 0].any() or diff(o, dim=1, append=ends(length, o.dtype)).min() < 0:
            return None
        flat = (x + start).view(-1)
        begins = torch.add(o, steps(o.dtype), alpha=length).view(-1)
        out = bags(weight, flat, begins, False, mode, False, None, False, None)[0]
        return out.view(n, o.shape[1], -1).transpose(0, 1)

    @labelled(f"{n} tables' bags ({_MODES[mode]}) by rows of flat indices in one "
              "embedding_bag call")
    def fn(indices, offsets, w, rows_, first_, mode_):
        out = fast(indices, offsets) if w is weight else None
        if out is None:
            return embedding_bag_rows_reference(indices, offsets, w, rows_, first_, mode_)
        return out

    return fn


@register_measured("static_runtime::embedding_bag_rows")
def _measured_rows(node: Node, chooser: KernelChooser, default: Any) -> Any:
    """The bags by rows of flat indices (DLRM's) by measurement, per bucket of bag counts and
    of row lengths, between ``aten`` (``default``: the range check, the bag starts' checks,
    the shifted indices and starts and one ``embedding_bag``, ~ten operators) and ``native``
    (``sr_embedding_bag_rows``: the same checks and each bag's rows added in one pass, in
    ``embedding_bag``'s order), for sum and mean over float32 tables. Ours writes the result
    contiguous, as the lookups one by one stack it. Anything else, and what the checks
    refuse, runs ``default``."""
    found = _bag_kernel(node, EMBEDDING_BAG_ROWS, 2, "sr_embedding_bag_rows", chooser)
    if found is None:
        return None
    weight, first, mode, n, width, run, address, keep, per_shape = found
    threads, empty, int32, plain = torch.get_num_threads, torch.empty, torch.int32, torch.Tensor

    def ours(x: torch.Tensor, o: torch.Tensor) -> torch.Tensor | None:
        """The bags of the tables' rows ``x`` and starts ``o``, or None where the checks
        refuse them."""
        bags = o.shape[1]
        out = empty(bags, n, width)
        sx, so = x.stride(), o.stride()
        if run(x.data_ptr(), x.dtype is int32, sx[0], sx[1], o.data_ptr(), o.dtype is int32,
               so[0], so[1], x.shape[1], bags, out.data_ptr(), address):
            return None
        return out

    decide = _decider(per_shape, ours, default)

    @labelled(f"{n} tables' bags ({_MODES[mode]}) by rows of flat indices: kernel chosen "
              "per bag count by measurement")
    def fn(indices, offsets, w, rows_, first_, mode_, _keep=keep):
        if w is weight and type(indices) is plain and type(offsets) is plain \
                and indices.dim() == 2 and offsets.dim() == 2 \
                and indices.dtype in _INDEX_DTYPES and offsets.dtype in _INDEX_DTYPES \
                and indices.is_cpu and offsets.is_cpu and indices.shape[0] >= first + n \
                and offsets.shape[0] >= first + n and offsets.shape[1] > 0 \
                and indices.shape[1] > 0:
            x = indices.narrow(0, first, n) if first or indices.shape[0] != n else indices
            o = offsets.narrow(0, first, n) if first or offsets.shape[0] != n else offsets
            key = ((size_bucket(o.shape[1]), n, size_bucket(x.shape[1])), threads())
            name = per_shape.chosen.get(key) or decide(
                key, f"embedding_bag_rows {_MODES[mode]} float32 bags<={key[0][0]} "
                     f"tables={n} length<={key[0][2]} width={width}", (x, o),
                (indices, offsets, w, rows_, first_, mode_))
            if name == "native":
                out = ours(x, o)
                if out is not None:
                    return out
        return default(indices, offsets, w, rows_, first_, mode_)

    return per_shape.expose(fn, ("embedding_bag_rows", n, width, mode),
                            ("bags<=", "tables=", "length<="))


implement_torch_ops(((EMBEDDINGS, embeddings_reference),
                     (EMBEDDING_BAGS, embedding_bags_reference),
                     (EMBEDDING_BAG_ROWS, embedding_bag_rows_reference)))
