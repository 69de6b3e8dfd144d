"""The arena: planned per input signature, no allocation for managed tensors in steady state,
an LRU of layouts, planning ahead on meta tensors, data-dependent sizes handled safely."""

import warnings

import pytest
import torch
from differential import check, script

import static_runtime as sr
from static_runtime.models import MODELS

CHAIN = """
def f(x: torch.Tensor):
    return torch.tanh(torch.sigmoid(torch.exp(x)))
"""

VERIFY = sr.StaticModuleOptions(verify_memory_plans=True)


def storage_allocations(fn, calls: int = 5) -> int:
    """CPU allocations made by ``calls`` calls of ``fn`` (PyTorch's profiler memory record)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    profile_memory=True) as prof:
            for _ in range(calls):
                fn()
    return sum(1 for e in prof.events() if e.cpu_memory_usage > 0)


def test_steady_state_allocates_only_outputs():
    x = torch.randn(64, 64)
    mod = sr.StaticModule(script(CHAIN), options=VERIFY)
    for _ in range(3):
        mod(x)
    assert storage_allocations(lambda: mod(x)) == 5  # the returned tanh, once per call
    plain = sr.StaticModule(script(CHAIN), options=sr.StaticModuleOptions(optimize_memory=False))
    plain(x)
    assert storage_allocations(lambda: plain(x)) == 15


def test_first_call_records_then_plans():
    mod = sr.StaticModule(script(CHAIN), options=VERIFY)
    with pytest.raises(RuntimeError, match="no memory plan yet"):
        mod.memory_plan()
    mod(torch.randn(8, 8))
    plan = mod.memory_plan()
    assert len(plan) == 2
    # exp and sigmoid are live at once: both need room, so the arena is their sum.
    assert plan.arena_bytes == plan.lower_bound_bytes == 2 * 8 * 8 * 4
    plan.verify()
    assert "arena" in plan.summary() and plan.timeline()


def test_layouts_are_cached_per_signature_in_an_lru():
    # (no shape programs: one made in the background while this runs would lay sizes out
    # again, and the counts would depend on when it was ready)
    mod = sr.StaticModule(script(CHAIN), options=sr.StaticModuleOptions(
        plan_cache_size=2, shape_programs=False))
    rt = mod.runtime()
    for n in (2, 3, 2, 3, 2):
        torch.testing.assert_close(rt(torch.ones(n)), torch.tanh(torch.sigmoid(torch.exp(
            torch.ones(n)))))
    assert (mod.layouts.misses, mod.layouts.hits) == (2, 3)
    rt(torch.ones(4))  # evicts the least recently used (3)
    rt(torch.ones(3))
    assert mod.layouts.misses == 4 and len(mod.layouts) == 2


def test_arena_grows_for_a_bigger_signature_and_is_reused_for_smaller():
    mod = sr.StaticModule(script(CHAIN))
    rt = mod.runtime()
    rt(torch.randn(1000))
    rt(torch.randn(1000))
    big = rt._interp.arena
    rt(torch.randn(10))
    rt(torch.randn(10))
    assert rt._interp.arena is big
    rt(torch.randn(5000))
    rt(torch.randn(5000))
    assert rt._interp.arena.numel() > big.numel()


def test_plan_ahead_from_example_inputs():
    x = torch.randn(4, 16)
    mod = sr.StaticModule(script(CHAIN), example_inputs=(x,))
    assert mod.ahead_of_time_error is None
    assert len(mod.memory_plan()) == 2
    torch.testing.assert_close(mod(x), torch.tanh(torch.sigmoid(torch.exp(x))))
    assert mod.layouts.misses == 1 and mod.layouts.hits == 1  # planned on meta, then used


@pytest.mark.parametrize("name", ["mlp", "dlrm", "multi_head_attention", "resnet_small"])
def test_plan_ahead_matches_first_call_plan(name):
    spec = MODELS[name]
    scripted = torch.jit.script(spec.build())
    inputs = spec.example_inputs(2)
    ahead = sr.StaticModule(scripted, example_inputs=inputs)
    assert ahead.ahead_of_time_error is None
    later = sr.StaticModule(scripted)
    later(*inputs)
    assert ahead.memory_plan().arena_bytes == later.memory_plan().arena_bytes
    check(scripted, inputs, spec.example_inputs(3, seed=1),
          options={"ahead": sr.StaticModuleOptions(verify_memory_plans=True)})


def test_plan_ahead_is_declined_for_data_dependent_graphs():
    src = """
def f(x: torch.Tensor):
    if bool(x.sum() > 0):
        return torch.exp(x) * 2
    return torch.sigmoid(x) * 2
