"""Our own C kernels (``static_runtime/ops/ckernels``) against eager PyTorch."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import static_runtime as sr
from static_runtime.ops import ckernels

#: What each activation the kernels apply means, in PyTorch.
POST = {"none": lambda t: t, "relu": torch.relu, "relu6": lambda t: torch.clamp(t, 0, 6),
        "hardswish": nn.functional.hardswish, "sigmoid": torch.sigmoid,
        "silu": nn.functional.silu, "gelu": nn.functional.gelu, "tanh": torch.tanh,
        "gelu_tanh": lambda t: nn.functional.gelu(t, approximate="tanh")}
assert set(POST) == set(ckernels.ACTIVATIONS)

pytestmark = pytest.mark.skipif(not ckernels.available(),
                                reason=f"no C kernels: {ckernels.why_unavailable()}")

#: (channels, height, width, kernel, stride, padding, dilation): channel counts that are and
#: are not multiples of the vector widths (16, 8), borders wider than the interior, strides.
DEPTHWISE = [
    (64, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1)),
    (72, 9, 7, (5, 5), (2, 2), (2, 2), (1, 1)),
    (20, 6, 11, (7, 7), (1, 1), (3, 3), (1, 1)),
    (3, 5, 5, (3, 1), (1, 2), (1, 0), (1, 1)),
    (40, 12, 10, (3, 3), (1, 1), (2, 2), (2, 2)),
    (24, 4, 4, (3, 3), (1, 1), (0, 0), (1, 1)),
    (136, 16, 3, (3, 3), (3, 1), (1, 1), (1, 1)),
    (48, 10, 12, (7, 7), (1, 1), (3, 3), (1, 1)),  # eight interior pixels at once; 3 vectors
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "c{}_{}x{}_k{}".format(*c[:3], c[3]))
@pytest.mark.parametrize("act", sorted(ckernels.ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
def test_depthwise_matches_conv2d(case, act, bias):
    c, h, w, k, stride, padding, dilation = case
    torch.manual_seed(c + h)
    weight = torch.randn(c, 1, *k)
    b = torch.randn(c) if bias else None
    kernel = ckernels.depthwise_conv2d(weight, b, list(stride), list(padding), list(dilation),
                                       act)
    post = POST[act]
    for batch, (hh, ww) in ((1, (h, w)), (3, (h + 3, w + 2))):  # two shape sets
        for layout in (torch.channels_last, torch.contiguous_format):
            x = torch.randn(batch, c, hh, ww).contiguous(memory_format=layout) * 3
            before = x.clone()
            expected = post(torch.conv2d(x, weight, b, stride, padding, dilation, c))
            out = kernel(x)
            assert out.is_contiguous(memory_format=torch.channels_last)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(kernel(x), out, rtol=0, atol=0)  # repeated: the same
            assert torch.equal(x, before)  # the input is left alone


def test_depthwise_refuses_what_it_cannot_take():
    kernel = ckernels.depthwise_conv2d(torch.randn(8, 1, 3, 3), None, [1, 1], [0, 0], [1, 1],
                                       "none")
    with pytest.raises(ValueError, match="cannot take an input of shape"):
        kernel(torch.randn(1, 8, 2, 2))  # smaller than the kernel
    with pytest.raises(ValueError, match="cannot take an input of shape"):
        kernel(torch.randn(1, 4, 5, 5))  # another channel count
    with pytest.raises(ValueError, match="float32 4-D CPU tensor"):
        kernel(torch.randn(1, 8, 5, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="float32"):
        ckernels.depthwise_conv2d(torch.randn(8, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], "none")
    with pytest.raises(ValueError, match="applies"):
        ckernels.depthwise_conv2d(torch.randn(8, 1, 3, 3), None, [1, 1], [0, 0], [1, 1], "mish")


class Depthwise(nn.Module):
    """MobileNet's block: expand, depthwise (ReLU6 inside the kernel, hardswish after it),
    project."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Conv2d(8, 32, 1)
        self.depth = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.depth2 = nn.Conv2d(32, 32, 5, stride=2, padding=2, groups=32, bias=False)
        self.project = nn.Conv2d(32, 8, 1)

    def forward(self, x):
        h = torch.clamp(self.depth(self.expand(x)), 0, 6)
        h = nn.functional.hardswish(self.depth2(h))
        return self.project(h)


