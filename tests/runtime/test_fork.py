"""``prim::fork`` / ``aten::wait`` and ``run_async``, differential against TorchScript."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from differential import OPTION_SETS, assert_same, check

import static_runtime as sr
from static_runtime.models import MODELS

Future = torch.jit.Future


def scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x + y) * 2


def elementwise_fork(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    fut = torch.jit.fork(scale_add, x, y)
    z = torch.tanh(x)  # runs while the fork may be running
    return torch.jit.wait(fut) + z


def loop_body(x: torch.Tensor, n: int) -> torch.Tensor:
    for i in range(n):
        x = torch.sigmoid(x) + i
    return x


def loop_fork(x: torch.Tensor, n: int) -> torch.Tensor:
    fut = torch.jit.fork(loop_body, x, n)
    return torch.jit.wait(fut) * 2


def shifted(x: torch.Tensor, i: int) -> torch.Tensor:
    return torch.matmul(x, x.t()) + i


def ten_forks(x: torch.Tensor) -> torch.Tensor:
    futs = torch.jit.annotate(list[Future[torch.Tensor]], [])
    for i in range(10):
        futs.append(torch.jit.fork(shifted, x, i))
    results = [torch.jit.wait(f) for f in futs]
    return torch.stack(results)


def leaf(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(-x)


def middle(x: torch.Tensor) -> torch.Tensor:
    a = torch.jit.fork(leaf, x)
    b = torch.jit.fork(leaf, x + 1)
    return torch.jit.wait(a) + torch.jit.wait(b)


def forks_of_forks(x: torch.Tensor) -> torch.Tensor:
    futs = torch.jit.annotate(list[Future[torch.Tensor]], [])
    for _ in range(4):
        futs.append(torch.jit.fork(middle, x))
    return torch.stack([torch.jit.wait(f) for f in futs]).sum(0)


def bad_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.add(x, y)


def failing_fork(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    fut = torch.jit.fork(bad_add, x, y)
    return torch.jit.wait(fut)


def tuple_fork(x: torch.Tensor) -> torch.Tensor:
    fut = torch.jit.fork(torch.max, x, 1)
    values, indices = torch.jit.wait(fut)
    return values + indices


class ForkingModule(torch.nn.Module):
    """A frozen module whose forward forks work on its weights (constants after freezing)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fut = torch.jit.fork(torch.nn.functional.linear, x, self.a.weight, self.a.bias)
        y = self.b(x)
        return torch.jit.wait(fut) * y


CASES = [
    ("elementwise", elementwise_fork, [torch.randn(3, 4), torch.randn(3, 4)],
     [torch.randn(5, 2), torch.randn(5, 2)]),
    ("loop", loop_fork, [torch.randn(4), 5], [torch.randn(2, 3), 0]),
    ("ten_forks_stacked", ten_forks, [torch.randn(3, 5)], [torch.randn(2, 2)]),
    ("forks_of_forks", forks_of_forks, [torch.randn(6)], [torch.randn(2, 3)]),
    ("tuple_result", tuple_fork, [torch.randn(3, 4)], [torch.randn(2, 6)]),
]


@pytest.mark.parametrize("name,fn,inputs,second", CASES, ids=[c[0] for c in CASES])
def test_fork_matches_torchscript(name, fn, inputs, second):
    modules = check(fn, inputs, second)
    for mod in modules.values():
        assert any(n.kind == "prim::fork" for n in mod.graph.walk())


