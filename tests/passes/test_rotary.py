"""``fuse_rotary`` (``passes/rotary.py``) and the node it makes (``ops/rotary.py``): rotary
position embeddings ``x * cos + rotate_half(x) * sin`` become one node whose kernel is
measured; with either kernel forced it gives the same bits as TorchScript — and the same
strides — on two shape sets (a permuted query, a length of one, ``cos``/``sin`` of several
ranks), leaves its inputs alone, and near misses are left unfused."""

import pytest
import torch
from differential import _snapshot, check, script
from measured import MEASURE, OPTIONS, fresh_kernel_cache, needs_ckernels  # noqa: F401
from passes_helpers import kinds

import static_runtime as sr
from static_runtime.ops.kernels import Choice, KernelChooser

pytestmark = needs_ckernels

FUSED = "static_runtime::rotary"

# LLaMA's form: half computed from the size; a query made by a projection viewed as heads and
# transposed (not contiguous), the key as given
HALF_COMPUTED = """
def f(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    b, s, hd = q.shape
    q = q.view(b, s, 2, hd // 2).transpose(1, 2)
    h = q.size(-1) // 2
    q1 = q[..., :h]
    q2 = q[..., h:]
    q = q * cos + torch.cat((-q2, q1), dim=-1) * sin
    h2 = k.shape[-1] // 2
    k = (k * cos) + (sin * torch.cat([-k[..., h2:], k[..., :h2]], -1))
    return q, k
"""

# A constant half, ``0`` as the start, ``cos`` first
HALF_CONSTANT = """
def f(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    r = torch.cat([-x[..., 4:], x[..., 0:4]], -1)
    return cos * x + r * sin
"""


def _traced_half_constant():
    """As a trace spells it: the last dimension of the slices as 3, cat's as -1."""
    def f(x, cos, sin):
        return cos * x + torch.cat([-x[..., 4:], x[..., :4]], -1) * sin

    return torch.jit.trace(f, (torch.randn(1, 2, 3, 8), torch.randn(3, 8), torch.randn(3, 8)))


def _force(monkeypatch, kernel: str) -> None:
    monkeypatch.setattr(KernelChooser, "choose", lambda self, key, names, make, default: Choice(
        kernel if kernel in names and key.startswith("rotary") else default, {}, "forced"))


def _same_bits_and_strides(mod, fn, args):
    before = _snapshot(list(args))
    ours, theirs = mod(*args), fn(*args)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b) and a.stride() == b.stride(), (a.stride(), b.stride())
    for a, b in zip(args, before):
        assert torch.equal(a, b)  # (inputs left alone)


