"""Shape programs (``runtime/symbolic.py``): a new input size laid out from integer
expressions of the input sizes, without a recording call; what the program cannot cover
records as before; results equal eager on every size."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from torch import Tensor

import static_runtime as sr
from static_runtime.runtime.hot import wait_for_builds
from static_runtime.runtime.symbolic import Unsupported, build_program


def _script(f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.script(f)


def _trace(f, *example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(f, example, check_trace=False)


class Encoder(torch.nn.Module):
    """A text encoder as tracing records one: the length turned into a tensor and read back
    (``prim::NumToTensor`` → ``aten::Int``), a slice of a position buffer by it, attention."""

    def __init__(self, width: int = 16, positions: int = 64):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Embedding(50, width)
        self.pos = torch.nn.Parameter(torch.randn(positions, width, generator=g))
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, ids, mask):
        n = ids.size(1)
        h = self.embed(ids) + self.pos[:n]
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / 4.0 + (1.0 - mask[:, None, :].float()) * -1e4
        h = self.norm(h + self.out(torch.softmax(scores, -1) @ v))
        return torch.nn.functional.gelu(h).mean(1)


def _sentence(n: int, batch: int = 1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 50, (batch, n), generator=g), torch.ones(batch, n, dtype=torch.long)


def _served(mod: sr.StaticModule) -> int:
    return sum(mod._memory.programs.served.values())


@pytest.mark.parametrize("executor", ["codegen", "interpreter"])
def test_new_lengths_are_laid_out_by_the_program_and_equal_eager(executor):
    model = Encoder().eval()
    mod = sr.StaticModule(_trace(model, *_sentence(12)),
                          sr.StaticModuleOptions(executor=executor, verify_memory_plans=True))
    mod(*_sentence(40))  # the largest first: later lengths fit its regions
    wait_for_builds()
    assert mod._memory.programs.failures == {}
    misses, generated = mod.layouts.misses, mod._codes.generated
    for n in (7, 23, 31, 2, 17, 40, 9, 33):
        ids, mask = _sentence(n, seed=n)
        before = (ids.clone(), mask.clone())
        got = mod(ids, mask)
        again = mod(ids, mask)
        with torch.no_grad():
            want = model(ids, mask)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(again, want)
        torch.testing.assert_close((ids, mask), before)
    # every new length was laid out by the program, and the one recorded before it moved to
    # the program's layouts: no recording call, and no code generated on the request path
    # (the program's code was made beside it)
    assert _served(mod) == 8
    assert mod.layouts.misses - misses == 7
    if executor == "codegen":
        assert mod._codes.generated == generated
        assert "shape program's guards" in mod.code
    text = mod.describe()
    assert "shape program for (int64 rank 2, int64 rank 2)" in text
    assert "served 8 sizes without a recording call" in text
    plan = mod.memory_plan()
    assert plan.symbols and "size(1)" in next(iter(plan.symbols.values()))
    assert "sizes symbolic in" in plan.summary()


def test_a_size_outside_the_guards_records_and_gets_a_program_of_its_own():
    """A branch on a size: the program made on one side covers only that side; a size on
    the other side records (correctly), and a second program covers that side."""

    def f(x: Tensor) -> Tensor:
        y = torch.relu(x * 2)
        if x.size(0) > 4:
            z = torch.cat([y, y], 1)
        else:
            z = y + 1
        return torch.sigmoid(z) * 3

    s = _script(f)
    mod = sr.StaticModule(s, sr.StaticModuleOptions(verify_memory_plans=True))
    mod(torch.randn(3, 5))
    wait_for_builds()
    programs = mod._memory.programs
    structure = next(iter(programs._items))
    assert len(programs.get(structure)) == 1
    for n in (2, 4, 1):  # inside the first program's guards (n <= 4)
        x = torch.randn(n, 5)
        torch.testing.assert_close(mod(x), s(x))
    assert _served(mod) == 2  # n == 1 is outside: the program was made from n = 3, not 1
    x = torch.randn(9, 5)  # outside: records
    torch.testing.assert_close(mod(x), s(x))
    wait_for_builds()
    assert len(programs.get(structure)) >= 2
    served = _served(mod)
    for n in (6, 12, 5):
        x = torch.randn(n, 5)
        torch.testing.assert_close(mod(x), s(x))
        torch.testing.assert_close(mod(x), s(x))
    assert _served(mod) == served + 3


def test_memory_stays_bounded_over_thousands_of_sizes():
    def f(x: Tensor) -> Tensor:
        y = torch.relu(x @ x.t())
        return (y + 1).sum(0)

    s = _script(f)
    mod = sr.StaticModule(s, sr.StaticModuleOptions(plan_cache_size=16))
    g = torch.Generator().manual_seed(0)
    sizes = torch.randint(1, 600, (2000,), generator=g).tolist()
    for n in sizes:
        x = torch.randn(n, 3, generator=g)
        torch.testing.assert_close(mod(x), s(x))
        if n == sizes[0]:
            wait_for_builds()
    assert len(mod.layouts) <= 16
    largest = max(sizes)
    alone = sr.StaticModule(s)
    alone(torch.randn(largest, 3))
    assert mod.memory_plan().arena_bytes <= 1.05 * alone.memory_plan().lower_bound_bytes
    assert _served(mod) > 1000


def _relu_gram(x: Tensor) -> Tensor:
    return (torch.relu(x @ x.t()) + 1).sum(0)


def _relu_gram_strided(x: Tensor) -> Tensor:
    y = torch.relu(x @ x.t())
    if y.is_contiguous():  # a stride query: its program folds nothing (no spec)
        y = y + 1
    return y.sum(0)


@pytest.mark.parametrize("f", [_relu_gram, _relu_gram_strided])
def test_a_full_layout_cache_admits_a_size_once_it_comes_more_often(f):
    """While there is room a size is laid out on its first call; once the cache is full, a
    size the cache does not admit (it has not come more often than the layout it would
    evict, by two or more) runs the program's allocating code and evicts nothing; once it
    has, it is laid out (evicting the least recently used). Every result eager's. (A
    program that folds nothing once made its builder fail: no code ahead for its layouts.)"""
    s = _script(f)
    mod = sr.StaticModule(s, sr.StaticModuleOptions(plan_cache_size=4))
    rt = mod.runtime()
    g = torch.Generator().manual_seed(0)

    def call(n):
        x = torch.randn(n, 3, generator=g)
        torch.testing.assert_close(rt(x), s(x))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a builder's failure is a warning)
        call(9)
        wait_for_builds()
    for n in (3, 5, 7):
        before = len(mod.layouts)
        call(n)
        assert len(mod.layouts) == before + 1  # (room: laid out at once)
    assert len(mod.layouts) == 4
    kept = list(mod.layouts._items)
    victim = mod.layouts._counts[kept[0]]
    for k in range(victim + 1):  # as often as the least recently used, and once more
        call(6)
        assert list(mod.layouts._items) == kept  # nothing admitted, nothing evicted
        assert mod.layouts.refused == k + 1
    assert _served(mod) == 4  # (3, 5, 7 laid out, 6 run by the program's allocating code)
    call(6)
    assert list(mod.layouts._items)[:3] == kept[1:]  # the least recently used went
    assert len(mod.layouts) == 4 and kept[0] not in mod.layouts._items
    assert _served(mod) == 4  # (one size, counted once)
    call(6)


def test_what_a_program_cannot_follow_records_as_before_and_says_why():
    def data_dependent(x: Tensor) -> Tensor:
        n = int(x[0])
        return torch.ones(n) + torch.ones(n) * x[1]

    def looped(x: Tensor) -> Tensor:
        y = torch.relu(x * 2)
        for _ in range(x.size(0)):
            y = torch.cat([y, x])
        return torch.sigmoid(y) + 1

    for f, reason in ((data_dependent, "read from a tensor's data"), (looped, "trip count is a size")):
        s = _script(f)
        mod = sr.StaticModule(s)
        x = torch.tensor([4.0, 3.0])
        torch.testing.assert_close(mod(x), s(x))
        wait_for_builds()
        assert reason in mod.describe()
        for y in (torch.tensor([6.0, 5.0, 1.0]), torch.tensor([2.0, 1.0])):
            torch.testing.assert_close(mod(y), s(y))
            torch.testing.assert_close(mod(y), s(y))
        assert _served(mod) == 0
        wait_for_builds()
        for n in range(3, 40):  # sizes that record while programs are (re)tried
            mod(torch.tensor([1.0] * n))
        wait_for_builds()
        mod(torch.tensor([1.0] * 41))  # none is coming: what waited for one is forgotten
        assert len(mod._memory.unprogrammed) == 0


def test_build_program_refuses_a_users_operator():
    @torch.library.custom_op("sr_symbolic::twice", mutates_args=())
    def twice(x: Tensor) -> Tensor:
        return x * 2

    @twice.register_fake
    def _(x):
        return torch.empty_like(x)

    def f(x):
        return torch.ops.sr_symbolic.twice(x) + 1

    mod = sr.StaticModule(_trace(f, torch.randn(3)))
    with pytest.raises(Unsupported, match="user's operator"):
        build_program(mod.plan, [torch.randn(3)])


def test_a_wrong_program_is_retired_and_the_call_is_still_right():
    """The first call from a program's layout compares the arena tensors' shapes with the
    program's: a program that got them wrong is retired with a warning, and no answer is
    wrong meanwhile (an out variant resizes what is too small or the runtime allocates)."""

    def f(x: Tensor) -> Tensor:
        return torch.cat([x, x]).relu() + 1

    s = _script(f)
    mod = sr.StaticModule(s)
    mod(torch.randn(8, 3))
    wait_for_builds()
    programs = mod._memory.programs
    structure = next(iter(programs._items))
    good = programs.get(structure)[0]

    def wrong(inputs):
        got = good.evaluate(inputs)
        return None if got is None else tuple(((1,) + shape[1:], st) for shape, st in got)

    programs._items[structure] = [type(good)(good.source, wrong, good.slots, good.dtypes,
                                             good.symbols, good.shapes, good.guards)]
    x = torch.randn(5, 3)
    with pytest.warns(RuntimeWarning, match="shape program was retired"):
        torch.testing.assert_close(mod(x), s(x))
    assert programs.get(structure) == []
    for n in (5, 6, 5):
        x = torch.randn(n, 3)
        torch.testing.assert_close(mod(x), s(x))


def test_a_torch_export_program_with_a_dim_gets_a_shape_program():
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    batch = torch.export.Dim("batch", min=1, max=256)
    ep = torch.export.export(model.eval(), (torch.randn(4, 6),),
                             dynamic_shapes=({0: batch},))
    mod = sr.StaticModule(ep)
    mod(torch.randn(4, 6))
    wait_for_builds()
    for n in (3, 17, 2, 100):
        x = torch.randn(n, 6)
        with torch.no_grad():
            torch.testing.assert_close(mod(x), model(x))
    assert _served(mod) == 4


def test_programs_off():
    mod = sr.StaticModule(_trace(Encoder().eval(), *_sentence(12)),
                          sr.StaticModuleOptions(shape_programs=False))
    mod(*_sentence(20))
    wait_for_builds()
    mod(*_sentence(10))
    assert mod._memory.programs is None
    assert "shape program" not in mod.describe()


def test_a_batch_of_one_first_still_gets_the_other_batches_a_program():
    """A program made from a batch of 1 covers a batch of 1 only (a broadcast decides on
    it); one more is made from the same sizes with the dimensions of 1 made 2, and serves
    the other batches and lengths. The code the second program's layouts run is made beside
    it too, not on the request path."""
    model = Encoder().eval()
    mod = sr.StaticModule(_trace(model, *_sentence(12)))
    mod(*_sentence(12))
    wait_for_builds()
    assert sum(len(p) for p in mod._memory.programs._items.values()) == 2
    generated = mod._codes.generated
    for batch, n in ((3, 20), (2, 7), (5, 30), (1, 9)):
        ids, mask = _sentence(n, batch, seed=n)
        with torch.no_grad():
            torch.testing.assert_close(mod(ids, mask), model(ids, mask))
    assert _served(mod) == 4
    assert mod._codes.generated == generated


class _Bags(torch.nn.Module):
    """``EmbeddingBag`` over a 2-D batch (offsets the batch size decides), as a recommender's
    sparse features are."""

    def __init__(self):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(50, 4, mode="sum")
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, idx):
        return torch.relu(self.lin(self.bag(idx))) * 2


def _bags(batch: int, seed: int = 0) -> Tensor:
    return torch.randint(0, 50, (batch, 5), generator=torch.Generator().manual_seed(seed))


def test_tensors_the_signature_decides_are_made_once_per_size():
    """``arange(0, n * k, k)`` offsets of a 2-D ``EmbeddingBag`` input depend on its sizes
    only: the shape program's code makes them on a size's first call and keeps them; each
    size gets its own, and results equal eager's on every size, in any order."""
    model = _Bags().eval()
    s = _script(model)
    mod = sr.StaticModule(s, sr.StaticModuleOptions(specialize_after=1000))
    mod(torch.randint(0, 50, (40, 5)))
    wait_for_builds()
    sizes = [(3, 5), (7, 5), (3, 5), (7, 2), (12, 5), (7, 5), (3, 5)]
    g = torch.Generator().manual_seed(0)
    for rows, cols in sizes:
        idx = torch.randint(0, 50, (rows, cols), generator=g)
        with torch.no_grad():
            torch.testing.assert_close(mod(idx), model(idx))
    assert "_memo" in mod.code and "made on a binding's first call" in mod.code


