"""A causal mask made by comparing position indices (``kv_idx <= q_idx``, as Hugging Face's
decoders build it) is followed by a shape program: PyTorch's own reference of a comparison
over symbolic sizes raises ("SymIntArrayRef expected to contain only concrete integers"),
so comparisons run a function of their result's metadata there (``ops/native/conditions.py``)
— every new length is laid out by the program and equals eager."""

import torch
from torch import nn

import static_runtime as sr
from static_runtime.runtime.hot import wait_for_builds


class CausalSelfAttention(nn.Module):
    def forward(self, x):
        n = x.size(1)
        idx = torch.arange(n)
        mask = idx[None, None, :] <= idx[None, :, None]
        scores = torch.matmul(x, x.transpose(1, 2)).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, -1) @ x


def test_new_lengths_of_a_causal_mask_are_laid_out_by_the_program():
    model = CausalSelfAttention().eval()
    g = torch.Generator().manual_seed(0)
    traced = torch.jit.trace(model, torch.randn(2, 12, 8, generator=g))
    assert "aten::le" in str(traced.graph)
    mod = sr.StaticModule(traced, sr.StaticModuleOptions(verify_memory_plans=True))
    mod(torch.randn(2, 40, 8, generator=g))  # (the largest first: later lengths fit)
    wait_for_builds()
    assert mod._memory.programs.failures == {}
    for n in (7, 23, 31, 2, 17, 40):
        x = torch.randn(2, n, 8, generator=g)
        before = x.clone()
        torch.testing.assert_close(mod(x), model(x))
        torch.testing.assert_close(mod(x), model(x))
        torch.testing.assert_close(x, before)
    assert sum(mod._memory.programs.served.values()) >= 5
