"""Views of arena tensors taken once per memory layout (``runtime/hoist.py``).

Each case is differential (``check`` against the TorchScript interpreter, both option sets,
two shapes, repeated calls) and then looks at the generated code: what was hoisted is in
``_hoist()``, not in ``run``.
"""

from __future__ import annotations

import pytest
import torch
from differential import check, script
from torch import Tensor

import static_runtime as sr
from static_runtime.runtime.codegen import SignatureChanged
from static_runtime.runtime.hoist import HoistRefused, check_hoisted

#: specialised code on a signature's first call from the arena (what these tests look at)
AT_ONCE = sr.StaticModuleOptions(specialize_after=0)
OFF = sr.StaticModuleOptions(specialize_after=0, hoist_views=False)


def _code(mod: sr.StaticModule, *inputs) -> tuple[str, str]:
    """(factory part, run part) of the code that runs ``inputs``."""
    first = mod(*inputs)
    torch.testing.assert_close(mod(*inputs), first)
    factory, run = mod.code.split("    def run(", 1)
    return factory, run


def _heads(x: Tensor, w: Tensor) -> Tensor:
    q = torch.matmul(x, w)
    h = q.view(x.size(0), x.size(1), 2, 4).transpose(1, 2)
    return torch.softmax(h, -1).sum(1)


def test_head_reshape_of_an_arena_tensor_is_hoisted():
    w = torch.randn(8, 8)
    mods = check(_heads, [torch.randn(2, 5, 8), w], [torch.randn(3, 4, 8), w])
    factory, run = _code(mods["default"], torch.randn(2, 5, 8), w)
    assert "def _hoist():" in factory
    assert "_f_view(m_" in factory and "_f_transpose(" in factory
    assert "_f_view(" not in run and "_f_transpose(" not in run
    _, off_run = _code(sr.StaticModule(script(_heads), options=OFF), torch.randn(2, 5, 8), w)
    assert "_f_view(" in off_run


def test_a_reshape_that_copies_is_not_hoisted():
    """``reshape`` of a transposed arena tensor copies: the factory finds its result is not
    a view of the arena and the code is made again without hoisting it."""

    def f(x: Tensor, w: Tensor) -> Tensor:
        y = torch.matmul(x, w).transpose(0, 1)
        z = y.reshape(-1)
        return z + z

    w = torch.randn(4, 4)
    mods = check(f, [torch.randn(3, 4), w], [torch.randn(5, 4), w])
    mod = mods["default"]
    _, run = _code(mod, torch.randn(3, 4), w)
    assert "_f_reshape(" in run  # runs per call
    assert mod._codes.not_views  # found out by the factory's check


def test_views_whose_metadata_a_node_changes_are_not_hoisted():
    def f(x: Tensor) -> Tensor:
        y = x + x
        v = y.view(-1)
        v.unsqueeze_(0)
        return v + 1.0

    mods = check(f, [torch.randn(3, 4)], [torch.randn(2, 2)])
    factory, _ = _code(mods["default"], torch.randn(3, 4))
    assert "_hoist" not in factory


def test_chunks_of_an_arena_tensor_are_hoisted():
    def f(x: Tensor, w: Tensor) -> Tensor:
        qkv = torch.matmul(x, w)
        q, k, v = qkv.chunk(3, -1)
        return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)), -1), v)

    w = torch.randn(4, 12)
    mods = check(f, [torch.randn(2, 3, 4), w], [torch.randn(1, 6, 4), w])
    factory, run = _code(mods["default"], torch.randn(2, 3, 4), w)
    assert "_f_chunk(m_" in factory and "_f_chunk(" not in run


def test_outputs_and_views_of_inputs_are_never_hoisted():
    def f(x: Tensor) -> tuple[Tensor, Tensor]:
        y = x.view(-1)  # a view of an input: new every call
        z = (x + x).view(-1)  # a view returned to the caller
        return y + 1.0, z

    x = torch.randn(3, 4)
    mods = check(f, [x], [torch.randn(2, 2)])
    mod = mods["default"]
    a = mod(x)[1]
    b = mod(x * 3.0)[1]
    assert a.data_ptr() != b.data_ptr()
    torch.testing.assert_close(a, (x + x).view(-1))
    factory, _ = _code(mod, x)
    assert "_hoist" not in factory


def test_a_refused_arena_write_retakes_the_views_for_that_call():
    """When PyTorch refuses to resize an arena tensor (a size that depends on data through
    ``int(x[0])``, which no operator tag announces), the call's views are taken of the value
    allocated instead; that function hands a later call back to the general path."""

    def f(x: Tensor) -> Tensor:
        n = int(x[0])
        r = torch.ones(n) + torch.ones(n)
        return r.view(-1, 1).sum(1) * x[1]

    s = script(f)
    four, six = torch.tensor([4.0, 3.0]), torch.tensor([6.0, 5.0])
    mod = sr.StaticModule(s, options=AT_ONCE)
    rt = mod.runtime()
    torch.testing.assert_close(rt(four), s(four))
    torch.testing.assert_close(rt(four), s(four))
    ex = rt._interp
    fn = ex._fast
    assert fn is not None and "_hoist" in mod.code
    with torch.inference_mode():
        torch.testing.assert_close(ex.finish(fn(six), [six])[0], s(six))
        with pytest.raises(SignatureChanged):
            fn(four)
    for x in (six, four, six):
        torch.testing.assert_close(rt(x), s(x))


def test_check_hoisted_names_the_node_that_copied():
    base = torch.randn(4, 4)
    view, copy = base.t(), base.t().contiguous()
    check_hoisted(("a",), (((view,), base),))
    try:
        check_hoisted(("a", "b"), (((view,), base), ((copy,), base)))
    except HoistRefused as e:
        assert e.node == "b"
    else:
        raise AssertionError("a copy passed as a view")