"""
    mod = sr.StaticModule(script(src), example_inputs=(torch.randn(3),))
    assert "meta" in mod.ahead_of_time_error
    x = torch.randn(3)
    torch.testing.assert_close(mod(x), script(src)(x))


def test_plan_ahead_is_declined_for_object_state():
    spec = MODELS["attribute_setter"]
    mod = sr.StaticModule(torch.jit.script(spec.build()), example_inputs=spec.example_inputs(2))
    assert "object state" in mod.ahead_of_time_error


def test_values_sized_by_data_are_not_managed():
    # masked_select's size depends on the data (PyTorch tags it dynamic_output_shape), and so
    # does everything computed from it: the same signature gives other sizes each call.
    src = """
def f(x: torch.Tensor):
    y = torch.exp(x)
    z = torch.masked_select(y, x > 0)
    w = torch.sigmoid(z)
    return torch.tanh(y).sum() + w.sum()
"""
    mod = sr.StaticModule(script(src), options=VERIFY)
    managed = {pn.kind for pn in mod.plan.nodes() if pn.managed}
    assert "aten::exp" in managed
    assert not managed & {"aten::masked_select", "aten::sigmoid"}
    ref = script(src)
    for x in (torch.linspace(-1, 1, 16), torch.ones(16), -torch.ones(16), torch.ones(16)):
        torch.testing.assert_close(mod(x), ref(x))


def test_indexing_with_computed_integer_indices_is_not_sized_by_data():
    """``aten::index`` is tagged dynamic_output_shape for its mask form; with indices the
    graph computes as integers (``arange`` and views of it, as Hugging Face's mask code
    does) the result's shape is the indices', and what follows is managed. A mask keeps
    the taint."""
    src = """
def f(x: torch.Tensor, m: torch.Tensor):
    rows = torch.arange(x.size(0))[:, None]
    cols = torch.arange(x.size(1)) + 0
    y = torch.exp(x[rows, cols])
    z = torch.exp(x[m > 0])
    return torch.sigmoid(y).sum() + torch.sigmoid(z).sum()
"""
    mod = sr.StaticModule(script(src), options=sr.StaticModuleOptions(
        verify_memory_plans=True, specialize_after=0))  # the code specialised at once
    managed = [pn for pn in mod.plan.nodes() if pn.managed]
    kinds = [pn.kind for pn in managed]
    assert kinds.count("aten::exp") == 1 and "aten::sigmoid" in kinds
    ref = script(src)
    for x, m in ((torch.randn(3, 4), torch.randn(3, 4)), (torch.randn(5, 2), torch.randn(5, 2))):
        for _ in range(2):
            torch.testing.assert_close(mod(x, m), ref(x, m))
    code = mod.code.split("    def run(", 1)[1]
    assert ".size(" not in code  # the indexed tensor's shape is a fact of the signature


def test_a_managed_value_that_outgrows_its_plan_is_allocated_instead():
    # The size comes through int(tensor), which has no tag: the runtime finds out when
    # PyTorch refuses to grow the arena tensor, and allocates that value from then on.
    src = """
def f(x: torch.Tensor):
    n = int(x.sum())
    y = torch.exp(torch.arange(n).float())
    return torch.sigmoid(y).sum() + y.sum()
"""
    mod = sr.StaticModule(script(src), options=VERIFY)
    rt = mod.runtime()
    ref = script(src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in (2, 6, 3, 6):
            x = torch.full((4,), float(k))  # same signature, sizes 8, 24, 12, 24
            torch.testing.assert_close(rt(x), ref(x))
    assert rt._interp.unkept  # demoted after the refused resize


def test_unplanned_bytes_are_reported():
    spec = MODELS["multi_head_attention"]
    mod = sr.StaticModule(torch.jit.script(spec.build()))
    mod(*spec.example_inputs(2))
    plan = mod.memory_plan()
    assert plan.unplanned_bytes > 0 and "unplanned" in plan.summary()


@pytest.mark.parametrize("planner", ["best", "greedy_by_size", "storage_groups"])
def test_every_planner_gives_the_same_results(planner):
    spec = MODELS["resnet_small"]
    opts = sr.StaticModuleOptions(memory_planner=planner, verify_memory_plans=True)
    check(torch.jit.script(spec.build()), spec.example_inputs(1), spec.example_inputs(2, seed=1),
          options={planner: opts})


def test_memory_plan_plot(tmp_path):
    import matplotlib.image

    spec = MODELS["resnet_small"]
    mod = sr.StaticModule(torch.jit.script(spec.build()), example_inputs=spec.example_inputs(1))
    path = tmp_path / "arena.png"
    mod.memory_plan().plot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 200 and image.shape[1] > 300


SPARSE_INTERMEDIATE = """
def f(x: torch.Tensor):
    return x.to_sparse().neg().neg().to_dense()
"""


def test_a_sparse_intermediate_is_left_out_of_the_arena():
    # Found by tools/opdb (to_sparse, chained): planning after the recording call read the
    # storage of every intermediate, and a sparse tensor has none — ours raised where
    # TorchScript ran. A sparse value is observed as not fitting: it stays allocating.
    check(SPARSE_INTERMEDIATE, [torch.randn(5, 5)], [torch.randn(2, 3)])


WIDE = """
def f(x: torch.Tensor, w: torch.Tensor):
    a = torch.relu(torch.matmul(x, w))
    b = torch.sigmoid(a) * a
    c = torch.tanh(b) + a
    return (c * b).sum(1)
