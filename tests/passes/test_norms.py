"""``fuse_rms_norm`` / ``fuse_l2_normalize`` (``passes/norms.py``) and the nodes they make
(``ops/norms.py``): what is fused and what is left alone, answers equal to TorchScript's on
two shape sets with either kernel, and our kernels against the composites."""

import pytest
import torch
from differential import check
from measured import MEASURE, OPTIONS, fresh_kernel_cache, needs_ckernels  # noqa: F401
from torch import nn

import static_runtime as sr
from static_runtime.ops.ckernels.layers import l2_normalize, rms_norm
from static_runtime.ops.kernels import Choice, KernelChooser

pytestmark = needs_ckernels


class LlamaNorm(nn.Module):
    """LLaMA's RMSNorm (a cast to float32 before the weight), T5's (none), and a norm whose
    parts are reused elsewhere (left alone)."""

    def __init__(self, dim: int = 40):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(dim))
        self.w2 = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        h = x.to(torch.float32)
        v = h.pow(2).mean(-1, keepdim=True)
        a = self.w1 * (h * torch.rsqrt(v + 1e-6)).to(torch.float32)
        b = (a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-5)) * self.w2
        r = torch.rsqrt(b.pow(2).mean(-1, keepdim=True) + 1e-6)
        c = self.w2 * (b * r)
        return a + b + c + r  # r reused: the third norm is not fused


def _kinds(mod):
    return [n.kind for n in mod.graph.walk()]


def _inputs():
    torch.manual_seed(2)
    return [torch.randn(2, 7, 40)], [torch.randn(3, 40)]


def test_two_of_three_fused_and_answers_equal_on_two_shape_sets():
    first, second = _inputs()
    mods = check(LlamaNorm().eval(), first, second, options=OPTIONS)
    assert _kinds(mods["measure"]).count("static_runtime::rms_norm") == 2
    assert "rows<=16 h=40 threads=" in mods["measure"].describe()  # 14 rows: up to 16


@pytest.mark.parametrize("name", ["aten", "native"])
def test_each_kernel_forced(name, monkeypatch):
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(name, {}, "forced"))
    first, second = _inputs()
    mod = check(LlamaNorm().eval(), first, second, options={"measure": MEASURE})["measure"]
    assert mod.describe().count(f": {name} (forced)") >= 2


def test_not_fused_without_measured_kernels():
    mod = sr.StaticModule(torch.jit.script(LlamaNorm().eval()),
                          sr.StaticModuleOptions(kernel_choice="default"))
    assert "static_runtime::rms_norm" not in _kinds(mod)


class NotNorms(nn.Module):
    """Near misses: another dimension, no keepdim, a cube, a weight that is an input."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6))

    def forward(self, x, w_in):
        a = self.w * (x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6))
        b = self.w * (x * torch.rsqrt(x.pow(3).mean(-1, keepdim=True) + 1e-6))
        c = w_in * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        d = self.w * (x * torch.rsqrt(x.pow(2).mean(-1).unsqueeze(-1) + 1e-6))
        return a + b + c + d


def test_near_misses_are_left_alone():
    torch.manual_seed(3)
    mods = check(NotNorms().eval(), [torch.randn(6, 6), torch.randn(6)],
                 [torch.randn(6, 6) * 2, torch.randn(6)], options={"measure": MEASURE})
    assert "static_runtime::rms_norm" not in _kinds(mods["measure"])


@pytest.mark.parametrize("h", [1, 15, 16, 40, 257])
def test_kernel_matches_the_composite(h):
    from static_runtime.ops.norms import rms_norm_reference

    torch.manual_seed(h)
    weight = torch.randn(h)
    kernel = rms_norm(weight, 1e-5)
    for shape in ((1, h), (3, 5, h)):  # two shape sets
        x = torch.randn(shape) * 4
        before = x.clone()
        out = kernel(x)
        torch.testing.assert_close(out, rms_norm_reference(x, weight, 1e-5), rtol=2e-6,
                                   atol=2e-6)
        assert torch.equal(kernel(x), out) and torch.equal(x, before)
    with pytest.raises(ValueError, match=f"last dimension {h}"):
        kernel(torch.randn(2, h + 1))


class Embeddings(nn.Module):
    """A retrieval model's two normalised towers (last dimension, and by default dim=1 of a
    2-D tensor), one over another dimension (composite), and near misses: a norm reused, an
    L1 norm."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(12, 12)

    def forward(self, x, y):
        u = nn.functional.normalize(self.proj(x), dim=-1)
        v = nn.functional.normalize(y, dim=1, eps=1e-6)
        w = nn.functional.normalize(x, dim=0)
        n = x.norm(2.0, [1], True)
        reused = x / n.clamp_min(1e-12).expand_as(x) + n
        l1 = nn.functional.normalize(y, p=1.0, dim=1)
        return u @ v.t(), w, reused, l1


