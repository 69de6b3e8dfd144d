"""Our attention kernel (``ops/attention.py``, ``ckernels/attention.c``) as the measured
candidate for ``aten::scaled_dot_product_attention``: forced, it equals PyTorch's operator on
two shape sets for every mask kind, layout, head size and grouping it takes, with PyTorch's
output strides; a row masked entirely, and what it does not take, run PyTorch's operator."""

import pytest
import torch
import torch.nn.functional as F
from differential import check
from measured import MEASURE, fresh_kernel_cache, needs_ckernels  # noqa: F401
from torch import nn

import static_runtime as sr
from static_runtime.ops.kernels import Choice, KernelChooser

pytestmark = needs_ckernels


@pytest.fixture
def forced(monkeypatch):
    def force(name):
        monkeypatch.setattr(KernelChooser, "choose",
                            lambda self, key, names, make, default: Choice(name, {}, "forced"))
    return force


def _masked_sdpa():
    """``scaled_dot_product_attention(q, k, v, mask)`` as a scripted function."""
    return torch.jit.CompilationUnit(
        "def f(q, k, v, m):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, m)\n").f


class Attention(nn.Module):
    """Projections viewed as (B, H, L, D) heads, as models make them, then SDPA."""

    def __init__(self, heads: int, kv_heads: int, d: int, dv: int, mode: str,
                 scale: float | None = None):
        super().__init__()
        self.h, self.hk, self.d, self.dv, self.mode, self.scale = heads, kv_heads, d, dv, mode, scale
        self.q = nn.Linear(8, heads * d)
        self.kv = nn.Linear(8, kv_heads * (d + dv))

    def forward(self, x, memory, mask):
        b, lq, lk = x.size(0), x.size(1), memory.size(1)
        q = self.q(x).view(b, lq, self.h, self.d).transpose(1, 2)
        k, v = self.kv(memory).split([self.hk * self.d, self.hk * self.dv], -1)
        k = k.reshape(b, lk, self.hk, self.d).transpose(1, 2)
        v = v.reshape(b, lk, self.hk, self.dv).transpose(1, 2)
        gqa = self.hk != self.h
        if self.mode == "causal":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                                 enable_gqa=gqa)
        elif self.mode == "none":
            out = F.scaled_dot_product_attention(q, k, v, scale=self.scale, enable_gqa=gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale,
                                                 enable_gqa=gqa)
        return out.transpose(1, 2).reshape(b, lq, self.h * self.dv)


def _mask(kind: str, b: int, h: int, lq: int, lk: int, g: torch.Generator):
    if kind == "float":
        return torch.randn(b, h, lq, lk, generator=g)
    if kind == "float_rows":  # a padding mask as encoders add it: (B, 1, 1, Lk)
        m = torch.zeros(b, 1, 1, lk)
        m[..., -1] = float("-inf")
        return m
    if kind == "float_t":  # a strided mask: its keys are not contiguous
        return torch.randn(b, h, lk, lq, generator=g).transpose(-1, -2)
    if kind == "float_2d":
        return torch.randn(lq, lk, generator=g).tril_(diagonal=lk - lq)
    if kind == "bool":
        m = torch.rand(b, 1, lq, lk, generator=g) > 0.3
        m[..., 0] = True  # no row masked entirely
        return m
    return torch.zeros(())  # (unused)


CASES = [  # heads, kv heads, d, dv, mask kind, scale
    (4, 4, 16, 16, "float", None),
    (2, 2, 20, 12, "float_rows", 0.3),
    (3, 3, 16, 32, "float_2d", None),
    (2, 2, 16, 16, "float_t", None),
    (4, 4, 8, 8, "bool", None),
    (4, 2, 16, 16, "none", None),
    (2, 2, 32, 32, "causal", None),
    (4, 1, 16, 16, "causal", 1.0),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[4]}-h{c[0]}-{c[1]}-d{c[2]}-{c[3]}"
                                             for c in CASES])
def test_forced_native_equals_pytorch_on_two_shape_sets(case, forced):
    heads, kv, d, dv, kind, scale = case
    forced("native")
    g = torch.Generator().manual_seed(heads * d)
    sets = []
    for b, lq, lk in ((1, 5, 5), (3, 17, 37) if kind != "causal" else (3, 33, 33)):
        sets.append([torch.randn(b, lq, 8, generator=g), torch.randn(b, lk, 8, generator=g),
                     _mask(kind, b, heads, lq, lk, g)])
    mod = check(Attention(heads, kv, d, dv, kind, scale).eval(), sets[0], sets[1],
                options={"measure": MEASURE}, rtol=1e-5, atol=1e-5)["measure"]
    assert ": native (forced)" in mod.describe()


