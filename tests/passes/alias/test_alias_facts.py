"""Operators that hand back an input although their schema says their result is fresh
(``rules.RETURNS_INPUT``): each entry is called and seen returning its input's storage, the
alias analysis joins their result to their inputs, and a model whose intermediate goes
through one gets eager's answer on every call — also where the table misses an operator (a
recording call then finds the shared storage and keeps the value out of the arena)."""

from __future__ import annotations

import pytest
import torch
from alias_helpers import analyze
from differential import check

import static_runtime as sr
from static_runtime.passes.alias import build
from static_runtime.passes.alias.rules import RETURNS_INPUT

A = torch.ops.aten
X = torch.randn(3, 4)
V = torch.randn(5)

#: a call of each entry that returns (its result, the input it hands back)
CALLS = {
    "aten::type_as": lambda: (A.type_as(X, X), X),
    "aten::to_dense": lambda: (A.to_dense(X), X),
    "aten::dequantize.self": lambda: (A.dequantize.self(X), X),
    "aten::lift": lambda: (A.lift(X), X),
    "aten::data": lambda: (A.data(X), X),
    "aten::_unsafe_view": lambda: (A._unsafe_view(X, [12]), X),
    "aten::sum_to_size": lambda: (A.sum_to_size(X, [3, 4]), X),
    "aten::dropout": lambda: (A.dropout(X, 0.5, False), X),
    "aten::feature_dropout": lambda: (A.feature_dropout(X, 0.5, False), X),
    "aten::alpha_dropout": lambda: (A.alpha_dropout(X, 0.5, False), X),
    "aten::feature_alpha_dropout": lambda: (A.feature_alpha_dropout(X, 0.5, False), X),
    "aten::atleast_1d": lambda: (A.atleast_1d(X), X),
    "aten::atleast_2d": lambda: (A.atleast_2d(X), X),
    "aten::atleast_3d": lambda: (A.atleast_3d(X.view(1, 3, 4)), X),
    "aten::conj_physical": lambda: (A.conj_physical(X), X),
    "aten::cartesian_prod": lambda: (A.cartesian_prod([V]), V),
    "aten::flatten_dense_tensors": lambda: (A.flatten_dense_tensors([V]), V),
    "aten::einsum": lambda: (A.einsum("ij->ji", [X]), X),
    **{f"aten::_cast_{t}": (lambda t=t, dtype=dtype: (
        getattr(A, f"_cast_{t}")(torch.zeros(2, dtype=dtype)), None))
       for t, dtype in (("Byte", torch.uint8), ("Char", torch.int8),
                        ("Double", torch.float64), ("Float", torch.float32),
                        ("Int", torch.int32), ("Long", torch.int64), ("Short", torch.int16),
                        ("Half", torch.float16))},
}


@pytest.mark.parametrize("name", sorted(RETURNS_INPUT))
def test_every_entry_hands_back_its_input(name):
    out, source = CALLS[name]()
    if source is None:  # (the _cast_ family: the input made in the call)
        return
    assert out.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()


def test_the_casts_hand_back_their_input():
    for t, dtype in (("Float", torch.float32), ("Long", torch.int64)):
        x = torch.zeros(2, dtype=dtype)
        assert getattr(A, f"_cast_{t}")(x).data_ptr() == x.data_ptr()


def test_every_entry_is_an_operator_whose_schema_says_fresh():
    for name in RETURNS_INPUT:
        base, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, base.split("::")[1])
        schema = getattr(packet, overload or "default")._schema
        assert all(r.alias_info is None for r in schema.returns), name


def test_the_analysis_joins_their_result_to_the_input():
    db, v = analyze("""
    graph(%x : Tensor, %y : Tensor):
      %p : float = prim::Constant[value=0.5]()
      %f : bool = prim::Constant[value=0]()
      %a : Tensor = aten::relu(%x)
      %b : Tensor = aten::type_as(%a, %y)
      %c : Tensor = aten::relu(%x)
      %d : Tensor = aten::dropout(%c, %p, %f)
      %e : Tensor = aten::relu(%x)
      %g : Tensor = aten::neg(%e)
      return (%b, %d, %g)
    """)
    assert db.may_alias(v["b"], v["a"]) and db.may_alias(v["d"], v["c"])
    assert not db.may_alias(v["g"], v["e"])  # (a schema that says fresh and is: fresh)


def _rms_norm_type_as(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    # a Gemma-style norm: computed in float, handed back by type_as (the same tensor here),
    # then a product that the planner could place over the norm's result
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    h = (h * (1.0 + w)).type_as(x)
    y = torch.nn.functional.linear(h, w2)
    return y + h.sum(-1, keepdim=True)


def _eval_dropout(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x * 2.0)
    d = torch.dropout(h, 0.25, False)
    return torch.nn.functional.linear(d, w) + d.sum(-1, keepdim=True)


def _einsum_transpose(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x * 3.0)
    t = torch.einsum("ij->ji", h)
    return torch.mm(t, w) + t.sum()


def _atleast(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.atleast_2d(torch.relu(x + 1.0))
    return torch.mm(h, w) + h.mean()


CASES = [
    (_rms_norm_type_as, lambda n: (torch.randn(2, n, 16), torch.randn(16), torch.randn(48, 16))),
    (_eval_dropout, lambda n: (torch.randn(n, 16), torch.randn(32, 16))),
    (_einsum_transpose, lambda n: (torch.randn(16, n), torch.randn(16, 8))),
    (_atleast, lambda n: (torch.randn(n, 16), torch.randn(16, 24))),
]


@pytest.mark.parametrize("fn,make", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_model_through_them_equals_the_interpreter(fn, make):
    check(fn, make(5), make(9))


@pytest.fixture
def without_the_table(monkeypatch):
    monkeypatch.setattr(build, "RETURNS_INPUT", frozenset())


#: the cases whose operator is still in the graph after our passes (eval dropout is dropped)
NET_CASES = [c for c in CASES if c[0] is not _eval_dropout]


@pytest.mark.parametrize("fn,make", NET_CASES, ids=[c[0].__name__ for c in NET_CASES])
def test_without_the_table_a_recording_keeps_the_value_out_of_the_arena(
        without_the_table, fn, make):
    modules = check(fn, make(5), make(9))
    mod = modules["default"]
    assert "kept out of the arena" in mod.describe()
    scripted = torch.jit.script(fn)
    fresh = sr.StaticModule(scripted)
    x = make(7)
    for _ in range(4):
        torch.testing.assert_close(fresh(*x), fn(*x))