def test_sizes_recorded_before_the_program_was_ready_move_to_its_layouts(monkeypatch):
    """The first program of a process takes a second or so; the sizes that came meanwhile
    recorded layouts of their own, which ran the plain generic code. Once the program is
    ready, each such size is laid out again by it on its next call (once), and then runs the
    code made for the program's layouts; results equal eager throughout."""
    import threading

    from static_runtime.ops.kernels import STEPS
    from static_runtime.runtime import symbolic

    release = threading.Event()
    build = symbolic.build_program

    def held_back(*args, **kwargs):
        STEPS.release()  # waiting between steps, as a build's pause does: the requests'
        try:  # kernel measurements go on meanwhile
            assert release.wait(30)
        finally:
            STEPS.acquire()
        return build(*args, **kwargs)

    monkeypatch.setattr(symbolic, "build_program", held_back)
    model = Encoder().eval()
    mod = sr.StaticModule(_trace(model, *_sentence(12)))
    lengths = (30, 12, 21, 7)

    def run_all():
        for n in lengths:
            ids, mask = _sentence(n, seed=n)
            with torch.no_grad():
                torch.testing.assert_close(mod(ids, mask), model(ids, mask))

    run_all()
    assert _served(mod) == 0 and mod._memory.unprogrammed  # all recorded: no program yet
    release.set()
    wait_for_builds()
    generated = mod._codes.generated
    run_all()
    assert _served(mod) == len(lengths)  # each recorded size moved to the program's layouts
    assert not mod._memory.unprogrammed
    run_all()
    assert _served(mod) == len(lengths)  # once each
    assert mod._codes.generated == generated