def test_a_model_measures_our_depthwise_kernel_and_answers_as_eager(tmp_path, monkeypatch):
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path))
    model = Depthwise().eval()
    mod = sr.StaticModule(torch.jit.script(model), sr.StaticModuleOptions(
        kernel_choice="measure", channels_last=True))
    with torch.inference_mode():
        for shape in ((1, 8, 12, 12), (2, 8, 9, 13)):
            x = torch.randn(shape)
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-5)
    # timed beside PyTorch's kernels ("native 4.1" among a choice's timings), both convolutions
    assert len(re.findall(r"µs: [^)]*native \d", mod.describe())) >= 2


def test_switched_off_the_kernels_are_not_candidates(tmp_path):
    code = ("import warnings; warnings.simplefilter('error');"
            "from static_runtime.ops import ckernels, conv; import torch;"
            "k = conv.ConvKernels(torch.randn(8, 1, 3, 3), None, [1, 1], [1, 1], [1, 1], 8, "
            "'none'); print(ckernels.available(), ckernels.why_unavailable(), k.names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, ckernels.ENV_SWITCH: "0",
                              "STATIC_RUNTIME_CACHE_DIR": str(tmp_path)}).stdout
    assert out.split()[:1] == ["False"] and "native" not in out and "=0" in out


def test_a_broken_compiler_leaves_pytorchs_kernels(tmp_path):
    code = ("from static_runtime.ops import ckernels\n"
            "import warnings\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always'); print(ckernels.available(), len(w))\n"
            "print(ckernels.why_unavailable())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "CC": "no-such-compiler",
                              "STATIC_RUNTIME_CACHE_DIR": str(tmp_path)}).stdout
    first, reason = out.splitlines()
    assert first == "False 1" and "no-such-compiler" in reason


#: (M, K, N): row counts around the kernel's row block (8 on AVX-512, 4 elsewhere), inner
#: sizes across its K block (256), column counts around its panel (32) and half panel (16).
GEMMS = [(1, 64, 64), (7, 50, 33), (8, 256, 16), (9, 300, 20), (17, 513, 47), (33, 32, 96),
         (3, 5, 1), (64, 16, 72), (2, 1, 40)]