@pytest.mark.parametrize("kernel", ["native", "aten"])
def test_llama_form_fuses_and_gives_torchscripts_bits(kernel, monkeypatch):
    _force(monkeypatch, kernel)
    scripted = script(HALF_COMPUTED)
    mod = sr.StaticModule(scripted, options=MEASURE)
    assert kinds(mod.graph).count(FUSED) == 2
    g = torch.Generator().manual_seed(3)
    for b, s, d in ((2, 5, 16), (1, 1, 8), (3, 7, 16)):  # (a length of one: another layout)
        for pos in ((s, d // 2), (1, 1, s, d // 2), (b, 1, s, d // 2)):
            q = torch.randn(b, s, d, generator=g)
            k = torch.randn(b, 2, s, d // 2, generator=g)
            cos, sin = torch.randn(pos, generator=g), torch.randn(pos, generator=g)
            for _ in range(2):  # (repeated calls: the same answer)
                _same_bits_and_strides(mod, scripted, (q, k, cos, sin))


@pytest.mark.parametrize("kernel", ["native", "aten"])
@pytest.mark.parametrize("traced", [False, True])
def test_constant_half_through_the_differential_check(kernel, traced, monkeypatch):
    _force(monkeypatch, kernel)
    g = torch.Generator().manual_seed(4)
    mods = check(_traced_half_constant() if traced else script(HALF_CONSTANT),
                 (torch.randn(2, 3, 5, 8, generator=g), torch.randn(5, 8, generator=g),
                  torch.randn(1, 1, 5, 8, generator=g)),
                 (torch.randn(1, 2, 9, 8, generator=g).transpose(1, 2),
                  torch.randn(2, 1, 1, 8, generator=g), torch.randn(8, generator=g)),
                 options=OPTIONS, rtol=0, atol=0)
    assert kinds(mods["measure"].graph).count(FUSED) == 1
    assert "rotary: kernel chosen per row count by measurement" in mods["measure"].describe()


def test_what_the_loop_does_not_take_runs_the_operators(monkeypatch):
    """Float64, a ``cos`` that widens the result, a last dimension of 1: the composite."""
    _force(monkeypatch, "native")
    scripted = script(HALF_CONSTANT)
    mod = sr.StaticModule(scripted, options=MEASURE)
    g = torch.Generator().manual_seed(5)
    cases = [(torch.randn(1, 2, 3, 8, dtype=torch.float64, generator=g),
              torch.randn(3, 8, dtype=torch.float64, generator=g),
              torch.randn(3, 8, dtype=torch.float64, generator=g)),
             (torch.randn(1, 1, 3, 8, generator=g), torch.randn(2, 1, 3, 8, generator=g),
              torch.randn(3, 8, generator=g))]
    for args in cases:
        _same_bits_and_strides(mod, scripted, args)


def test_near_misses_are_left_alone():
    srcs = {
        "other halves": """
def f(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    return x * cos + torch.cat([-x[..., 3:], x[..., :4]], -1) * sin
""",
        "the rotated half used twice": """
def f(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    r = torch.cat([-x[..., 4:], x[..., :4]], -1)
    return x * cos + r * sin, r
""",
        "another tensor rotated": """
def f(x: torch.Tensor, y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    return x * cos + torch.cat([-y[..., 4:], y[..., :4]], -1) * sin
""",
        "a subtraction": """
def f(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    return x * cos - torch.cat([-x[..., 4:], x[..., :4]], -1) * sin
""",
    }
    for name, src in srcs.items():
        mod = sr.StaticModule(script(src), options=MEASURE)
        assert FUSED not in kinds(mod.graph), name


def test_default_kernels_fuse_nothing():
    mod = sr.StaticModule(script(HALF_CONSTANT), options=sr.StaticModuleOptions(
        kernel_choice="default"))
    assert FUSED not in kinds(mod.graph)


def test_result_layout_is_eagers_for_any_layout():
    """``ops/rotary.py`` lays its result out as eager's ``x * cos + rotated * sin`` is (the
    rule of PyTorch's ``TensorIterator``: permuted, non-dense, broadcast and dimensions of 1),
    checked against ATen over random layouts."""
    import random

    from static_runtime.ops.rotary import _result_strides

    rng = random.Random(1)
    checked = 0
    for _ in range(3000):
        n = rng.randint(1, 4)
        shape = [rng.choice([1, 1, 2, 3, 5]) for _ in range(n)]
        shape[-1] = rng.choice([2, 4, 8])
        perm = list(range(n))
        rng.shuffle(perm)
        inverse = [perm.index(i) for i in range(n)]
        rows = 2 if rng.random() < 0.3 else 1  # (a view of every other block: not dense)
        base = torch.randn([shape[p] * (rows if k == 0 else 1) for k, p in enumerate(perm)])
        x = base[: shape[perm[0]]].permute(inverse)
        k = rng.randint(1, n)
        sin = torch.randn([rng.choice([1, shape[n - k + i]]) for i in range(k)])
        if x.stride(-1) != 1:
            continue  # (the loop refuses these)
        product = x * torch.randn(sin.shape)
        half = shape[-1] // 2
        want = product + torch.cat([-x[..., half:], x[..., :half]], -1) * sin
        got = _result_strides(x, sin, product)
        if got is not None:
            assert got == want.stride(), (shape, x.stride(), sin.shape)
            checked += 1
    assert checked > 1000


def test_the_loop_runs_only_where_its_bucket_chose_it(monkeypatch):
    """A measurement runs our candidate (and sets up what its steady calls reuse); where the
    operators win, no later call runs our loop."""
    from static_runtime.ops import rotary as ops_rotary

    real = ops_rotary.ckernels.library()
    calls = []

    class Counting:
        def sr_rotary_add(self, *args):
            calls.append(1)
            return real.sr_rotary_add(*args)

    monkeypatch.setattr(ops_rotary.ckernels, "library", lambda: Counting())

    def measured_then_aten(self, key, names, make, default):
        candidates = make()
        for _ in range(3):  # (as a measurement times it)
            candidates["native"]()
        return Choice("aten", {}, "forced after measuring")

    monkeypatch.setattr(KernelChooser, "choose", measured_then_aten)
    scripted = script(HALF_CONSTANT)
    mod = sr.StaticModule(scripted, options=MEASURE)
    g = torch.Generator().manual_seed(6)
    args = (torch.randn(1, 2, 5, 8, generator=g), torch.randn(5, 8, generator=g),
            torch.randn(5, 8, generator=g))
    _same_bits_and_strides(mod, scripted, args)
    measuring = len(calls)
    assert measuring == 3
    for _ in range(3):
        _same_bits_and_strides(mod, scripted, args)
    assert len(calls) == measuring  # (the operators serve: the choice holds)