class _Counts(torch.nn.Module):
    """State that changes every call although the sizes do not: a count read back, and a
    branch on it."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = torch.tanh(torch.sigmoid(x))
        if self.calls > 3:
            y = y + x.size(0)
        return torch.exp(y), self.calls


def test_what_object_state_gives_is_never_folded_or_kept():
    """The program's run sees one value of a module's attribute; the code its layouts run
    must read it on every call (not fold the count, not decide the branch on it, not keep
    it per layout), on the sizes it laid out and on the size recorded before it."""
    model = _Counts()
    mod = sr.StaticModule(_script(_Counts()))
    sizes = [4, 6, 4, 9, 6, 4, 9, 4]
    for k, n in enumerate(sizes):
        x = torch.randn(n)
        got, want = mod(x), model(x)
        torch.testing.assert_close(got, want)
        if k == 0:
            wait_for_builds()
    assert _served(mod) >= 3  # (the program's layouts ran)


def test_views_of_arena_tensors_are_kept_per_layout_and_retaken_when_a_write_is_refused():
    """The code of a program's layouts keeps ``view``/``transpose`` of an arena tensor (by
    sizes the signature decides) once per layout; when the arena write is refused (here: a
    wrong program sized the value too small), that call's views are taken of the value
    allocated instead, so the answer stays right."""

    def f(x: Tensor) -> Tensor:
        y = torch.sigmoid(x)
        z = y.view(x.size(0), 2, 3).transpose(1, 2)
        return z.sum(1) * 2

    s = _script(f)
    mod = sr.StaticModule(s, sr.StaticModuleOptions(specialize_after=1000))
    mod(torch.randn(8, 6))
    wait_for_builds()
    for n in (3, 5, 3, 8):
        x = torch.randn(n, 6)
        torch.testing.assert_close(mod(x), s(x))
        torch.testing.assert_close(mod(x), s(x))
    assert "_memo" in mod.code
    programs = mod._memory.programs
    structure = next(iter(programs._items))
    good = programs.get(structure)[0]
    assert good.spec is not None and len(good.spec.memo_views) == 2

    def wrong(inputs):
        got = good.evaluate(inputs)
        return None if got is None else tuple(((1,) + shape[1:], st) for shape, st in got)

    programs._items[structure] = [dataclasses.replace(good, evaluate=wrong)]
    x = torch.randn(20, 6)  # larger than any region: the too-small layout's writes are refused
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (PyTorch's: an out tensor resized)
        torch.testing.assert_close(mod(x), s(x))
    code = mod.code
    write, reset = code.index("_o_sigmoid("), code.index("_memo[1] = None", code.index("_o_sigmoid("))
    assert write < reset < code.index("_f_view(")  # the views are retaken after a refusal
    for n in (20, 4, 20):
        x = torch.randn(n, 6)
        torch.testing.assert_close(mod(x), s(x))


def test_sizes_recorded_while_the_wider_program_was_made_move_to_it():
    """A batch of one first: its program covers a batch of one only, and the program for the
    other batches comes after it. The batches recorded meanwhile are laid out again by that
    one once it is ready (each on its next call), not left on the plain generic code because
    the first program did not cover them."""
    import threading


    model = _Bags().eval()
    mod = sr.StaticModule(_script(model))
    mod(_bags(1))
    wait_for_builds()  # the batch-of-one program, and the wider one made beside it
    programs = mod._memory.programs
    structure = next(iter(programs._items))
    assert len(programs.get(structure)) == 2
    wide = programs._items[structure].pop()  # as if the wider one were still being made
    release = threading.Event()
    with programs._lock:
        programs._pending.add(structure)

    def settle():
        release.wait(30)
        programs.add(structure, wide)
        with programs._lock:
            programs._pending.discard(structure)

    batches = (3, 7, 4, 9)

    def run_all():
        for b in batches:
            x = _bags(b, seed=b)
            with torch.no_grad():
                torch.testing.assert_close(mod(x), model(x))

    run_all()
    run_all()  # (a second call of each: still waiting for the wider program)
    assert _served(mod) == 0 and mod._memory.unprogrammed
    worker = threading.Thread(target=settle)
    worker.start()
    release.set()
    worker.join()
    run_all()
    assert _served(mod) == len(batches)
    assert {key[0][1][0] for key in mod._memory.unprogrammed} == {1}  # (not called since)


def test_a_program_signature_gets_its_own_code_only_after_many_calls(monkeypatch):
    """The code of a program's layouts keeps what a size decides; code of a size's own pays
    for its build (tens of milliseconds of the request thread) only after thousands of
    calls of that size, so a size the program laid out is not specialised after
    ``specialize_after`` calls, as a recorded one is, but after ``PROGRAM_CALLS``."""
    from static_runtime.runtime.codegen import cache

    monkeypatch.setattr(cache, "PROGRAM_CALLS", 30)
    model = _Bags().eval()
    mod = sr.StaticModule(_script(model), sr.StaticModuleOptions(specialize_after=2))
    mod(_bags(6))
    wait_for_builds()
    generated = mod._codes.generated  # (the program's code, made ahead)
    x = _bags(11, seed=1)
    for _ in range(3):
        mod(x)
    assert _served(mod) == 1
    for _ in range(20):
        mod(x)
    wait_for_builds()
    assert mod._codes.generated == generated  # hot, but not yet 30 calls
    for _ in range(12):
        mod(x)
    wait_for_builds()
    mod(x)
    assert mod._codes.generated == generated + 1
    assert "Specialised on its input signature" in mod.code
    with torch.no_grad():
        torch.testing.assert_close(mod(x), model(x))


def test_a_reshape_is_kept_per_layout_only_where_it_made_a_view():
    """``reshape`` (like ``contiguous`` or ``to``) gives a view of its argument when the
    strides allow and a copy when they do not. The code of a program's layouts keeps the
    result per layout only if the layout's first call made a view of the arena tensor;
    a copy is made on every call, so it holds each call's data."""

    def f(x: Tensor) -> tuple[Tensor, Tensor]:
        y = torch.sigmoid(x)
        a = y.reshape(x.size(0) * 2, 3)  # a view: kept
        b = y.t().reshape(-1)  # a copy: made each call
        return a.sum(0) * 2, b * 3

    s = _script(f)
    mod = sr.StaticModule(s, sr.StaticModuleOptions(specialize_after=1000))
    mod(torch.randn(8, 6))
    wait_for_builds()
    g = torch.Generator().manual_seed(0)
    for n in (3, 5, 3, 5, 8, 3):
        for _ in range(2):  # same size, new data
            x = torch.randn(n, 6, generator=g)
            before = x.clone()
            for got, want in zip(mod(x), s(x)):
                torch.testing.assert_close(got, want)
            torch.testing.assert_close(x, before)
    assert _served(mod) >= 2
    assert "_shares(" in mod.code