def test_output_strides_are_pytorchs(forced):
    forced("native")
    q, k, v = (torch.randn(2, 9, 3, 16).transpose(1, 2) for _ in range(3))
    contiguous = [t.contiguous() for t in (q, k, v)]
    fn = torch.jit.CompilationUnit(
        "def f(q, k, v):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n").f
    mod = sr.StaticModule(fn, MEASURE)
    for args in ((q, k, v), tuple(contiguous), (q, k, v)):
        got, want = mod(*args), F.scaled_dot_product_attention(*args)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want)
    assert ": native (forced)" in mod.describe()


def test_new_lengths_of_a_decided_bucket_keep_pytorchs_strides_and_values(forced):
    # A new length whose bucket is decided gets our call without a run of PyTorch's operator:
    # its result's layout comes from an earlier length's. Heads viewed out of (B, L, H, D)
    # (PyTorch's result is then (B, L, H, D) too) and contiguous heads, lengths 9…16 (one
    # bucket) in turn, then back.
    forced("native")
    fn = _masked_sdpa()
    mod = sr.StaticModule(fn, MEASURE)
    g = torch.Generator().manual_seed(3)
    for viewed in (True, False):
        for length in (*range(9, 17), 12, 9):
            q, k, v = (torch.randn(2, length, 3, 16, generator=g).transpose(1, 2)
                       for _ in range(3))
            if not viewed:
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            m = torch.randn(2, 1, 1, length, generator=g)
            before = [t.clone() for t in (q, k, v, m)]
            got, want = mod(q, k, v, m), F.scaled_dot_product_attention(q, k, v, m)
            assert got.stride() == want.stride(), (viewed, length)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(mod(q, k, v, m), want, rtol=1e-5, atol=1e-5)
            for x, b in zip((q, k, v, m), before):
                assert torch.equal(x, b)
    assert ": native (forced)" in mod.describe()


def test_a_bucket_remembered_on_disk_runs_ours_without_pytorchs_operator(monkeypatch):
    # One module measures two length buckets; another (the same cache: a second process, a
    # loaded module) meets the first bucket, then the second: there it takes the remembered
    # choice, and the result's layout from the first, without running PyTorch's operator.
    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, m)

    g = torch.Generator().manual_seed(5)

    def args(length):
        q, k, v = (torch.randn(2, length, 3, 16, generator=g).transpose(1, 2)
                   for _ in range(3))
        return q, k, v, torch.randn(2, 1, 1, length, generator=g)

    first = sr.StaticModule(torch.jit.script(f), MEASURE)
    for length in (9, 20):
        first(*args(length))
    assert first.kernels.measured == 2
    sdpa, ran = torch._C._nn.scaled_dot_product_attention, []

    def counted(*a, **kw):
        ran.append(a[0].shape[2])
        return sdpa(*a, **kw)

    monkeypatch.setattr(torch._C._nn, "scaled_dot_product_attention", counted)
    second = sr.StaticModule(torch.jit.script(f), MEASURE)
    for length in (9, 21, 22, 9):
        a = args(length)
        got, want = second(*a), sdpa(*a)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert second.kernels.measured == 0
    native = ": native (cached" in second.describe()
    # the first length runs PyTorch's operator to learn its result's layout; the others
    # run it only where the remembered choice is PyTorch's own
    assert ran[:1] == [9] and (21 not in ran) == native, (ran, second.describe())


def test_a_row_masked_entirely_gives_pytorchs_answer(forced):
    forced("native")
    fn = _masked_sdpa()
    mod = sr.StaticModule(fn, MEASURE)
    q, k, v = (torch.randn(1, 2, 6, 16) for _ in range(3))
    open_mask = torch.ones(6, 6, dtype=torch.bool)
    closed = open_mask.clone()
    closed[2] = False
    for m in (open_mask, closed, open_mask):
        torch.testing.assert_close(mod(q, k, v, m), fn(q, k, v, m), equal_nan=True)


def test_what_it_does_not_take_runs_pytorchs(forced):
    forced("native")
    fn = torch.jit.CompilationUnit(
        "def f(q, k, v):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n").f
    mod = sr.StaticModule(fn, MEASURE)
    big = [torch.randn(1, 1, 3, 320) for _ in range(3)]  # a head larger than 256
    double = [torch.randn(1, 2, 3, 8, dtype=torch.float64) for _ in range(3)]
    three_d = [torch.randn(2, 3, 8) for _ in range(3)]
    for args in (big, double, three_d):
        torch.testing.assert_close(mod(*args), fn(*args))
    assert "native (forced)" not in mod.describe()


