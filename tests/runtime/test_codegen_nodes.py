"""Straight-line nodes in generated code (``runtime/codegen/nodes.py``): expressions, calls
through bindings, displays, intermediates released after their last use."""

import pytest
import torch
from differential import assert_same, script

import static_runtime as sr


def test_intermediates_are_released_after_last_use():
    src = """
def f(x: torch.Tensor):
    a = torch.matmul(x, x)
    b = torch.matmul(a, x)
    c = torch.matmul(b, x)
    return c
"""
    mod = sr.StaticModule(script(src), options=sr.StaticModuleOptions(optimize_memory=False))
    assert "del " in mod.code


def test_metadata_and_number_comparisons_are_expressions():
    src = """
def f(x: torch.Tensor, xs: List[int], n: int):
    if x.dim() == 2 and len(xs) > n and x.size(0) != xs[0]:
        return x * 2
    return x
"""
    mod = sr.StaticModule(script(src))
    code = mod.code
    assert ".dim()" in code and "len(" in code and ".size(" in code and " == " in code
    ref = script(src)
    for args in ((torch.ones(2, 3), [5, 1], 1), (torch.ones(3), [1], 0),
                 (torch.ones(2, 2), [2, 0], 1), (torch.ones(2, 2), [], 0)):
        assert_same(mod(*args), ref(*args))


def test_forwarding_implementations_are_called_through_their_binding():
    """An implementation that only forwards to a Python binding (``registry.InlineCall``) is
    replaced by the binding in the generated line, out= included; the result, and the node
    an error names, are the same."""
    src = """
def f(x: torch.Tensor, y: torch.Tensor):
    z = x + y
    return torch.embedding(y, torch.ones(3, dtype=torch.long)) + torch.relu(z * 2.0)
"""
    s = script(src)
    mod = sr.StaticModule(s)
    rt = mod.runtime()
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    assert_same(rt(x, y), s(x, y))
    assert_same(rt(x, y), s(x, y))
    run = mod.code.split("    def run(", 1)[1]
    assert "out=m_" in run  # the managed add writes through torch.add itself
    assert rt._interp._fast.__globals__["_o_add"] is torch.add
    with pytest.raises(RuntimeError) as info:
        rt(torch.randn(3, 4), torch.randn(2, 4))
    assert "static_runtime::add" in info.value.__notes__[0]


def test_dict_construction_is_a_display_with_the_interpreters_semantics():
    """``prim::DictConstruct`` is a dict display in the generated line; keys equal at run
    time keep the last value, as in TorchScript."""
    src = """
def f(x: torch.Tensor, k1: str, k2: str) -> Dict[str, torch.Tensor]:
    return {k1: x + 1.0, k2: x * 2.0, "c": x}
"""
    s = script(src)
    mod = sr.StaticModule(s)
    x = torch.randn(3)
    for keys in (("a", "b"), ("a", "a"), ("c", "b")):
        for _ in range(2):
            got, want = mod(x, *keys), s(x, *keys)
            assert list(got) == list(want)
            assert_same(got, want)
    assert "DictConstruct(" not in mod.code


def test_scalar_arithmetic_is_an_expression_with_torchscripts_int64_semantics():
    """int add/sub/mul are Python's operators, wrapped around at 64 bits as TorchScript's
    int64 arithmetic is; bool/int bit operations and float arithmetic are Python's."""
    src = """
def f(x: torch.Tensor) -> Tuple[int, int, bool, float, int]:
    a = int(x[0])
    b = int(x[1])
    c = float(x[2])
    big = a * b
    return big + a, a - b * b, (a > 0) & (b > 0) | (a == b), c * 2.0 - c + 0.5, a ^ b
"""
    s = script(src)
    mod = sr.StaticModule(s)
    cases = [torch.tensor([3.0, 4.0, 0.25]), torch.tensor([-7.0, 2.0, 1.5]),
             torch.tensor([2.0**40, 2.0**30, 3.0]), torch.tensor([-(2.0**62), 4.0, -1.0])]
    for x in cases:
        for _ in range(2):
            assert mod(x) == s(x)
    run = mod.code.split("    def run(", 1)[1]
    assert "_t :=" in run and " & " in run and "_f_mul" not in run