class _ConvNet(torch.nn.Module):
    """Convolutions the runtime fuses (``static_runtime::conv2d_pointwise``: kernels that
    write channels-last), a residual add, global pooling."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.body = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        h = torch.relu(self.body(h)) + h
        return self.head(torch.nn.functional.adaptive_avg_pool2d(h, 1).flatten(1))


def test_a_conv_net_gets_a_program_with_the_strides_its_kernels_write():
    """A run on fake tensors calls our own operators' meaning, which writes channels-last as
    their kernels do: the program's strides are the real ones, its out variants' checks
    hold, and new image sizes are laid out by it; results equal eager on every size."""
    model = _ConvNet().eval()
    mod = sr.StaticModule(_script(model))
    g = torch.Generator().manual_seed(0)
    mod(torch.randn(2, 3, 16, 16, generator=g))
    wait_for_builds()
    assert not mod._memory.programs.failures
    for batch, side in ((2, 24), (3, 16), (2, 12), (3, 20), (2, 24)):
        x = torch.randn(batch, 3, side, side, generator=g)
        with torch.no_grad():
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)
    assert _served(mod) == 4


class _Rotary(torch.nn.Module):
    """Rotary-style position mixing on heads seen through a transpose: the products take
    the transposed (dense, not row-major) layout of their first argument, which the arena
    never holds."""

    def __init__(self, heads: int = 2, dim: int = 4, positions: int = 32):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.heads, self.dim = heads, dim
        self.proj = torch.nn.Linear(heads * dim, heads * dim)
        self.cos = torch.nn.Parameter(torch.randn(positions, dim, generator=g))
        self.sin = torch.nn.Parameter(torch.randn(positions, dim, generator=g))

    def forward(self, x):
        b, n, _ = x.shape
        q = self.proj(x).view(b, n, self.heads, self.dim).transpose(1, 2)
        rotated = torch.cat((-q[..., 2:], q[..., :2]), -1)
        q = q * self.cos[:n] + rotated * self.sin[:n]
        return torch.relu(q.transpose(1, 2).reshape(b, n, -1)).sum(-1)


def test_values_the_arena_never_holds_need_no_checked_out_variant():
    """A product whose result is dense but not row-major is allocated (the arena holds only
    row-major and channels-last values), so its out variant never runs and never needs its
    check: the program is made, and lays out new lengths; results equal eager."""
    model = _Rotary().eval()
    mod = sr.StaticModule(_script(model))
    g = torch.Generator().manual_seed(0)
    mod(torch.randn(2, 10, 8, generator=g))
    wait_for_builds()
    assert not mod._memory.programs.failures
    for b, n in ((2, 7), (3, 12), (2, 10), (3, 5)):
        x = torch.randn(b, n, 8, generator=g)
        before = x.clone()
        with torch.no_grad():
            torch.testing.assert_close(mod(x), model(x))
        torch.testing.assert_close(x, before)
    assert _served(mod) >= 3


def _doubled(x: Tensor) -> Tensor:
    sizes: list[int] = []
    for i in range(x.dim()):  # a loop over the dimensions, as a scripted interpolate has
        sizes.append(x.size(i) * 2)
    y = torch.sigmoid(x).repeat(2, 2)
    return torch.tanh(y.view(sizes)) * 3


def test_a_loop_over_the_dimensions_is_followed():
    """A loop whose trip count the structure decides (one iteration per dimension) is
    followed by the run on fake tensors: a program is made, with the sizes still symbols,
    and lays out new sizes; results equal eager."""
    s = _script(_doubled)
    mod = sr.StaticModule(s)
    g = torch.Generator().manual_seed(0)
    mod(torch.randn(4, 6, generator=g))
    wait_for_builds()
    programs = mod._memory.programs
    assert not programs.failures
    assert "sizes in no symbol" not in "\n".join(programs.describe())
    # (3, 5) again: its second call lays it out, so the recorded (4, 6) is switched to after
    for shape in ((3, 5), (7, 2), (3, 5), (4, 6), (5, 5)):
        x = torch.randn(*shape, generator=g)
        torch.testing.assert_close(mod(x), s(x))
    assert _served(mod) == 4  # (the recorded size too, laid out again by the program)


class _Windows(torch.nn.Module):
    """A length padded to a whole number of windows, as a traced Swin computes it: the
    length turned into a tensor, ``(w - n % w) % w`` on it, read back."""

    def forward(self, x):
        n = x.size(1)
        pad = (4 - n % 4) % 4
        y = torch.sigmoid(x)
        return torch.cat([y, y[:, :pad] * 0], 1).reshape(x.size(0), -1, 4).sum(1)


def test_remainder_and_reversed_subtraction_of_a_size_are_followed():
    model = _Windows()
    g = torch.Generator().manual_seed(0)
    mod = sr.StaticModule(_trace(model, torch.randn(2, 10, generator=g)))
    assert "aten::remainder" in str(mod.graph) and "aten::rsub" in str(mod.graph)
    mod(torch.randn(2, 10, generator=g))
    wait_for_builds()
    assert not mod._memory.programs.failures
    for b, n in ((2, 6), (3, 13), (2, 10), (3, 9)):  # (paddings of 2 and 3: a padding of
        x = torch.randn(b, n, generator=g)  # 0 or 1 is outside the guards, as a size of 1 is)
        torch.testing.assert_close(mod(x), model(x))
    assert _served(mod) >= 3


def test_what_a_build_imports_is_imported_while_preparing():
    """A program's build imports ``torch._dynamo`` lazily; on the builder thread, while the
    request thread's first use of PyTorch imported it too, one of them failed ("deadlock
    detected", "partially initialized module 'torch._dynamo'": an ahead-of-time plan of the
    next module failed). Preparing a module with shape programs imports it first, on the
    preparing thread, in a fresh process."""
    import subprocess
    import sys

    code = (
        "import sys, torch, static_runtime as sr\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "g = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU()))\n"
        "mod = sr.StaticModule(g)\n"
        "assert 'torch._dynamo.source' in sys.modules\n"
        "off = sr.StaticModule(g, sr.StaticModuleOptions(shape_programs=False))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_build_pytorch_refuses_prints_nothing_and_parses_no_source():
    """A program's fake run that PyTorch refuses (a padding of a size: ``constant_pad_nd`` has
    no symbolic meta) was logged by PyTorch with a traceback on the builder thread: an error
    on the user's stderr, and formatting the traceback parses source, which on CPython 3.11
    broke a ``torch.jit.script`` running at the same moment on the request thread
    ("SystemError: AST constructor recursion depth mismatch"). The refusal is ours to
    report, and PyTorch's log of it is dropped on builder threads."""
    import subprocess
    import sys

    code = (
        "import torch, torch.nn.functional as F, static_runtime as sr\n"
        "from static_runtime.runtime.hot import wait_for_builds\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return F.pad(x, (0, 0, 0, (4 - x.shape[2] % 4) % 4)) * 2\n"
        "mod = sr.StaticModule(torch.jit.trace(M(), torch.randn(1, 5, 5, 3)))\n"
        "for n in (5, 6, 7):\n"
        "    for _ in range(3):\n"
        "        x = torch.randn(1, n, n, 3)\n"
        "        assert torch.equal(mod(x), M()(x))\n"
        "wait_for_builds()\n"
        "print(mod.describe())\n"
    )
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], check=False,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no shape program for" in done.stdout  # the refusal: reported by us, once
    assert "Traceback" not in done.stderr and "failed while attempting" not in done.stderr, \
        done.stderr[-2000:]


class _Ones(torch.nn.Module):
    """A tensor made with an explicit ``layout``: ``torch.export`` keeps ``torch.strided`` as
    a constant of its own type (TorchScript spells an int)."""

    def forward(self, x):
        pos = torch.ones(x.shape[1], dtype=torch.float32, layout=torch.strided,
                         device=x.device)
        return torch.relu(x + pos) * 2


def test_a_layout_constant_is_not_object_state():
    """A ``torch.layout`` constant changes no more than a dtype does: what is computed from
    it and the sizes (``ones(n)``) is kept per layout by the program's code, not made on
    every call as what an object's state gives is."""
    model = _Ones()
    ep = torch.export.export(model, (torch.randn(2, 5),),
                             dynamic_shapes=({1: torch.export.Dim("s", min=2, max=64)},))
    mod = sr.StaticModule(ep)
    mod(torch.randn(2, 7))
    wait_for_builds()
    programs = [p for ps in mod._memory.programs._items.values() for p in ps]
    assert programs and "aten::ones" in {n.kind for n in programs[0].spec.memo}
    for n in (9, 11, 7, 9):
        x = torch.randn(2, n)
        torch.testing.assert_close(mod(x), model(x))