class WrittenOut(nn.Module):
    """Attention written out over head views of one projection, scaled by ``/ √d`` — the
    pattern ``fuse_attention`` makes one node of — with each of its mask kinds."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.qkv = nn.Linear(8, 3 * 2 * 16)

    def forward(self, x, mask):
        b, t = x.size(0), x.size(1)
        h = self.qkv(x)
        q = h[:, :, :32].reshape(b, t, 2, 16).transpose(1, 2)
        k = h[:, :, 32:64].reshape(b, t, 2, 16).transpose(1, 2)
        v = h[:, :, 64:].reshape(b, t, 2, 16).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / 4.0
        if self.kind == "add":
            scores = scores + mask
        elif self.kind == "fill":
            scores = scores.masked_fill(mask, float("-inf"))
        elif self.kind == "keep":
            scores = torch.where(mask, scores, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


@pytest.mark.parametrize("kind", ["none", "add", "fill", "keep"])
def test_fused_attention_nodes_forced_native(kind, forced):
    forced("native")
    g = torch.Generator().manual_seed(3)
    sets = []
    for b, t in ((1, 6), (3, 19)):
        if kind == "add":
            mask = torch.randn(b, 1, t, t, generator=g)
        else:
            mask = torch.rand(t, t, generator=g) > 0.4
            mask[:, 0] = kind == "keep"  # a key each row keeps
            mask[:, 1] = kind == "fill"
        sets.append([torch.randn(b, t, 8, generator=g), mask])
    mod = check(WrittenOut(kind).eval(), sets[0], sets[1], options={"measure": MEASURE},
                rtol=1e-5, atol=1e-5)["measure"]
    kinds = [n.kind for n in mod.graph.walk()]
    assert ("static_runtime::attention" in kinds) or ("static_runtime::masked_attention"
                                                      in kinds), kinds
    assert ": native (forced)" in mod.describe()


def test_one_key_value_head_broadcasts_without_enable_gqa(forced):
    # Multi-query attention as Falcon calls it: one key/value head, ``enable_gqa`` left off —
    # PyTorch broadcasts it over the query heads; ours takes it as one group of all heads.
    forced("native")
    fn = _masked_sdpa()
    mod = sr.StaticModule(fn, MEASURE)
    g = torch.Generator().manual_seed(11)
    for b, h, length in ((1, 4, 12), (2, 4, 20), (1, 4, 12)):
        q = torch.randn(b, h, length, 16, generator=g)
        k, v = (torch.randn(b, 1, length, 16, generator=g) for _ in range(2))
        m = torch.rand(b, 1, length, length, generator=g) > 0.3
        m[..., 0] = True
        before = [t.clone() for t in (q, k, v, m)]
        want = F.scaled_dot_product_attention(q, k, v, m)
        for _ in range(2):
            torch.testing.assert_close(mod(q, k, v, m), want, rtol=1e-5, atol=1e-5)
        for x, y in zip((q, k, v, m), before):
            assert torch.equal(x, y)
    assert ": native (forced)" in mod.describe()
    # two key/value heads for four query heads do not broadcast: PyTorch's error, as eager
    q, k = torch.randn(1, 4, 6, 16), torch.randn(1, 2, 6, 16)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, k, k, None)
    with pytest.raises(RuntimeError):
        mod(q, k, k, torch.ones(6, 6, dtype=torch.bool))


def test_a_true_mask_one_value_per_query_is_dropped(monkeypatch):
    # An exported encoder given no padding mask builds an all-true mask, one value per query
    # row expanded along the keys: it masks nothing, and our kernel is not made to read it.
    # A row that is false keeps the mask; a mask that would widen the batch is kept.
    from static_runtime.ops import attention

    masks = []
    serve = attention._Kernel.serve

    def watched(self, q, k, v, mask, *args, **kwargs):
        masks.append(mask)
        return serve(self, q, k, v, mask, *args, **kwargs)

    monkeypatch.setattr(attention._Kernel, "serve", watched)
    fn = _masked_sdpa()
    mod = sr.StaticModule(fn, MEASURE)
    g = torch.Generator().manual_seed(13)
    for b, length, false_row in ((2, 9, None), (1, 14, None), (2, 9, 3)):
        q, k, v = (torch.randn(b, 2, length, 16, generator=g) for _ in range(3))
        rows = torch.ones(b, 1, length, 1, dtype=torch.bool)
        if false_row is not None:
            rows[:, :, false_row] = False
        m = rows.expand(b, 1, length, length)
        masks.clear()
        want = F.scaled_dot_product_attention(q, k, v, m)
        torch.testing.assert_close(mod(q, k, v, m), want, rtol=1e-5, atol=1e-5, equal_nan=True)
        assert (masks[-1] is None) == (false_row is None)
    # a mask that would widen the batch is kept: PyTorch's operator refuses it, and so do we
    q, k, v = (torch.randn(1, 2, 5, 16, generator=g) for _ in range(3))
    wide = torch.ones(3, 1, 5, 1, dtype=torch.bool).expand(3, 1, 5, 5)
    with pytest.raises(RuntimeError, match="broadcast shape"):
        F.scaled_dot_product_attention(q, k, v, wide)
    with pytest.raises(RuntimeError, match="broadcast shape"):
        mod(q, k, v, wide)