"""


def test_a_smaller_size_of_a_known_structure_is_laid_out_without_planning(monkeypatch):
    """Sizes of one structure share the regions planned for the largest seen: a size that
    fits in them is laid out at the same offsets with no planner run; a larger one plans
    again on the larger sizes (the arena grows), and every size still gives eager's result
    with every plan verified."""
    from static_runtime.memory import arena

    runs = []
    best = arena.PLANNERS["best"]
    monkeypatch.setitem(arena.PLANNERS, "best", lambda r, a: runs.append(len(r)) or best(r, a))
    mod = sr.StaticModule(script(WIDE), options=VERIFY)
    w = torch.randn(6, 5)

    def call(rows):
        x = torch.randn(rows, 6)
        for _ in range(2):
            torch.testing.assert_close(mod(x, w), torch.mul(
                torch.tanh(torch.sigmoid(x @ w).mul(torch.relu(x @ w))) + torch.relu(x @ w),
                torch.sigmoid(torch.relu(x @ w)) * torch.relu(x @ w)).sum(1))
        return mod.memory_plan().arena_bytes

    largest = call(16)
    assert len(runs) == 1
    assert call(4) == largest and call(9) == largest and len(runs) == 1
    grown = call(40)
    assert len(runs) == 2 and grown > largest
    assert call(12) == grown and call(3) == grown and len(runs) == 2  # (sizes not seen yet)
    w = w.double()  # another structure: planned for its own
    mod(torch.randn(2, 6, dtype=torch.float64), w)
    assert len(runs) == 3


def test_layouts_of_one_structure_share_region_tensors_and_still_cannot_grow_past_them():
    """``materialize`` with a region cache: a second size's tensors at the same offsets are
    views of the first one's regions (the same bytes, no new storage), each with the layout's
    own shape and strides; an operator may resize one within its region, never past it, and
    a region too far into the arena is refused."""
    from static_runtime.memory.arena import TensorSpec, allocate_arena, materialize

    arena = allocate_arena(4096)
    big = [TensorSpec(0, "a", torch.float32, (8, 16), 0, 512, None, 1024),
           TensorSpec(1, "b", torch.float32, (2, 3, 4, 5), 1024, 480,
                      (60, 1, 15, 3), 1024)]
    small = [s._replace(shape=shape, nbytes=nbytes, strides=strides) for s, shape, nbytes,
             strides in ((big[0], (3, 16), 192, None), (big[1], (1, 3, 2, 2), 48, (12, 1, 6, 3)))]
    regions: dict = {}
    first = materialize(big, arena, regions)
    second = materialize(small, arena, regions)
    assert len(regions) == 2
    for spec, t in ((big[0], first[0]), (big[1], first[1]), (small[0], second[0]),
                    (small[1], second[1])):
        assert tuple(t.shape) == spec.shape and t.dtype == spec.dtype
        assert t.stride() == (spec.strides or torch.empty(spec.shape).stride())
    assert second[0].data_ptr() == first[0].data_ptr() != second[1].data_ptr()
    assert second[1].is_contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        torch.add(torch.ones(16, 16), 1, out=second[0].resize_(0))  # 1 KiB: the whole region
        assert torch.equal(first[0], torch.full((8, 16), 2.0))
        with pytest.raises(RuntimeError, match="not resizable"):
            second[0].resize_(17, 16)
    with pytest.raises(ValueError, match="arena too small"):
        materialize([big[0]._replace(offset=4096)], arena, {})


@pytest.mark.parametrize("executor", ["codegen", "interpreter"])
def test_a_refused_write_leaves_the_arena_tensor_as_planned(executor):
    """PyTorch sets an out tensor's new sizes before it finds the storage cannot grow; the
    runtime sets the planned ones back, so a later call of the layout (after another size
    and back, whose install makes the tensor an arena tensor again) never writes past the
    region — which corrupted the heap before. Every tensor a runtime keeps for a layout fits
    its storage, and the answers stay eager's."""
    src = """
def f(x: torch.Tensor, s: torch.Tensor):
    n = int(s.sum())
    y = torch.exp(torch.arange(n).float())
    return torch.sigmoid(y).sum() + y.sum() + x.sum()
"""
    mod = sr.StaticModule(script(src), options=sr.StaticModuleOptions(executor=executor))
    rt = mod.runtime()
    ref = script(src)
    small, big = torch.randn(3), torch.randn(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x, k in ((small, 1), (small, 3), (big, 1), (small, 3), (small, 2), (small, 3)):
            s = torch.full((4,), float(k))  # arange of 4, 12, 4, 12, 8, 12 elements
            torch.testing.assert_close(rt(x, s), ref(x, s))
            for _, tensors in rt._interp._layout_tensors.values():
                for t in tensors.values():
                    assert t.numel() * t.element_size() <= t.untyped_storage().nbytes()
