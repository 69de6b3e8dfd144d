"""Many threads on one module: the runtime pool, sharing rules and the busy check.

The stress tests run 8 threads × 2,000 calls on one shared ``StaticModule`` per model and
check every result against the single-threaded result for the same input (which is itself
checked against TorchScript), under both option sets of ``differential.OPTION_SETS``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from differential import OPTION_SETS, assert_same, check
from switching import run_switching

import static_runtime as sr
from static_runtime.models import MODELS

THREADS = 8
CALLS = 2000


def _scripted(name: str, **kw: Any) -> torch.jit.ScriptModule:
    return torch.jit.script(MODELS[name].factory(**kw).eval()) if kw else \
        torch.jit.script(MODELS[name].build())


def _hammer(call: Callable[..., Any], per_thread: list[list[tuple]],
            expected: dict[int, Any], calls: int = CALLS) -> list[BaseException]:
    """Run ``calls`` calls on each thread, thread ``t`` cycling through ``per_thread[t]``;
    every result is compared with ``expected[id(args)]``. Returns the errors seen."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(per_thread))

    def work(inputs: list[tuple]) -> None:
        try:
            torch.set_num_threads(1)  # this thread's (OpenMP) count: no oversubscription
            start.wait()
            for i in range(calls):
                args = inputs[i % len(inputs)]
                out = call(*args)
                want = expected[id(args)]
                if not torch.equal(out, want):
                    raise AssertionError(f"call {i}: result differs from the single-threaded "
                                         f"one by {(out - want).abs().max().item()}")
        except BaseException as e:  # noqa: BLE001  (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(inputs,)) for inputs in per_thread]
    main_threads = torch.get_num_threads()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.set_num_threads(main_threads)  # the process-wide parts (MKL, new threads' default)
    return errors


def _stress(model: torch.jit.ScriptModule, per_thread: list[list[tuple]],
            options: sr.StaticModuleOptions) -> sr.StaticModule:
    """Single-threaded results first (checked against TorchScript), then the threads."""
    mod = sr.StaticModule(model, options=options)
    reference = sr.StaticModule(model, options=options)
    expected = {}
    # Bit-for-bit comparison: the reference runs with the threads' intra-op thread count
    # (BLAS splits work, and so rounds, by thread count).
    main_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for inputs in per_thread:
            for args in inputs:
                expected[id(args)] = reference(*args)
                assert_same(expected[id(args)], model(*args))
    finally:
        torch.set_num_threads(main_threads)
    errors = _hammer(mod, per_thread, expected)
    assert not errors, f"{len(errors)} threads failed; first: {errors[0]!r}"
    assert 1 <= mod.pool_size <= len(per_thread)
    return mod


def _inputs(name: str, batch: int, n: int = 3) -> list[tuple]:
    return [MODELS[name].example_inputs(batch, seed=s) for s in range(n)]


@pytest.mark.parametrize("opts", OPTION_SETS.values(), ids=OPTION_SETS.keys())
def test_stress_mlp(opts):
    _stress(_scripted("mlp"), [_inputs("mlp", 1, 3) for _ in range(THREADS)], opts)


@pytest.mark.parametrize("opts", OPTION_SETS.values(), ids=OPTION_SETS.keys())
def test_stress_attention(opts):
    model = _scripted("multi_head_attention", hidden=32, heads=4)
    per_thread = [[(torch.randn(1, 4, 32),), (torch.randn(1, 4, 32),)] for _ in range(THREADS)]
    _stress(model, per_thread, opts)


@pytest.mark.parametrize("opts", OPTION_SETS.values(), ids=OPTION_SETS.keys())
def test_stress_control_flow(opts):
    # Both branches of the ``if`` (inputs of either sign) and trip counts 0, 3 and 8.
    per_thread = []
    for t in range(THREADS):
        x = torch.randn(1, 32)
        per_thread.append([(x, 3), (-x.abs() - 0.1, 8), (x.abs() + 0.1, 0)])
    _stress(_scripted("control_flow"), per_thread, opts)


@pytest.mark.parametrize("opts", OPTION_SETS.values(), ids=OPTION_SETS.keys())
def test_stress_different_shapes_per_thread(opts):
    # Each thread its own batch size (and two of them share one), so runtimes are planned
    # for different signatures and a runtime returned by one thread serves another's shape.
    per_thread = [[(torch.randn(t % 5 + 1, 64),), (torch.randn(2 * t + 1, 64),)]
                  for t in range(THREADS)]
    _stress(_scripted("mlp"), per_thread, opts)


def test_pool_bound_is_kept():
    opts = sr.StaticModuleOptions(max_runtimes=2)
    per_thread = [_inputs("mlp", 1, 2) for _ in range(THREADS)]
    model = _scripted("mlp")
    mod = sr.StaticModule(model, options=opts)
    reference = sr.StaticModule(model, options=opts)  # (its kernels: measured, remembered)
    main_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    expected = {id(a): reference(*a) for inputs in per_thread for a in inputs}
    for inputs in per_thread:
        for a in inputs:
            assert_same(expected[id(a)], model(*a))
    torch.set_num_threads(main_threads)
    errors = _hammer(mod, per_thread, expected, calls=300)
    assert not errors, errors[0]
    assert mod.pool_size <= 2


def test_pool_is_lifo_and_reuses_runtimes():
    mod = sr.StaticModule(_scripted("mlp"))
    x = torch.randn(1, 64)
    for _ in range(5):
        mod(x)
    assert mod.pool_size == 1
    # Two runtimes: the one returned last is lent first.
    first = mod._idle.pop()
    mod(x)
    assert mod.pool_size == 2
    second = mod._idle[-1]
    mod._idle.append(first)
    assert mod._idle[-1] is first and second is not first