@pytest.mark.parametrize("mkn", GEMMS, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("act", sorted(ckernels.ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
def test_gemm_matches_addmm(mkn, act, bias):
    m, k, n = mkn
    torch.manual_seed(m * 31 + k)
    weight = torch.randn(n, k)
    b = torch.randn(n) if bias else None
    gemm = ckernels.Gemm(weight.t(), b, act).kernel()
    post = POST[act]
    for rows in (m, 2 * m + 3):  # two shape sets
        x = torch.randn(rows, k) * 2
        before = x.clone()
        expected = post(nn.functional.linear(x, weight, b))
        out = gemm(x, None)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        into = torch.full((rows, n), float("nan"))
        assert gemm(x, into) is into
        torch.testing.assert_close(into, out, rtol=0, atol=0)  # repeated: the same
        assert torch.equal(x, before)
        # rows further apart than K (a slice of a wider matrix), as a planned tensor may be
        wide = torch.randn(rows, k + 5)
        torch.testing.assert_close(gemm(wide[:, :k], None),
                                   post(nn.functional.linear(wide[:, :k], weight, b)),
                                   rtol=1e-4, atol=1e-4)


def test_gemm_refuses_what_it_cannot_take():
    gemm = ckernels.Gemm(torch.randn(6, 4), None).kernel()  # K = 6, N = 4
    with pytest.raises(ValueError, match="unit column stride"):
        gemm(torch.randn(6, 3).t(), None)  # columns not adjacent
    with pytest.raises(ValueError, match=r"\(M, 6\)"):
        gemm(torch.randn(3, 5), None)
    with pytest.raises(ValueError, match="contiguous float32 \\(3, 4\\)"):
        gemm(torch.randn(3, 6), torch.empty(4, 3).t())
    with pytest.raises(ValueError, match="float32 \\(4,\\)"):
        ckernels.Gemm(torch.randn(6, 4), torch.randn(5))


@pytest.mark.parametrize("act", sorted(ckernels.ACTIVATIONS))
def test_conv1x1_matches_conv2d(act):
    torch.manual_seed(1)
    weight, bias = torch.randn(24, 40, 1, 1), torch.randn(24)
    conv = ckernels.Gemm(weight.reshape(24, 40).t(), bias, act).conv1x1()
    post = POST[act]
    for shape in ((1, 40, 1, 1), (3, 40, 7, 5)):
        for layout in (torch.channels_last, torch.contiguous_format):
            x = torch.randn(shape).contiguous(memory_format=layout)
            out = conv(x)
            assert out.is_contiguous(memory_format=torch.channels_last)
            torch.testing.assert_close(out, post(torch.conv2d(x, weight, bias)), rtol=1e-4,
                                       atol=1e-4)
    with pytest.raises(ValueError, match="40 input channels"):
        conv(torch.randn(1, 24, 3, 3))


class Linears(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(96, 200)
        self.down = nn.Linear(200, 40, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_a_model_measures_our_gemm_and_answers_as_eager(tmp_path, monkeypatch):
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path))
    model = Linears().eval()
    mod = sr.StaticModule(torch.jit.script(model), sr.StaticModuleOptions(
        kernel_choice="measure"))
    with torch.inference_mode():
        for shape in ((64, 96), (3, 17, 96)):
            x = torch.randn(shape)
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)
    assert len(re.findall(r"µs: [^)]*native \d", mod.describe())) >= 2  # timed beside the others


#: (in channels, out channels, height, width, kernel, stride, padding, dilation)
CONVS = [
    (16, 16, 12, 12, (3, 3), (1, 1), (1, 1), (1, 1)),
    (3, 24, 17, 15, (4, 4), (4, 4), (0, 0), (1, 1)),
    (5, 40, 9, 11, (3, 5), (2, 1), (1, 2), (1, 1)),
    (8, 33, 10, 10, (3, 3), (1, 1), (2, 2), (2, 2)),
    (20, 7, 6, 6, (1, 1), (2, 2), (0, 0), (1, 1)),
    # output channels in two panels at once (64), then a pair and one panel of 16 (80), at
    # pixel counts no tile's row count divides
    (12, 64, 7, 9, (3, 3), (1, 1), (1, 1), (1, 1)),
    (6, 80, 5, 7, (3, 3), (1, 1), (1, 1), (1, 1)),
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{c[0]}to{c[1]}_k{c[4]}")
@pytest.mark.parametrize("act", sorted(ckernels.ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_matches_conv2d(case, act, bias):
    cin, cout, h, w, k, stride, padding, dilation = case
    torch.manual_seed(cin * 7 + cout)
    weight = torch.randn(cout, cin, *k)
    b = torch.randn(cout) if bias else None
    conv = ckernels.Conv2d(weight, b, list(stride), list(padding), list(dilation), act).kernel()
    post = POST[act]
    for batch, (hh, ww) in ((1, (h, w)), (3, (h + 4, w + 1))):  # two shape sets
        for layout in (torch.channels_last, torch.contiguous_format):
            x = torch.randn(batch, cin, hh, ww).contiguous(memory_format=layout)
            before = x.clone()
            out = conv(x)
            assert out.is_contiguous(memory_format=torch.channels_last)
            torch.testing.assert_close(
                out, post(torch.conv2d(x, weight, b, stride, padding, dilation)),
                rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(conv(x), out, rtol=0, atol=0)
            # the unchecked call of one shape and layout: a channels-first input read as is
            direct = conv.direct_for(x.shape, channels_first=layout is torch.contiguous_format)
            torch.testing.assert_close(direct(x), out, rtol=0, atol=0)
            assert torch.equal(x, before)
    with pytest.raises(ValueError, match="cannot take an input of shape"):
        conv(torch.randn(1, cin + 1, h, w))


@pytest.mark.parametrize("act", sorted(ckernels.ACTIVATIONS))
def test_activations_over_the_whole_float_range(act):
    """The epilogue alone (an identity product): exp's range reduction and clamps, erf's fit,
    at large magnitudes, near zero and at signed zeros."""
    values = torch.cat([torch.linspace(-120, 120, 4801), torch.tensor([0.0, -0.0, 1e-8, -1e-8]),
                        torch.randn(459) * 4, torch.tensor([float("nan")] * 16)])
    x = values.reshape(-1, 16)
    gemm = ckernels.Gemm(torch.eye(16), None, act).kernel()
    # (a NaN in is a NaN out, as PyTorch gives: a clamp must not turn it into a number; the
    # NaNs fill the last row, as a product spreads a NaN along its row)
    torch.testing.assert_close(gemm(x, None), POST[act](x.double()).float(), rtol=3e-6,
                               atol=1e-6, equal_nan=True)


def test_a_second_process_loads_the_build_and_old_builds_are_deleted(tmp_path):
    """The library is built once per cache directory: a second process loads it (no compiler
    run), and a new build leaves at most a few others beside it."""
    native = tmp_path / "native"
    native.mkdir()
    for i in range(6):  # builds of other versions
        (native / f"libsr_kernels-old{i}.so").write_bytes(b"")
        (native / f"libsr_kernels-old{i}.lock").write_bytes(b"")
    code = ("from static_runtime.ops import ckernels; assert ckernels.available(), "
            "ckernels.why_unavailable()")
    env = {**os.environ, "STATIC_RUNTIME_CACHE_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)
    built = sorted(native.glob("*.so"))
    assert len(built) <= 4 and any("old" not in p.name for p in built)
    # the second process finds it: with no compiler on PATH it still loads
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300,
                   env={**env, "CC": "no-such-compiler-but-the-build-is-there"})


def test_every_input_size_shares_one_packed_weight(tmp_path, monkeypatch):
    """Traffic of many sizes measures each new size; the kernels chosen for them share the
    weight packed once (a copy per size grew memory with the number of sizes)."""
    from static_runtime.ops.conv import ConvKernels

    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path))
    for weight, groups in ((torch.randn(8, 4, 3, 3), 1), (torch.randn(8, 1, 3, 3), 8),
                           (torch.randn(8, 4, 1, 1), 1)):
        kernels = ConvKernels(weight, None, [1, 1], [0, 0], [1, 1], groups, "none")
        assert kernels.kernel("native") is kernels.kernel("native")


def test_a_flag_set_the_compiler_refuses_falls_back_once_and_names_the_build(tmp_path):
    """A compiler that refuses the preferred flags (clang and older GCC do not know the
    64-byte move options) builds the next set; the refusal is remembered beside the build, so
    a second process neither tries that set again nor needs a compiler; the kernel version
    the choice cache keys by names the flags of the build loaded."""
    native = tmp_path / "native"
    wrapper = tmp_path / "cc"
    calls = tmp_path / "calls"
    # a compiler that refuses the first set's options and otherwise runs the real one
    wrapper.write_text("#!/bin/sh\n"
                       f"echo \"$*\" >> {calls}\n"
                       "case \"$*\" in *-mmove-max*) echo 'unrecognized option' >&2; exit 1;; esac\n"
                       f"exec {os.environ.get('CC') or 'cc'} \"$@\"\n")
    wrapper.chmod(0o755)
    code = textwrap.dedent("""
        from static_runtime.ops import ckernels
        ckernels._flag_sets = lambda: [ckernels._WIDE_MOVES, *ckernels._FLAG_SETS]
        assert ckernels.available(), ckernels.why_unavailable()
        print(" ".join(ckernels._built_with), "|", ckernels.source_digest())
    """)
    env = {**os.environ, "STATIC_RUNTIME_CACHE_DIR": str(tmp_path), "CC": str(wrapper)}
    first = subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300,
                           capture_output=True, text=True).stdout.strip()
    assert first.split(" | ")[0] == " ".join(ckernels._FLAG_SETS[0])
    assert len(list(native.glob("*.failed"))) == 1 and len(list(native.glob("*.so"))) == 1
    assert len(calls.read_text().splitlines()) == 2
    second = subprocess.run([sys.executable, "-c", code], check=True, timeout=300,
                            capture_output=True, text=True,
                            env={**env, "CC": "no-such-compiler-but-the-build-is-there"})
    assert second.stdout.strip() == first
    assert len(calls.read_text().splitlines()) == 2  # the refused set not tried again
    # the digest of a build with other flags differs (its choices are not these)
    saved = ckernels._built_with
    try:
        digests = set()
        for flags in (ckernels._WIDE_MOVES, *ckernels._FLAG_SETS):
            ckernels._built_with = flags
            ckernels.source_digest.cache_clear()
            digests.add(ckernels.source_digest())
        assert len(digests) == 1 + len(ckernels._FLAG_SETS)
    finally:
        ckernels._built_with = saved
        ckernels.source_digest.cache_clear()


def test_per_shape_entries_are_kept_by_plain_tuples_and_bounded():
    """``remember``'s keys: a ``torch.Size`` (the key itself or an element of it) is kept as
    the plain tuple it equals — found by either, and an object the cyclic collector stops
    tracking once collected (an entry is made for every size traffic brings) — and the oldest
    entry goes once the cache is full."""
    import gc

    cache: dict = {}
    for key in (torch.Size([3, 4]), (torch.Size([5, 6]), 1), (torch.Size([2]), torch.Size([2]), 7),
                (8, 9), 10):
        assert ckernels.remember(cache, key, str(key)) == str(key)
        assert cache[key] == str(key)
    kept = list(cache)
    assert all(type(k) is not torch.Size for k in kept)
    assert all(type(e) is not torch.Size for k in kept if isinstance(k, tuple) for e in k)
    assert kept[:3] == [(3, 4), ((5, 6), 1), ((2,), (2,), 7)]
    gc.collect()
    gc.collect()  # (a tuple of tuples: untracked once its elements are)
    assert not any(gc.is_tracked(k) for k in kept)
    for i in range(ckernels._MAX_SHAPES):
        ckernels.remember(cache, ("more", i), i)
    assert len(cache) == ckernels._MAX_SHAPES and (3, 4) not in cache and ("more", 0) in cache


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_embedding_bags_kernel_adds_each_tables_rows_as_embedding_bag(mode, dtype):
    """``sr_embedding_bags`` (``static_runtime::embedding_bags``' kernel): per row of the
    batch and table, the sum or mean of the rows its indices name in that table, the same bits
    as ``embedding_bag`` of each table; indices read through strides (the tables' columns of a
    wider tensor); an index outside its own table returns -1 and writes nothing."""
    lib = ckernels.library()
    g = torch.Generator().manual_seed(mode)
    rows = [7, 50, 13]
    tables = [torch.randn(r, 20, generator=g) for r in rows]  # (20: a vector and a part)
    _, address, _keep = _table_block_for_test(tables, rows, mode)  # (_keep: what it names)
    for batch, size in ((9, 3), (1, 1), (33, 5)):
        wide = torch.stack([torch.randint(0, 5, (batch, size), generator=g)]
                           + [torch.randint(0, r, (batch, size), generator=g) for r in rows],
                           1).to(dtype)
        x = wide[:, 1:]  # (strided: the columns after the first)
        before = wide.clone()
        out = torch.full((batch, 60), float("nan"))
        status = lib.sr_embedding_bags(x.data_ptr(), dtype is torch.int32, out.data_ptr(),
                                       batch, *x.stride(), size, address)
        expected = torch.cat([nn.functional.embedding_bag(x[:, t].long(), tables[t],
                                                          mode=("sum", "mean")[mode])
                              for t in range(len(rows))], 1)
        assert status == 0 and torch.equal(out, expected) and torch.equal(wide, before)
        for t, bad in ((0, 7), (2, -1), (1, 50)):
            y = x.clone()
            y[batch - 1, t, size - 1] = bad
            out = torch.full((batch, 60), 5.0)
            assert lib.sr_embedding_bags(y.data_ptr(), dtype is torch.int32, out.data_ptr(),
                                         batch, *y.stride(), size, address) == -1
            assert (out == 5.0).all()


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_embedding_bag_rows_kernel_adds_each_bag_as_embedding_bag(mode, dtype):
    """``sr_embedding_bag_rows`` (``static_runtime::embedding_bag_rows``' kernel): per table,
    the bags its row of bag starts cuts its row of indices into, summed or averaged as
    ``embedding_bag`` with those offsets does (the same bits; an empty bag 0), contiguous
    (bags, tables, width); what the tables end to end would hide returns -1 and writes
    nothing: an index outside its own table, a first start other than 0, starts decreasing,
    a start past the row's length."""
    lib = ckernels.library()
    g = torch.Generator().manual_seed(10 + mode)
    rows = [7, 50, 13]
    tables = [torch.randn(r, 20, generator=g) for r in rows]
    _, address, _keep = _table_block_for_test(tables, rows, mode)  # (_keep: what it names)

    def call(x, o, out):
        return lib.sr_embedding_bag_rows(x.data_ptr(), x.dtype is torch.int32, *x.stride(),
                                         o.data_ptr(), o.dtype is torch.int32, *o.stride(),
                                         x.shape[1], o.shape[1], out.data_ptr(), address)

    for length, o_row in ((9, [0, 2, 2, 7]), (1, [0]), (30, [0, 0, 13, 29])):
        x = torch.stack([torch.randint(0, r, (length,), generator=g) for r in rows]).to(dtype)
        o = torch.tensor([o_row] * len(rows), dtype=dtype).t().contiguous().t()  # (strided)
        out = torch.full((len(o_row), len(rows), 20), float("nan"))
        expected = torch.stack([nn.functional.embedding_bag(
            x[t].long(), tables[t], o[t].long(), mode=("sum", "mean")[mode])
            for t in range(len(rows))], 1)
        assert call(x, o, out) == 0 and torch.equal(out, expected)
        for bad in ("index", "negative", "first start", "decreasing", "past the end"):
            y, p = x.clone(), o.clone()
            if bad == "index":
                y[1, length - 1] = rows[1]
            elif bad == "negative":
                y[2, 0] = -1
            elif bad == "first start":
                p[0, 0] = 1
            elif bad == "decreasing" and p.shape[1] > 2:
                p[1, 2] = p[1, 1] - 1
            elif bad == "past the end":
                p[2, -1] = length + 1
            else:
                continue
            out = torch.full((len(o_row), len(rows), 20), 5.0)
            assert call(y, p, out) == -1, bad
            assert (out == 5.0).all()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_embeddings_kernel_copies_each_tables_row(dtype):
    """``sr_embeddings`` (``static_runtime::embeddings``' kernel of a 2-D index tensor): row
    ``x[b, t]`` of table t at ``out[b, t * width ...]``, as ``embedding`` of each table
    concatenated; indices read through strides; an index outside its own table returns -1
    and writes nothing."""
    lib = ckernels.library()
    g = torch.Generator().manual_seed(3)
    rows = [7, 50, 13]
    tables = [torch.randn(r, 20, generator=g) for r in rows]
    _, address, _keep = _table_block_for_test(tables, rows)  # (_keep: what it names)
    for batch in (1, 9, 33):
        wide = torch.stack([torch.randint(0, 5, (batch,), generator=g)]
                           + [torch.randint(0, r, (batch,), generator=g) for r in rows],
                           1).to(dtype)
        x = wide[:, 1:]
        out = torch.full((batch, 60), float("nan"))
        assert lib.sr_embeddings(x.data_ptr(), dtype is torch.int32, batch, *x.stride(),
                                 out.data_ptr(), address) == 0
        expected = torch.cat([nn.functional.embedding(x[:, t].long(), tables[t])
                              for t in range(len(rows))], 1)
        assert torch.equal(out, expected)
        for t, bad in ((0, 7), (2, -1), (1, 50)):
            y = x.clone()
            y[batch - 1, t] = bad
            out = torch.full((batch, 60), 5.0)
            assert lib.sr_embeddings(y.data_ptr(), dtype is torch.int32, batch, *y.stride(),
                                     out.data_ptr(), address) == -1
            assert (out == 5.0).all()


def _table_block_for_test(tables, rows, *rest):
    """The kernels' block for ``tables`` laid end to end (``rest``: after the width), its
    address, and the objects its addresses name (held by the caller)."""
    from static_runtime.ops.embeddings import _table_block

    weight = torch.cat(tables)
    return _table_block(weight, rows, int(weight.shape[1]), *rest)
