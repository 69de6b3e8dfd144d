"""Differential cases for objects: module attributes read and written by ``forward``
(``prim::GetAttr``/``prim::SetAttr`` on the frozen module), constant attributes of every
kind, submodules, ``ModuleList``/``ModuleDict``, TorchScript class instances
(``ScriptObjectValue``), exported and unused methods, buffers.

The TorchScript interpreter mutates its own copy of the module, our runtime its frozen
copy; ``check`` calls both three times (first inputs, second inputs, first again), so any
divergence in the state carried between calls shows up in the outputs.
"""


import pytest
import torch
from differential import check
from torch import nn


def r(*shape):
    return torch.randn(*shape)


# --------------------------------------------------------------------------- TorchScript classes


@torch.jit.script
class Counter:
    def __init__(self, start: int):
        self.value = start
        self.steps: list[int] = []

    def increment(self, by: int) -> int:
        self.value += by
        self.steps.append(by)
        return self.value

    def total_steps(self) -> int:
        return len(self.steps)


@torch.jit.script
class TensorBag:
    def __init__(self, x: torch.Tensor):
        self.base = x
        self.items: list[torch.Tensor] = []

    def add(self, t: torch.Tensor) -> None:
        self.items.append(t + self.base)

    def scaled_sum(self, s: float) -> torch.Tensor:
        out = self.base * 0
        for t in self.items:
            out = out + t * s
        return out

    def count(self) -> int:
        return len(self.items)


@torch.jit.script
class Pair:
    def __init__(self, a: torch.Tensor, b: torch.Tensor):
        self.a = a
        self.b = b

    def swap(self) -> "Pair":
        return Pair(self.b, self.a)

    def diff(self) -> torch.Tensor:
        return self.a - self.b


@torch.jit.script
class Holder:
    def __init__(self, counter: Counter):
        self.counter = counter

    def bump(self) -> int:
        return self.counter.increment(10)


# --------------------------------------------------------------------------- modules


class CountingModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.count = 0

    def forward(self, x):
        self.count += 1
        return x * self.count, self.count


class SetsConstantAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = 1

    def forward(self, x):
        before = self.b
        self.b = 20
        return x + before, self.b


class Sub(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.zeros(1)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x + self.a


class SetsSubmoduleAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Sub()

    def forward(self, x):
        previous = self.sub.a
        self.sub.a = x.sum(0, keepdim=True)
        return self.sub(x), previous, self.sub.calls


class ConstantAttrs(nn.Module):
    __constants__ = ["scale"]  # noqa: RUF012 (nn.Module convention TorchScript reads)

    def __init__(self):
        super().__init__()
        self.scale = 3
        self.offsets = [1, 2, 3]
        self.pair = (4, 5.5)
        self.name = "const"
        self.weight = torch.arange(6.0).reshape(2, 3)
        self.table = {"a": 1, "b": 2}

    def forward(self, x):
        y = x * self.scale + self.offsets[1] + self.pair[1]
        z = y @ self.weight.t() if y.size(-1) == 3 else y
        return z, self.name + "!", self.table["b"], len(self.offsets)


class FinalAttrs(nn.Module):
    k: torch.jit.Final[int]
    eps: torch.jit.Final[float]

    def __init__(self):
        super().__init__()
        self.k = 2
        self.eps = 1e-3

    def forward(self, x):
        return x.pow(self.k) + self.eps


class Linear2(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(4, 3)
        self.l2 = nn.Linear(3, 2)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class ListAndDictOfModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 1), "b": nn.Linear(3, 2)})

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) + i
        outs: dict[str, torch.Tensor] = {}
        for name, head in self.heads.items():
            outs[name] = head(x)
        return outs, self.layers[1](x)


class SequentialModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 2))

    def forward(self, x):
        return self.seq(x) + x


class UsesCounterClass(nn.Module):
    def forward(self, x, n: int):
        c = Counter(1)
        for i in range(n):
            c.increment(i)
        return x * c.value, c.total_steps(), c.steps


class UsesTensorBag(nn.Module):
    def forward(self, x, n: int):
        bag = TensorBag(x)
        for i in range(n):
            bag.add(x * i)
        return bag.scaled_sum(0.5), bag.count()


class UsesPair(nn.Module):
    def forward(self, x, y):
        p = Pair(x, y)
        q = p.swap()
        return p.diff(), q.diff(), q.a


