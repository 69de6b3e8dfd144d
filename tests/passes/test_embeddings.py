"""``batch_embeddings`` (``passes/embeddings.py``) and its kernels (``ops/embeddings.py``):
what is batched and what is left alone, answers equal to TorchScript's (the same bits) on two
shape sets, and errors where the lookups one by one raise."""

import pytest
import torch
from differential import check
from switching import run_switching
from torch import Tensor, nn

import static_runtime as sr


def _kinds(mod: sr.StaticModule) -> list[str]:
    return [n.kind for n in mod.graph.walk()]


class Bags(nn.Module):
    """DCN-v2's sparse features: one ``EmbeddingBag`` per column of a ``(batch, columns,
    bag)`` index tensor, appended to a list after a dense feature, concatenated."""

    def __init__(self, rows=(50, 30, 70, 20), dim: int = 6, mode: str = "sum"):
        super().__init__()
        self.bags = nn.ModuleList([nn.EmbeddingBag(r, dim, mode=mode) for r in rows])

    def forward(self, dense: Tensor, sparse: Tensor) -> Tensor:
        pooled = [dense]
        for i, bag in enumerate(self.bags):
            pooled.append(bag(sparse[:, i]))
        return torch.cat(pooled, dim=1) * 2


class Lookups(nn.Module):
    """One ``nn.Embedding`` per column of the indices from the second on, between two dense
    features, in one list made at once."""

    def __init__(self, dim: int = 5):
        super().__init__()
        self.t0, self.t1, self.t2 = (nn.Embedding(40, dim) for _ in range(3))

    def forward(self, dense: Tensor, ids: Tensor) -> Tensor:
        return torch.cat([dense, self.t0(ids[:, 1]), self.t1(ids[:, 2]), self.t2(ids[:, 3]),
                          dense], dim=1)


def _bag_inputs(batch: int, rows=(50, 30, 70, 20), bag: int = 3, dtype=torch.int64):
    g = torch.Generator().manual_seed(batch)
    cols = [torch.randint(0, r, (batch, 1, bag), generator=g) for r in rows]
    return [torch.randn(batch, 4, generator=g), torch.cat(cols, 1).to(dtype)]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_bags_of_tables_of_every_size_become_one_lookup(mode):
    torch.manual_seed(0)
    mods = check(Bags(mode=mode).eval(), _bag_inputs(5), _bag_inputs(17, bag=2), atol=0, rtol=0)
    kinds = _kinds(mods["default"])
    assert kinds.count("static_runtime::embedding_bags") == 1
    assert "aten::embedding_bag" not in kinds and "prim::If" not in kinds
    assert "static_runtime::embedding_bags" not in _kinds(mods["plain"])  # (passes off)


def test_int32_indices():
    torch.manual_seed(0)
    mods = check(Bags().eval(), _bag_inputs(3, dtype=torch.int32),
                 _bag_inputs(8, dtype=torch.int32), atol=0, rtol=0)
    assert "static_runtime::embedding_bags" in _kinds(mods["default"])


def test_traced_bags_are_batched_too():
    torch.manual_seed(0)
    model = Bags().eval()
    traced = torch.jit.trace(model, tuple(_bag_inputs(4)))
    mod = sr.StaticModule(traced)
    assert "static_runtime::embedding_bags" in _kinds(mod)
    for batch in (4, 9):
        x = _bag_inputs(batch)
        with torch.no_grad():
            assert torch.equal(mod(*x), model(*x))


@pytest.mark.parametrize("rank", [2, 3])
def test_embeddings_by_columns_after_the_first(rank):
    torch.manual_seed(0)

    def inputs(batch):
        g = torch.Generator().manual_seed(batch)
        shape = (batch, 5) if rank == 2 else (batch, 5, 2)
        dense = torch.randn(batch, 5 if rank == 2 else 2, 5, generator=g)
        if rank == 2:
            dense = dense[:, 0]
        return [dense, torch.randint(0, 40, shape, generator=g)]

    mods = check(Lookups().eval(), inputs(3), inputs(11), atol=0, rtol=0)
    assert _kinds(mods["default"]).count("static_runtime::embeddings") == 1
    assert "aten::embedding" not in _kinds(mods["default"])