def _embedding_inputs():
    g = torch.Generator().manual_seed(5)
    zero = torch.randn(2, 12, generator=g)
    zero[1] = 0.0  # a zero row: eps decides
    return ([torch.randn(3, 12, generator=g), zero],
            [torch.randn(7, 12, generator=g) * 3, torch.randn(4, 12, generator=g)])


def test_normalize_fused_where_it_matches_and_answers_equal():
    first, second = _embedding_inputs()
    mods = check(Embeddings().eval(), first, second, options=OPTIONS)
    assert _kinds(mods["measure"]).count("static_runtime::l2_normalize") == 3
    assert "rows<=4 h=12 threads=" in mods["measure"].describe()  # 3 rows: up to 4
    off = sr.StaticModule(torch.jit.script(Embeddings().eval()),
                          sr.StaticModuleOptions(kernel_choice="default"))
    assert "static_runtime::l2_normalize" not in _kinds(off)


@pytest.mark.parametrize("name", ["aten", "native"])
def test_normalize_each_kernel_forced(name, monkeypatch):
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(name, {}, "forced"))
    first, second = _embedding_inputs()
    mod = check(Embeddings().eval(), first, second, options={"measure": MEASURE})["measure"]
    assert mod.describe().count(f": {name} (forced)") >= 2


def test_normalize_exported():
    first, second = _embedding_inputs()
    model = Embeddings().eval()
    dims = {"x": {0: torch.export.Dim("a", min=2)}, "y": {0: torch.export.Dim("b", min=2)}}
    ep = torch.export.export(model, tuple(first), dynamic_shapes=dims)
    mod = sr.StaticModule(ep, MEASURE)
    assert _kinds(mod).count("static_runtime::l2_normalize") == 3
    for xs in (first, second, first):
        for got, want in zip(mod(*xs), model(*xs), strict=True):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("h", [1, 15, 16, 40, 257])
def test_normalize_kernel_matches_the_composite(h):
    from static_runtime.ops.norms import l2_normalize_reference

    torch.manual_seed(h)
    kernel = l2_normalize(h, 1e-12)
    for shape in ((1, h), (3, 5, h)):  # two shape sets
        x = torch.randn(shape) * 4
        x.view(-1, h)[0] = 1e-14  # eps decides (clamped, not added)
        if x.shape[0] == 3:
            x.view(-1, h)[1] = 0.0
        x.view(-1, h)[-1, 0] = float("nan") if shape[0] == 3 else 1.0
        before = x.clone()
        out = kernel(x)
        torch.testing.assert_close(out, l2_normalize_reference(x, -1, 1e-12), rtol=2e-6,
                                   atol=2e-6, equal_nan=True)
        assert torch.equal(kernel(x).nan_to_num(), out.nan_to_num())
        assert torch.equal(x.nan_to_num(), before.nan_to_num())
    with pytest.raises(ValueError, match=f"last dimension {h}"):
        kernel(torch.randn(2, h + 1))