def test_runtime_returned_when_the_call_raises():
    mod = sr.StaticModule(_scripted("mlp"))
    for _ in range(3):
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
            mod(torch.randn(1, 5))
    with pytest.raises(sr.ArgumentError):
        mod()
    assert mod.pool_size == 1 and len(mod._idle) == 1
    assert_same(mod(torch.ones(1, 64)), _scripted("mlp")(torch.ones(1, 64)))


def test_bounded_pool_waits_for_a_runtime():
    mod = sr.StaticModule(_scripted("mlp"), options=sr.StaticModuleOptions(max_runtimes=1))
    x = torch.randn(1, 64)
    mod(x)
    rt = mod._idle.pop()  # lent out, as to a call in flight
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(mod(x)))
    t.start()
    t.join(timeout=0.3)
    assert t.is_alive() and not got, "the call must wait while the only runtime is lent out"
    mod._idle.append(rt)
    mod._wake_one()
    t.join(timeout=10)
    assert not t.is_alive() and len(got) == 1
    assert mod.pool_size == 1


def test_runtime_used_from_two_threads_is_refused():
    mod = sr.StaticModule(_scripted("mlp"))
    rt = mod.runtime()
    x = torch.randn(1, 64)
    errors: list[BaseException] = []
    with rt.guard():
        assert rt.busy
        t = threading.Thread(target=lambda: _catch(errors, rt, x))
        t.start()
        t.join()
    assert len(errors) == 1 and "already running" in str(errors[0])
    assert not rt.busy
    rt(x)


def _catch(errors: list[BaseException], fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except RuntimeError as e:
        errors.append(e)


def test_racing_threads_on_one_runtime_never_see_garbage():
    """Two threads hammer one runtime with the GIL switching very often: every call either
    gives the right result or is refused, and some calls of each kind happen."""
    model = _scripted("mlp")
    rt = sr.StaticModule(model).runtime()
    xs = [torch.randn(1, 64), torch.randn(1, 64)]
    want = [rt(x) for x in xs]  # (measures its kernels: the threads' calls run them)
    for x, w in zip(xs, want, strict=True):
        assert_same(w, model(x))
    counts = {"ok": 0, "refused": 0}
    lock = threading.Lock()
    problems: list[BaseException] = []

    def work(k: int) -> None:
        for _ in range(1500):
            try:
                out = rt(xs[k])
            except RuntimeError as e:
                if "already running" not in str(e):
                    problems.append(e)
                with lock:
                    counts["refused"] += 1
                continue
            if not torch.equal(out, want[k]):
                problems.append(AssertionError("a wrong result"))
            with lock:
                counts["ok"] += 1

    run_switching(work, [(0,), (1,)])
    assert not problems, problems[0]
    assert counts["ok"] > 0 and counts["refused"] > 0, counts


def test_runtimes_share_the_module_and_not_its_state():
    model = _scripted("mlp")
    mod = sr.StaticModule(model)
    a = sr.StaticRuntime(mod)
    b = a.clone()
    assert a.module is b.module is mod
    assert a._interp.plan is b._interp.plan is mod.plan
    assert a._interp.values is not b._interp.values
    x, y = torch.randn(1, 64), torch.randn(3, 64)
    assert_same(a(x), model(x))
    assert_same(b(y), model(y))
    assert a._interp.arena is not None and b._interp.arena is not None
    assert a._interp.arena.data_ptr() != b._interp.arena.data_ptr()


def test_options_validated():
    with pytest.raises(ValueError, match="max_runtimes"):
        sr.StaticModuleOptions(max_runtimes=-1)
    with pytest.raises(ValueError, match="intra_op_threads"):
        sr.StaticModuleOptions(intra_op_threads=-2)
    with pytest.raises(TypeError, match="intra_op_threads"):
        sr.StaticModuleOptions(intra_op_threads=1.5)


def test_intra_op_threads_set_while_running_and_restored():
    """The thread count the kernels see while a runtime runs is the option's; the calling
    thread's own count comes back afterwards. An operator that reports
    ``torch.get_num_threads()`` observes it from inside the graph."""
    seen = _num_threads_op()

    @torch.jit.script
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.sr_test_threads.num_threads(x) + x

    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    for opts in OPTION_SETS.values():
        opts = sr.StaticModuleOptions(**{**opts.__dict__, "intra_op_threads": want})
        mod = sr.StaticModule(f, options=opts)
        seen.clear()
        out = mod(torch.zeros(1))
        assert seen == [want] and out.item() == want
        assert torch.get_num_threads() == before
    seen.clear()
    check(f, [torch.zeros(2)])  # without the option: torch's setting
    assert set(seen) == {before}


_seen_threads: list[int] = []


def _num_threads_op() -> list[int]:
    if not hasattr(torch.ops.sr_test_threads, "num_threads"):
        lib = torch.library.Library("sr_test_threads", "DEF")
        lib.define("num_threads(Tensor x) -> Tensor")

        def impl(x: torch.Tensor) -> torch.Tensor:
            n = torch.get_num_threads()
            _seen_threads.append(n)
            return torch.full_like(x, n)

        lib.impl("num_threads", impl, "CompositeExplicitAutograd")
        _num_threads_op.lib = lib  # type: ignore[attr-defined]
    return _seen_threads
