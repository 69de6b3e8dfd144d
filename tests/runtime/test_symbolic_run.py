"""The fake-tensor run of shape programs (``runtime/symbolic_run.py``): what it refuses, with
the reason, instead of guessing."""

import pytest
import torch
from differential import script

import static_runtime as sr
from static_runtime.runtime.symbolic import build_program
from static_runtime.runtime.symbolic_run import Unsupported


def test_a_loop_over_a_size_is_not_followed_one_over_a_number_is():
    """A loop whose trip count is a size would pin the size to the run's (a program for one
    size): refused, with the reason. One over a number the signature fixes is followed."""
    over_size = """
def f(x: torch.Tensor):
    for _ in range(x.size(0)):
        x = x * 2
    return x + 1
"""
    mod = sr.StaticModule(script(over_size))
    with pytest.raises(Unsupported, match="trip count is a size"):
        build_program(mod.plan, [torch.randn(3, 4)])
    over_number = """
def f(x: torch.Tensor, n: int):
    for _ in range(n):
        x = x * 2
    return x + 1
"""
    mod = sr.StaticModule(script(over_number))
    program = build_program(mod.plan, [torch.randn(3, 4), 2])
    assert program.evaluate([torch.randn(5, 7), 2]) is not None