class UsesNestedClass(nn.Module):
    def forward(self, n: int):
        c = Counter(n)
        h = Holder(c)
        h.bump()
        h.bump()
        # ``h.counter`` and ``c`` are one object: the bumps are seen through both.
        return c.value, h.counter.total_steps()


class ClassInstanceAsAttribute(nn.Module):
    def __init__(self):
        super().__init__()
        self.counter = Counter(0)

    def forward(self, x, by: int):
        v = self.counter.increment(by)
        return x + v, self.counter.total_steps()


class MethodsCallingMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.alpha = 0.5

    def helper(self, x: torch.Tensor, k: int) -> torch.Tensor:
        return self.inner(x) * k

    def inner(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.alpha + 1

    def forward(self, x):
        return self.helper(x, 2) + self.helper(x, 3)


class ExportedAndUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.ones(3)

    @torch.jit.export
    def extra(self, x: torch.Tensor) -> torch.Tensor:
        return x * 100

    @torch.jit.unused
    def debug_only(self, x):
        import numpy  # never compiled, never run

        return numpy.asarray(x)

    def forward(self, x, use_unused: bool = False):
        if use_unused:
            return self.debug_only(x)
        return x * self.w


class IsinstanceOnOptional(nn.Module):
    def forward(self, x, mask: torch.Tensor | None, k: int | None = None):
        y = x
        if isinstance(mask, torch.Tensor):
            y = y * mask
        if isinstance(k, int):
            y = y + k
        return y


class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.5, -0.5, 1.0]))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        return (x - self.mean) * 2, self.steps + 1


class MutatesBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(3))

    def forward(self, x):
        self.running.add_(x.mean(0))
        return self.running.clone()


class AttributeListAppend(nn.Module):
    history: list[int]

    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, x):
        self.history.append(x.size(0))
        return len(self.history), sum(self.history)


class AttributeDictUpdate(nn.Module):
    seen: dict[int, int]

    def __init__(self):
        super().__init__()
        self.seen = {}

    def forward(self, x):
        n = x.size(0)
        self.seen[n] = self.seen.get(n, 0) + 1
        return self.seen[n], len(self.seen)


class OptionalCache(nn.Module):
    cache: torch.Tensor | None

    def __init__(self):
        super().__init__()
        self.cache = None

    def forward(self, x):
        cached = self.cache
        self.cache = x * 2
        if cached is None:
            return x
        if cached.shape == x.shape:
            return x + cached
        return x - 1


class SubmoduleCountsItself(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Sub()

    def forward(self, x):
        y = self.sub(x)
        y = self.sub(y)
        return y, self.sub.calls


class SharedSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        shared = Sub()
        self.first = shared
        self.second = shared

    def forward(self, x):
        self.first.a = x.mean(0, keepdim=True)
        return self.second(x), self.second.calls


class AttributeDrivesLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.depth = 1

    def forward(self, x):
        for _ in range(self.depth):
            x = x * 2
        self.depth += 1
        return x


class TupleOfTensorsAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.consts: tuple[torch.Tensor, torch.Tensor] = (torch.ones(2), torch.arange(2.0))

    def forward(self, x):
        a, b = self.consts
        return x * a + b


class CallsScriptedFunction(nn.Module):
    def forward(self, x, n: int):
        return _free_function(x, n), _free_function(x * 2, n + 1)


def _free_function(x: torch.Tensor, n: int) -> torch.Tensor:
    out = x
    for _ in range(n):
        out = torch.tanh(out)
    return out


class TrainingFlag(nn.Module):
    def forward(self, x):
        if self.training:
            return x * 0
        return x + 1


class KwargsForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.full((2,), 0.25)

    def forward(self, x, scale: float = 1.0, add_bias: bool = True, tag: str = "t"):
        y = x * scale
        if add_bias:
            y = y + self.bias
        return y, tag + str(y.dim())


class ListAliasThroughClass(nn.Module):
    def forward(self, x, n: int):
        c = Counter(0)
        steps = c.steps
        c.increment(n)
        c.increment(2 * n)
        # ``steps`` is the object's own list: both appends are seen through it.
        return steps, x * c.value


class ReturnsAttributeList(nn.Module):
    history: list[int]

    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, x):
        self.history.append(x.dim())
        return self.history


