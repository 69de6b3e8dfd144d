"""inplace_activations: relu(x) → relu_(x) only where nobody else can see x."""

import torch
from differential import check, script

import static_runtime as sr


def kinds(src: str) -> list[str]:
    return [n.kind for n in sr.prepare(script(src)).walk()]


def test_relu_of_a_fresh_single_use_tensor_goes_in_place():
    src = """
def f(x: torch.Tensor, w: torch.Tensor):
    return torch.relu(torch.matmul(x, w))
"""
    assert "aten::relu_" in kinds(src) and "aten::relu" not in kinds(src)
    check(src, [torch.randn(2, 3), torch.randn(3, 4)], [torch.randn(5, 3), torch.randn(3, 1)])


def test_relu_of_an_input_is_not_rewritten():
    src = """
def f(x: torch.Tensor):
    return torch.relu(x)
"""
    assert "aten::relu_" not in kinds(src)
    check(src, [torch.randn(3)], [torch.randn(5)])


def test_relu_of_a_tensor_used_again_is_not_rewritten():
    src = """
def f(x: torch.Tensor):
    a = x * 2
    return torch.relu(a) + a
"""
    assert "aten::relu_" not in kinds(src)
    check(src, [torch.randn(3)], [torch.randn(5)])


def test_relu_of_a_view_or_a_listed_tensor_is_not_rewritten():
    view = """
def f(x: torch.Tensor):
    a = x * 2
    b = a.view(-1)
    return torch.relu(b), a
"""
    listed = """
def f(x: torch.Tensor):
    a = x * 2
    xs = [a]
    return torch.relu(a), xs
"""
    for src in (view, listed):
        assert "aten::relu_" not in kinds(src)
        check(src, [torch.randn(2, 3)], [torch.randn(4, 1)])


def test_option_switches_it_off():
    src = """
def f(x: torch.Tensor, w: torch.Tensor):
    return torch.relu(torch.matmul(x, w))
"""
    graph = sr.prepare(script(src), sr.StaticModuleOptions(inplace_activations=False))
    assert "aten::relu_" not in [n.kind for n in graph.walk()]


def test_integer_relu_keeps_its_dtype():
    src = """
def f(x: torch.Tensor):
    return torch.relu(x * 3)
"""
    check(src, [torch.arange(-3, 3)], [torch.arange(-5, 5).view(2, 5)])
