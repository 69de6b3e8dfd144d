"""Constant-aware operator selection: linear with a constant weight runs as addmm; slices
with constant arguments as Python indexing; constant advanced indices as index_select."""

import warnings

import pytest
import torch
from differential import check, script
from op_cases import ts

import static_runtime as sr
from static_runtime.runtime.hot import wait_for_builds

#: These tests are about the selection that runs without measured kernels (the measured
#: GEMMs' own tests are tests/ops/test_kernels.py).
UNMEASURED = sr.StaticModuleOptions(kernel_choice="default")


class Linear(torch.nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        self.lin = torch.nn.Linear(8, 5, bias=bias)

    def forward(self, x):
        return self.lin(x) * 2


def test_constant_weight_linear_uses_addmm_and_mm():
    for bias, label in ((True, "torch.addmm"), (False, "torch.mm")):
        mod = sr.StaticModule(torch.jit.script(Linear(bias)), UNMEASURED)
        lines = [ln for ln in mod.describe().splitlines() if ln.startswith("aten::linear")]
        assert lines and label in lines[0]


def test_results_equal_for_2d_and_other_ranks():
    for bias in (True, False):
        check(Linear(bias), [torch.randn(3, 8)], [torch.randn(2, 4, 8)])
        check(Linear(bias), [torch.randn(8)], [torch.randn(1, 8)])


def test_planning_ahead_on_meta_tensors_still_works():
    scripted = torch.jit.script(Linear(True))
    mod = sr.StaticModule(scripted, example_inputs=(torch.randn(3, 8),))
    assert mod.ahead_of_time_error is None
    x = torch.randn(3, 8)
    torch.testing.assert_close(mod(x), scripted(x))


# --------------------------------------------------------------------------- slice


def _label(mod, kind):
    return [ln for ln in mod.describe().splitlines() if ln.startswith(kind)]


SLICES = {
    "full": "x[:]",
    "dim1": "x[:, 1:]",
    "step": "x[:, :, ::2]",
    "negative": "x[:, -3:-1]",
    "past_end": "x[1:100]",
    "empty": "x[5:2]",
}


@pytest.mark.parametrize("expr", list(SLICES.values()), ids=list(SLICES))
def test_constant_slices_equal_the_interpreter(expr):
    src = f"""
def f(x: torch.Tensor):
    y = {expr}
    return y * 2, y.shape
"""
    mods = check(src, [torch.randn(4, 5, 6)], [torch.randn(2, 3, 7, 2)])
    assert _label(mods["default"], "aten::slice")[0].split()[2].startswith("x[")


DYNAMIC_SLICES = {
    "start_end": ("x, s: int, e: int", "x[:, s:e]", [3, 1], [1, -1]),
    "negative_dim": ("x, s: int, e: int", "x[..., s:e]", [-4, 100], [2, 1]),
    "step_out_of_range": ("x, s: int, e: int", "x[:, s:e:2]", [-100, 100], [5, 3]),
    "optional": ("x, s: Optional[int], e: Optional[int]", "x[:, s:e]", [None, 2], [1, None]),
}


@pytest.mark.parametrize("params,expr,a,b", list(DYNAMIC_SLICES.values()),
                         ids=list(DYNAMIC_SLICES))
def test_slices_with_input_bounds_equal_the_interpreter(params, expr, a, b):
    # Bounds taken from inputs: negative ones wrap, out-of-range ones clamp, end before
    # start gives an empty slice — as ``aten::slice`` does.
    fn = ts(params, expr)
    mods = check(fn, [torch.randn(4, 5, 6), *a], [torch.randn(2, 3, 7, 2), *b])
    assert _label(mods["default"], "aten::slice")[0].split()[2].startswith("x[")


def test_slice_native_on_negative_dim_matches_aten():
    fn = ts("x, s: int, e: int", "torch.ops.aten.slice(x, -2, s, e, 1)")
    mod = sr.StaticModule(fn)
    (pn,) = [pn for pn in mod.plan.nodes() if pn.kind == "aten::slice"]
    assert pn.impl.label == "x[..., s:e, :]"
    x = torch.randn(3, 4, 5)
    for s_, e_ in [(0, 2), (-3, -1), (-100, 100), (3, 1)]:
        torch.testing.assert_close(pn.fn(x, -2, s_, e_, 1),
                                   torch.ops.aten.slice.Tensor(x, -2, s_, e_, 1))


def test_slice_of_too_low_a_rank_raises_as_the_interpreter_does():
    src = """
def f(x: torch.Tensor):
    return x[:, 1:]
"""
    check(src, [torch.randn(3, 4)], [torch.randn(3)])  # the 1-D input raises in both
    mod = sr.StaticModule(script(src))
    with pytest.raises(Exception, match="dim"):
        mod(torch.tensor(1.0))


def test_slice_result_is_a_view():
    src = """
def f(x: torch.Tensor):
    y = x * 1
    z = y[1:]
    z.add_(1)
    return y
"""
    check(src, [torch.zeros(3, 2)], [torch.zeros(5)])


# --------------------------------------------------------------------------- index


class Pairs(torch.nn.Module):
    """DLRM's interaction: the strictly lower triangle of a batch of square matrices."""

    def __init__(self, n: int = 5, offset: int = -1):
        super().__init__()
        rows, cols = torch.tril_indices(n, n, offset=offset)
        self.register_buffer("rows", rows)
        self.register_buffer("cols", cols)

    def forward(self, x):
        z = torch.bmm(x, x.transpose(1, 2))
        return z[:, self.rows, self.cols] + 1


def test_constant_advanced_indices_use_index_select():
    model = Pairs().eval()
    mods = check(model, [torch.randn(1, 5, 3)], [torch.randn(7, 5, 2)])
    assert "index_select" in _label(mods["default"], "aten::index")[0]
    mod = mods["default"]
    x = torch.randn(2, 5, 3)
    mod(x)  # (a size's first call may specialise its code: a meta run of every node)
    wait_for_builds()  # the profiler sees every thread: nothing built meanwhile
    with torch.profiler.profile() as prof:
        mod(x)
    ops = {e.key for e in prof.key_averages()}
    assert "aten::index_select" in ops and "aten::index" not in ops


def test_index_out_of_range_other_ranks_and_negative_indices():
    model = Pairs().eval()
    # a 4 x 4 matrix: the 5 x 5 triangle's indices run past it: aten::index raises
    check(model, [torch.randn(2, 4, 3)])
    src = """
def f(x: torch.Tensor):
    i = torch.tensor([0, -1, 2])
    j = torch.tensor([-2, 1, 0])
    return x[i, j], x[:, i], x.t()[i, j]
"""
    check(src, [torch.randn(4, 3)], [torch.randn(3, 5)])


# --------------------------------------------------------------------------- linear, rank >= 3


class WideLinear(torch.nn.Module):
    """k = 512: where ``linear.out`` (matmul, then add) and eager ``linear`` (one addmm)
    round differently, so only the folded addmm equals the interpreter bit for bit."""

    def __init__(self, bias: bool, k: int = 512, n: int = 24):
        super().__init__()
        self.lin = torch.nn.Linear(k, n, bias=bias)

    def forward(self, x):
        return self.lin(x) * 2


def _ops_run(mod, *inputs):
    with torch.profiler.profile() as prof:
        mod(*inputs)
    return {e.key for e in prof.key_averages()}


@pytest.mark.parametrize("bias", [True, False])
def test_linear_on_rank_3_and_4_inputs_folds_to_one_matrix_product(bias):
    mods = check(WideLinear(bias), [torch.randn(2, 5, 512)], [torch.randn(3, 2, 4, 512)],
                 rtol=0, atol=0, options={"default": sr.StaticModuleOptions(
                     kernel_choice="default", verify_memory_plans=True, specialize_after=0)})
    mod = mods["default"]
    assert "folded to 2-D" in _label(mod, "aten::linear")[0]
    x = torch.randn(2, 5, 512)
    mod(x)
    ops = _ops_run(mod, x)
    assert ("aten::addmm" if bias else "aten::mm") in ops
    assert "aten::matmul" not in ops and "aten::linear" not in ops


@pytest.mark.parametrize("bias", [True, False])
def test_linear_on_a_non_contiguous_input_takes_linear(bias):
    def t(x):
        return x.transpose(0, 1)

    inputs = [t(torch.randn(5, 2, 512))]
    # Not bit for bit: linear copies a non-contiguous input, and MKL's sgemm picks its kernel
    # by the copy's alignment, so two runs of the same operator may differ in the last bit
    # (seen once in CI: 8e-7). Which operator runs is what this test is about.
    mods = check(WideLinear(bias), inputs, [t(torch.randn(4, 3, 512))])
    mod = mods["default"]
    mod(*inputs)
    assert "aten::linear" in _ops_run(mod, *inputs)


def test_folded_linear_writes_through_the_planned_tensor_only_when_it_fits():
    mod = sr.StaticModule(torch.jit.script(WideLinear(True, k=8, n=3)), UNMEASURED)
    x = torch.randn(2, 4, 8)
    mod(x)
    mod(x)
    node = next(pn for pn in mod.plan.nodes() if pn.kind == "aten::linear")
    weight, bias = (v.node.attrs["value"] for v in node.node.inputs[1:])
    out_fn = node.impl.out_fn
    expected = torch.nn.functional.linear(x, weight, bias)
    # the planned shape, the same tensor twice (its flat view is made once), another tensor
    out = torch.empty(2, 4, 3)
    for o in (out, out, torch.empty(2, 4, 3)):
        assert out_fn(o, x, weight, bias) is o
        torch.testing.assert_close(o, expected, rtol=0, atol=0)
    # a tensor of another size: linear(out=) resizes it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.testing.assert_close(out_fn(torch.empty(5, 3), x, weight, bias), expected)
    # an input of another width: linear's own error
    with pytest.raises(RuntimeError, match="shape|size"):
        out_fn(torch.empty(2, 4, 3), torch.randn(2, 4, 7), weight, bias)


class FoldedBlock(torch.nn.Module):
    """Folded linears and an embedding, each writing into the arena."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16, bias=False)

    def forward(self, ids):
        h = self.emb(ids) * 2
        return self.down(torch.relu(self.up(h))) + h


def test_folded_out_variants_shared_by_runtimes_on_several_threads():
    """The cached views belong to one module's implementations, shared by every runtime:
    runtimes on other threads with other shapes (so other arena tensors) must not see each
    other's."""
    from concurrent.futures import ThreadPoolExecutor

    scripted = torch.jit.script(FoldedBlock().eval())
    mod = sr.StaticModule(scripted, UNMEASURED)
    lines = [ln for ln in mod.describe().splitlines()
             if ln.startswith(("aten::embedding", "aten::linear"))]
    assert len(lines) == 3 and all("[managed]" in ln for ln in lines)
    inputs = [torch.randint(0, 50, (b, s)) for b, s in ((1, 7), (3, 5), (2, 9), (4, 1))]
    expected = [scripted(x) for x in inputs]

    def work(k):
        rt = sr.StaticRuntime(mod)
        for i in range(40):
            j = (k + i) % len(inputs)
            torch.testing.assert_close(rt(inputs[j]), expected[j], rtol=0, atol=0)
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(4)))