class ForkingSubmodule(torch.nn.Module):
    """Forks a submodule call: freezing folds the submodule into the fork's subgraph."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fut = torch.jit.fork(self.a, x)
        return torch.jit.wait(fut) * self.b(x)


@pytest.mark.parametrize("cls", [ForkingModule, ForkingSubmodule])
def test_forking_module_matches_torchscript(cls):
    check(cls().eval(), [torch.randn(2, 8)], [torch.randn(5, 8)])


@pytest.mark.parametrize("opts", OPTION_SETS.values(), ids=OPTION_SETS.keys())
def test_error_in_fork_reaches_wait_with_its_message(opts):
    mod = sr.StaticModule(torch.jit.script(failing_fork), options=opts)
    x, y = torch.randn(2), torch.randn(3)
    with pytest.raises(RuntimeError) as theirs:
        torch.jit.script(failing_fork)(x, y)
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(2\) must match the size "
                                           r"of tensor b \(3\)") as ours:
        mod(x, y)
    assert "must match the size of tensor b" in str(theirs.value)
    notes = "\n".join(getattr(ours.value, "__notes__", ()))
    assert "aten::wait" in notes or "add" in notes
    # The runtime (and the pool) are fine afterwards.
    assert_same(mod(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        mod.run_async((x, y)).wait()


def test_values_passed_into_a_fork_are_not_in_the_arena():
    def f(x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(x + 1)  # an out-variant intermediate handed to the fork
        fut = torch.jit.fork(scale_add, a, a)
        b = torch.sigmoid(x * 2)  # an ordinary intermediate: managed
        return torch.jit.wait(fut) + b.sum()

    mod = check(f, [torch.randn(4, 4)], [torch.randn(2, 3)])["default"]
    managed = {lt.value for lt in mod.lifetimes.managed}
    fork = next(n for n in mod.graph.walk() if n.kind == "prim::fork")
    assert not managed & set(fork.inputs)
    assert not managed & {v for n in fork.blocks[0].walk() for v in n.outputs}
    assert managed, "the other intermediates are still managed"


@pytest.mark.parametrize("opts", OPTION_SETS.values(), ids=OPTION_SETS.keys())
def test_run_async(opts):
    spec = MODELS["mlp"]
    model = torch.jit.script(spec.build())
    mod = sr.StaticModule(model, options=opts)
    xs = [spec.example_inputs(b, seed=b)[0] for b in (1, 3, 1)]
    futures = [mod.run_async((x,)) for x in xs]
    assert all(isinstance(f, torch.futures.Future) for f in futures)
    for f, x in zip(futures, xs):
        assert_same(f.wait(), model(x))
        assert_same(f.value(), model(x))
    assert_same(mod.runAsync([xs[0]], {}).wait(), model(xs[0]))
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        mod.run_async((torch.randn(1, 3),)).wait()
    with pytest.raises(sr.ArgumentError):
        mod.run_async((), {"y": 1}).wait()


def test_run_async_with_a_custom_launcher_that_also_runs_the_forks():
    launched: list[str] = []
    pool = ThreadPoolExecutor(max_workers=1)

    def launcher(fn):
        launched.append(threading.current_thread().name)
        pool.submit(fn)

    try:
        scripted = torch.jit.script(ten_forks)
        mod = sr.StaticModule(scripted)
        x = torch.randn(3, 5)
        fut = mod.run_async((x,), launcher=launcher)
        assert_same(fut.wait(), scripted(x))
        # One launch for the run, ten for the forks (made on the pool's thread).
        assert len(launched) == 11
        # A launcher that runs everything inline works too.
        assert_same(mod.run_async((x,), launcher=lambda fn: fn()).wait(), scripted(x))
        # A launcher that never runs a fork: wait() runs it on the waiting thread.
        held: list = []

        def lazy(fn):
            if not held:
                held.append(None)
                fn()  # the run itself, inline
            else:
                held.append(fn)  # a fork: never run by the launcher

        assert_same(mod.run_async((x,), launcher=lazy).wait(), scripted(x))
        assert len(held) == 11
    finally:
        pool.shutdown()


def test_run_async_argument_errors():
    mod = sr.StaticModule(torch.jit.script(MODELS["mlp"].build()))
    with pytest.raises(TypeError, match="launcher must be a callable"):
        mod.run_async((torch.randn(1, 64),), launcher=3)
    with pytest.raises(TypeError, match="as a tuple or list"):
        mod.run_async(torch.randn(1, 64))
    with pytest.raises(TypeError, match="as a dict"):
        mod.run_async((), [1])


@pytest.mark.parametrize("opts", OPTION_SETS.values(), ids=OPTION_SETS.keys())
def test_forks_from_many_threads(opts):
    """The module with forks, called from 8 threads at once: every result is right."""
    scripted = torch.jit.script(forks_of_forks)
    mod = sr.StaticModule(scripted, options=opts)
    xs = [torch.randn(4) for _ in range(8)]
    want = [scripted(x) for x in xs]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for _ in range(100):
                out = mod(xs[k])
                torch.testing.assert_close(out, want[k])
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert mod.pool_size <= 8