class ClassMethodsWithTensors(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.tensor([2.0])

    def forward(self, x, y):
        p = Pair(x * self.scale, y)
        total = p.diff()
        for _ in range(2):
            p = p.swap()
            total = total + p.diff() * 0.5
        return total


CASES = [
    (CountingModule, [r(2)], [r(3, 1)]),
    (SetsConstantAttr, [r(2)], [r(3)]),
    (SetsSubmoduleAttr, [r(2, 3)], [r(4, 3)]),
    (ConstantAttrs, [r(2, 3)], [r(4)]),
    (FinalAttrs, [r(3)], [r(2, 2)]),
    (Linear2, [r(1, 4)], [r(5, 4)]),
    (ListAndDictOfModules, [r(2, 3)], [r(1, 3)]),
    (SequentialModule, [r(3, 2)], [r(1, 2)]),
    (UsesCounterClass, [r(2), 4], [r(3), 0]),
    (UsesTensorBag, [r(2), 3], [r(3, 1), 0]),
    (UsesPair, [r(2), r(2)], [r(3, 3), r(3, 3)]),
    (UsesNestedClass, [1], [-5]),
    (ClassInstanceAsAttribute, [r(2), 3], [r(3), -1]),
    (MethodsCallingMethods, [r(3)], [r(2, 2)]),
    (ExportedAndUnused, [r(3)], [r(2, 3)]),
    (IsinstanceOnOptional, [r(2), r(2)], [r(3), None]),
    (WithBuffer, [r(2, 3)], [r(3)]),
    (MutatesBuffer, [r(2, 3)], [r(5, 3)]),
    (AttributeListAppend, [r(2)], [r(5, 1)]),
    (AttributeDictUpdate, [r(2)], [r(3)]),
    (OptionalCache, [r(2)], [r(3)]),
    (SubmoduleCountsItself, [r(2)], [r(1, 3)]),
    (SharedSubmodule, [r(2, 3)], [r(4, 3)]),
    (AttributeDrivesLoop, [r(2)], [r(3)]),
    (TupleOfTensorsAttr, [r(2)], [r(3, 2)]),
    (CallsScriptedFunction, [r(2), 2], [r(3), 0]),
    (TrainingFlag, [r(2)], [r(3)]),
    (KwargsForward, [r(2)], [r(3, 2)]),
    (ListAliasThroughClass, [r(2), 3], [r(1), 0]),
    (ReturnsAttributeList, [r(2)], [r(3, 1)]),
    (ClassMethodsWithTensors, [r(2), r(2)], [r(3), r(1)]),
]


def _param(case):
    if hasattr(case, "marks"):  # already a pytest.param
        return pytest.param(*case.values, id=case.values[0].__name__, marks=case.marks)
    cls, a, b = case
    return pytest.param(cls, a, b, id=cls.__name__)


@pytest.mark.parametrize("cls,inputs,second", [_param(c) for c in CASES])
def test_objects(cls, inputs, second):
    # Eval mode: a StaticModule is an inference runtime and freezes the module in eval mode.
    check(torch.jit.script(cls().eval()), inputs, second)


def test_isinstance_optional_with_kwargs():
    m = torch.jit.script(IsinstanceOnOptional().eval())
    check(m, [r(2), None], [r(3), r(3)], kwargs={"k": 4})


def test_forward_kwargs_and_defaults():
    m = torch.jit.script(KwargsForward().eval())
    check(m, [r(2)], [r(1, 2)], kwargs={"scale": 3.0, "tag": "q"})
    check(m, [r(2), 0.5], [r(1, 2), 2.0], kwargs={"add_bias": False})


def test_counter_state_after_many_calls():
    # Beyond check's three calls: the module's own state, read back after ten calls.
    scripted = torch.jit.script(CountingModule().eval())
    mods = check(scripted, [r(2)], [r(3)])
    oracle = torch.jit.script(CountingModule().eval())
    for mod in mods.values():
        ours_last = None
        for _ in range(10):
            ours_last = mod(torch.ones(1))
    for _ in range(13):
        expected = oracle(torch.ones(1))
    assert ours_last[1] == expected[1] == 13


def test_static_module_owns_its_state():
    # The frozen module shares buffer storage with the module it was made from; our runtime
    # must write its own copy, not the user's module (nor another StaticModule's).
    import static_runtime as sr

    scripted = torch.jit.script(MutatesBuffer().eval())
    a, b = sr.StaticModule(scripted), sr.StaticModule(scripted)
    x = torch.ones(2, 3)
    a(x)
    a(x)
    torch.testing.assert_close(b(x), torch.ones(3))
    torch.testing.assert_close(scripted.running, torch.zeros(3))
    counting = torch.jit.script(AttributeListAppend().eval())
    m = sr.StaticModule(counting)
    assert m(x) == (1, 2) and m(x) == (2, 4)
    assert counting.history == []
