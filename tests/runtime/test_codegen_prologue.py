"""The generated factory's prologue (``runtime/codegen/prologue.py``): the signature guard that
hands back to the general path when the inputs change."""

import pytest
import torch
from differential import assert_same, script

import static_runtime as sr
from static_runtime.ir import types as T
from static_runtime.runtime.codegen.prologue import guard_kind


def test_generated_code_checks_the_signature_and_hands_back_on_change():
    src = """
def f(x: torch.Tensor):
    return torch.tanh(torch.exp(x) * 2)
"""
    mod = sr.StaticModule(script(src), options=sr.StaticModuleOptions(specialize_after=0))
    rt = mod.runtime()
    for x in (torch.randn(3), torch.randn(3), torch.randn(5), torch.randn(3),
              torch.randn(3, dtype=torch.float64), torch.randn(5)):
        assert_same(rt(x), script(src)(x))
    assert "raise SignatureChanged" in mod.code


def test_a_list_of_tensors_is_checked_element_by_element():
    """The guard of a ``List[Tensor]`` input checks its length and each element's dtype and
    shape inline; any change hands back to the general path and gets code of its own; a
    list holding something else is refused by the binder, which copies the list."""
    src = """
def f(xs: List[torch.Tensor]) -> torch.Tensor:
    acc = torch.relu(xs[0] * 2.0)
    for x in xs[1:]:
        acc = acc + x.sum()
    return acc + float(len(xs))
"""
    s = script(src)
    # (``xs[0] * 2.0`` writes the arena: code specialised on a signature comes on its first
    # call from the arena, and only for a signature seen often unless specialize_after=0)
    mod = sr.StaticModule(s, sr.StaticModuleOptions(specialize_after=0))
    rt = mod.runtime()
    a, b, c = torch.randn(2, 3), torch.randn(4), torch.randn(2, 3)
    for xs in ([a, b], [a, b], [a, c], [a, b, c], [a.double(), b], [a, b]):
        assert_same(rt(xs), s(list(xs)))
    assert "type(xs_1) is not list or len(xs_1) != 2" in mod.code
    with pytest.raises(sr.ArgumentError, match="xs"):
        rt([a, 3])


def test_guard_kind_checks_tensors_directly_and_anything_else_by_signature():
    tensor_key = (torch.float32, torch.Size([2, 3]))
    assert guard_kind(tensor_key, T.TensorType()) is True
    assert guard_kind(tensor_key, T.OptionalType(T.TensorType())) is False  # may be None
    list_key = (list, (tensor_key, tensor_key))
    assert guard_kind(list_key, T.ListType(T.TensorType())) == ("list", 2)
    assert guard_kind(3, T.Int) is False
