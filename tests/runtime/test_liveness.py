"""The backward pass of signature specialisation (``runtime/liveness.py``): nodes nobody needs
once the signature's values are literals are left out; nodes that act on the world stay."""

import torch
from differential import script

import static_runtime as sr
from static_runtime.memory.cache import signature
from static_runtime.runtime.specialize import Specializer

SRC = """
def f(x: torch.Tensor):
    n = x.size(0)
    if n > 2:
        print("big")
        return x * 2
    return x + 1
"""


def test_what_the_signature_decides_is_left_out_and_effects_stay():
    mod = sr.StaticModule(script(SRC))
    spec = Specializer(mod.plan).specialize(signature([torch.randn(3)]))
    assert spec.taken  # the branch is decided by the size
    kinds = {n.kind for n in spec.dropped}
    assert "aten::size" in kinds or "aten::gt" in kinds  # the condition is not computed
    assert "prim::Print" not in kinds  # an effect always runs