@pytest.mark.parametrize("rows", [(50, 30, 70, 20), (30, 30, 30, 30)])
def test_an_index_outside_its_own_table_raises_as_before(rows):
    """The tables laid end to end would read the next table's row: the kernel checks each
    index against its own table (tables of one size and of several: two checks) and lets
    the lookups raise."""
    torch.manual_seed(0)
    model = Bags(rows).eval()
    mod = sr.StaticModule(torch.jit.script(model))
    dense, sparse = _bag_inputs(4, rows)
    assert torch.equal(mod(dense, sparse), model(dense, sparse))
    for bad in (30, -1):  # table 1 has 30 rows; 30 is a row of table 2 end to end
        wrong = sparse.clone()
        wrong[2, 1, 0] = bad
        with pytest.raises((IndexError, RuntimeError)) as ours:
            mod(dense, wrong)
        with pytest.raises(type(ours.value)):
            model(dense, wrong)


def test_an_input_of_another_rank_raises_what_embedding_bag_raises():
    torch.manual_seed(0)
    model = Bags().eval()
    mod = sr.StaticModule(torch.jit.script(model))
    dense, sparse = _bag_inputs(4)
    mod(dense, sparse)
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor but got None"):
        mod(dense, sparse[:, :, 0])


class NearMisses(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Embedding(20, 4)
        self.b = nn.Embedding(20, 4)
        self.c = nn.Embedding(20, 3)
        self.d = nn.EmbeddingBag(20, 4, padding_idx=0)
        self.e = nn.EmbeddingBag(20, 4)

    def forward(self, ids: Tensor, bags: Tensor):
        gap = torch.cat([self.a(ids[:, 0]), self.b(ids[:, 2])], 1)           # columns 0, 2
        widths = torch.cat([self.a(ids[:, 0]), self.c(ids[:, 1])], 1)        # widths 4, 3
        padded = torch.cat([self.d(bags[:, 0]), self.e(bags[:, 1])], 1)     # a padding_idx
        kept = self.a(ids[:, 1])
        used = torch.cat([kept, self.b(ids[:, 2])], 1)                       # kept is returned
        return gap, widths, padded, used, kept


def test_near_misses_are_left_alone():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    first = [torch.randint(0, 20, (3, 3), generator=g), torch.randint(0, 20, (3, 2, 4), generator=g)]
    second = [torch.randint(0, 20, (6, 3), generator=g), torch.randint(0, 20, (6, 2, 2), generator=g)]
    mods = check(NearMisses().eval(), first, second, atol=0, rtol=0)
    kinds = _kinds(mods["default"])
    assert "static_runtime::embeddings" not in kinds
    assert "static_runtime::embedding_bags" not in kinds


class Written(nn.Module):
    """The indices are written between two lookups: batching them at the cat would read the
    written indices for both."""

    def __init__(self):
        super().__init__()
        self.a = nn.Embedding(20, 4)
        self.b = nn.Embedding(20, 4)

    def forward(self, ids: Tensor) -> Tensor:
        ids = ids.clone()
        x = [self.a(ids[:, 0])]
        ids.add_(1)
        x.append(self.b(ids[:, 1]))
        return torch.cat(x, 1)


def test_indices_written_in_between_are_not_batched():
    g = torch.Generator().manual_seed(1)
    mods = check(Written().eval(), [torch.randint(0, 19, (3, 2), generator=g)],
                 [torch.randint(0, 19, (5, 2), generator=g)], atol=0, rtol=0)
    assert "static_runtime::embeddings" not in _kinds(mods["default"])


def test_many_sizes_through_one_module_equal_eager():
    """Traffic of every size: batch sizes 1…40 in turn, each equal to eager."""
    torch.manual_seed(0)
    model = Bags().eval()
    mod = sr.StaticModule(torch.jit.script(model))
    for batch in [1, 2, 40, 3, 17, 1, 9, 40, 5]:
        x = _bag_inputs(batch)
        with torch.no_grad():
            assert torch.equal(mod(*x), model(*x))


class FlatBags(nn.Module):
    """DLRM's sparse features: one ``EmbeddingBag`` per row of flat indices and of bag
    starts (``(tables, length)``, ``(tables, batch)``), stacked after a dense feature."""

    def __init__(self, rows=(30, 50, 20), dim: int = 4, mode: str = "sum"):
        super().__init__()
        self.bags = nn.ModuleList([nn.EmbeddingBag(r, dim, mode=mode) for r in rows])

    def forward(self, dense: Tensor, indices: Tensor, offsets: Tensor) -> Tensor:
        features = [dense]
        for i, bag in enumerate(self.bags):
            features.append(bag(indices[i], offsets[i]))
        return torch.stack(features, dim=1) + 1


def _flat_inputs(batch: int, rows=(30, 50, 20)):
    g = torch.Generator().manual_seed(batch)
    lengths = torch.randint(1, 5, (batch,), generator=g)
    starts = torch.cumsum(lengths, 0) - lengths
    total = int(lengths.sum())
    indices = torch.stack([torch.randint(0, r, (total,), generator=g) for r in rows])
    return [torch.randn(batch, 4, generator=g), indices,
            starts.unsqueeze(0).expand(len(rows), batch).contiguous()]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_rows_of_flat_indices_with_bag_starts_become_one_lookup(mode):
    torch.manual_seed(0)
    mods = check(FlatBags(mode=mode).eval(), _flat_inputs(3), _flat_inputs(11), atol=0, rtol=0)
    kinds = _kinds(mods["default"])
    assert kinds.count("static_runtime::embedding_bag_rows") == 1
    assert "aten::embedding_bag" not in kinds and "aten::stack" not in kinds


def test_traced_rows_are_batched_too():
    torch.manual_seed(0)
    model = FlatBags().eval()
    mod = sr.StaticModule(torch.jit.trace(model, tuple(_flat_inputs(4))))
    assert "static_runtime::embedding_bag_rows" in _kinds(mod)
    for batch in (4, 1, 13):
        x = _flat_inputs(batch)
        with torch.no_grad():
            assert torch.equal(mod(*x), model(*x))


@pytest.mark.parametrize("rows", [(30, 50, 20), (30, 30, 30)])
@pytest.mark.parametrize("bad", ["index past its table", "negative index", "first start not 0",
                                 "starts decreasing", "start past the length"])
def test_what_the_tables_end_to_end_would_hide_runs_the_lookups_one_by_one(bad, rows):
    """Each of these would read (or bag) another table's indices end to end: the kernel
    checks them and the lookups one by one compute or raise what they did before."""
    torch.manual_seed(0)
    model = FlatBags(rows).eval()
    mod = sr.StaticModule(torch.jit.script(model))
    dense, indices, offsets = _flat_inputs(5, rows)
    mod(dense, indices, offsets)
    indices, offsets = indices.clone(), offsets.clone()
    if bad == "index past its table":
        indices[0, -1] = 30  # table 0 has 30 rows: end to end, row 0 of table 1
    elif bad == "negative index":
        indices[1, 0] = -1
    elif bad == "first start not 0":
        offsets[1, 0] = 1
    elif bad == "starts decreasing":
        row = offsets[2].clone()
        offsets[2, 1], offsets[2, 2] = row[2], row[1]
    else:
        offsets[0, -1] = indices.shape[1] + 1
    try:
        with torch.no_grad():
            expected = model(dense, indices, offsets)
    except Exception as e:  # noqa: BLE001  (then ours must raise too)
        with pytest.raises(type(e)):
            mod(dense, indices, offsets)
    else:
        ours = mod(dense, indices, offsets)
        if bad == "starts decreasing":
            # a bag of negative length is uninitialised memory in PyTorch's kernel, call to
            # call: the other tables' bags must be theirs, as one by one
            ours, expected = ours[:, :3], expected[:, :3]
        assert torch.equal(ours, expected)


def _export(model, inputs, dynamic_shapes=None):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(model, tuple(inputs), dynamic_shapes=dynamic_shapes)


def test_an_exported_program_with_a_dynamic_batch_is_batched():
    """Export computes the bag starts from the symbolic batch (``arange(0, 3·s0, 3)``): the
    kernel compares those ints with the indices' sizes on each call."""
    torch.manual_seed(0)
    model = Bags().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = _export(model, _bag_inputs(4), ({0: batch}, {0: batch}))
    mod = sr.StaticModule(ep)
    assert "static_runtime::embedding_bags" in _kinds(mod)
    for n in (4, 1, 37, 2):
        x = _bag_inputs(n)
        with torch.no_grad():
            assert torch.equal(mod(*x), model(*x))


@pytest.mark.parametrize("model, inputs, kind", [
    (Bags, lambda: _bag_inputs(4), "static_runtime::embedding_bags"),
    (FlatBags, lambda: _flat_inputs(4), "static_runtime::embedding_bag_rows")])
def test_a_program_exported_at_one_size_is_batched(model, inputs, kind):
    """At one size export folds the bag starts into a constant ``arange``: read back as its
    bounds. Another size runs as the unbatched graph does (here: both raise, or agree)."""
    torch.manual_seed(0)
    model = model().eval()
    x = inputs()
    ep = _export(model, x)
    mod = sr.StaticModule(ep)
    plain = sr.StaticModule(ep, options=sr.StaticModuleOptions(batch_embeddings=False))
    assert kind in _kinds(mod) and kind not in _kinds(plain)
    with torch.no_grad():
        assert torch.equal(mod(*x), model(*x))
    other = _bag_inputs(6) if kind.endswith("bags") else _flat_inputs(6)
    try:
        expected = plain(*other)
    except Exception as e:  # noqa: BLE001  (then ours must raise too)
        with pytest.raises(type(e)):
            mod(*other)
    else:
        assert torch.equal(mod(*other), expected)


def test_threads_calling_one_module_with_sizes_of_their_own_get_their_own_answers():
    """The kernels keep the latest size's bag starts; the runtimes of a pool share them from
    their threads, each with a size of its own. (Kept as two list items, written one after
    the other, a thread could read another's starts: this failed about one run in four.)"""
    torch.manual_seed(0)
    model = Bags().eval()
    flat = FlatBags().eval()
    mods = [(sr.StaticModule(torch.jit.script(model)), model, _bag_inputs),
            (sr.StaticModule(torch.jit.script(flat)), flat, _flat_inputs)]
    errors: list[BaseException] = []

    def worker(batch: int) -> None:
        try:
            for _ in range(40):
                for mod, eager, inputs in mods:
                    x = inputs(batch)
                    with torch.no_grad():
                        assert torch.equal(mod(*x), eager(*x))
        except BaseException as e:  # noqa: BLE001  (collected, asserted below)
            errors.append(e)

    run_switching(worker, [(2,), (5,), (9,)])
    assert not errors, errors[0]


def test_a_call_the_kernel_refuses_decides_no_kernel():
    """The first call of a bucket measures the kernels: if our kernel's checks refuse its
    arguments (bag starts that decrease, which the lookups one by one compute), the call runs
    ATen's form and decides nothing — measured, ours would be
    dropped and ATen's form kept for the bucket (on disk too). The next call decides."""
    torch.manual_seed(0)
    rows = (30, 50, 20)
    model = FlatBags(rows).eval()
    mod = sr.StaticModule(torch.jit.script(model))
    node = next(pn for pn in mod.plan.nodes()
                if pn.node.kind == "static_runtime::embedding_bag_rows")
    dense, indices, offsets = _flat_inputs(5, rows)
    bad = offsets.clone()
    bad[2, 1], bad[2, 2] = offsets[2, 2], offsets[2, 1]  # (starts decreasing: eager computes)
    with torch.no_grad():
        expected = model(dense, indices, bad)
    # (a bag of negative length is uninitialised memory in PyTorch's kernel: the other
    # tables' bags must be theirs)
    assert torch.equal(mod(dense, indices, bad)[:, :3], expected[:, :3])
    assert not node.fn.choices
    with torch.no_grad():
        assert torch.equal(mod(dense, indices, offsets), model(dense, indices, offsets))
    assert len(node.fn.choices) == 1
