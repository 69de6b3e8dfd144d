"""The fake-tensor run of shape programs (``runtime/symbolic_run.py``): what it refuses, with
the reason, instead of guessing."""

import pytest
import torch
from differential import script

import static_runtime as sr
from static_runtime.runtime.symbolic import build_program
from static_runtime.runtime.symbolic_run import Unsupported


def test_a_loop_is_not_followed():
    src = """
def f(x: torch.Tensor, n: int):
    for _ in range(n):
        x = x * 2
    return x + 1
"""
    mod = sr.StaticModule(script(src))
    with pytest.raises(Unsupported, match="loops and forks"):
        build_program(mod.plan, [torch.randn(3, 4), 2])
