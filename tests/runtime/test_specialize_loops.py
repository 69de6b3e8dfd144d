"""Signature specialisation inside loops: a carried tensor whose dtype and shape every trip
keeps has them as facts in the body (and after the loop), so what they decide folds there
too — a scripted ``nn.GRUCell``'s rank checks in a decoding loop; a carried tensor that a
trip changes has none.

Differential (against the TorchScript interpreter, both option sets, two input shapes),
then a look at the generated code.
"""

from __future__ import annotations

import pytest
import torch
from differential import check
from torch import Tensor, nn

import static_runtime as sr

AT_ONCE = sr.StaticModuleOptions(specialize_after=0)
OFF = sr.StaticModuleOptions(specialize_after=0, specialize_signature=False)


class _Decoder(nn.Module):
    """Greedy decoding with a GRU cell: the cell's scripted forward checks ranks on every
    trip; the loop stops early once every row produced the end token."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.Embedding(12, 8)
        self.cell = nn.GRUCell(8, 16)
        self.out = nn.Linear(16, 12)

    def forward(self, h: Tensor) -> Tensor:
        token = torch.zeros([h.size(0)], dtype=torch.long)
        tokens: list[Tensor] = []
        step = 0
        while step < 6:
            h = self.cell(self.embedding(token), h)
            token = self.out(h).argmax(dim=-1)
            tokens.append(token)
            if bool((token == 3).all()):
                break
            step += 1
        return torch.stack(tokens, dim=1) + h.size(1)


def _loop_body(code: str) -> str:
    """The generated code from its first loop on (``while`` or ``for``)."""
    run = code.split("    def run(", 1)[1]
    starts = [i for i in (run.find("while "), run.find("for _it")) if i >= 0]
    assert starts, run
    return run[min(starts):]


def test_carried_tensor_facts_fold_the_cells_checks_in_the_loop():
    model = _Decoder().eval()
    a, b = torch.randn(4, 16), torch.randn(7, 16)
    check(model, [a], [b])
    mod = sr.StaticModule(torch.jit.script(model), options=AT_ONCE)
    for x in (a, b, a):
        mod(x)
        torch.testing.assert_close(mod(x), model(x))
    body = _loop_body(mod.code)
    assert ".dim()" not in body and "RaiseException" not in body \
        and "__contains__" not in body, body
    off = sr.StaticModule(torch.jit.script(model), options=OFF)
    off(a)
    off(a)
    assert "RaiseException" in _loop_body(off.code)


def _grows(x: Tensor, n: int) -> Tensor:
    acc = torch.zeros(1)
    for _ in range(n):
        # the carried x has one more row each trip: its size is never a fact in the loop
        acc = acc + x.size(0)
        x = torch.cat([x, x[:1]], dim=0)
    return acc + x.size(0)


def _changes_dtype(x: Tensor, n: int) -> Tensor:
    y = x
    for i in range(n):
        if y.dtype == torch.float32:
            y = y.double() * 2
        else:
            y = y + i
    return y


def _changes_rank_late(x: Tensor, n: int) -> Tensor:
    out = x
    for i in range(n):
        if i == 2:
            out = out.unsqueeze(0)
        out = out + float(out.dim())
    return out


@pytest.mark.parametrize("fn", [_grows, _changes_dtype, _changes_rank_late])
def test_a_trip_that_changes_a_carried_tensor_keeps_its_facts_out(fn):
    check(fn, [torch.randn(3, 2), 4], [torch.randn(5, 3), 5])
    mod = sr.StaticModule(torch.jit.script(fn), options=AT_ONCE)
    for x, n in ((torch.randn(3, 2), 4), (torch.randn(5, 3), 1), (torch.randn(3, 2), 0)):
        mod(x, n)
        torch.testing.assert_close(mod(x, n), fn(x, n))


def _nested(x: Tensor, n: int) -> Tensor:
    h = x
    for _ in range(n):
        for _ in range(2):
            if h.dim() != 2:
                raise ValueError("rank")
            h = torch.tanh(h @ h.t()[:, : h.size(1)]) * 0.5
    return h


def test_nested_loops_keep_facts_of_both_levels():
    check(_nested, [torch.randn(4, 3), 3], [torch.randn(5, 2), 2])
    mod = sr.StaticModule(torch.jit.script(_nested), options=AT_ONCE)
    x = torch.randn(4, 3)
    mod(x, 3)
    torch.testing.assert_close(mod(x, 3), _nested(x, 3))
    body = _loop_body(mod.code)
    assert ".dim()" not in body and "RaiseException" not in body \
        and ".size(" not in body, body
