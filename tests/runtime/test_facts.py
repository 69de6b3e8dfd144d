"""Facts of signature specialisation (``runtime/facts.py``): what a signature entry guarantees
and the values standing for facts."""

import torch

from static_runtime.runtime.facts import (
    UNKNOWN,
    Const,
    SeqFact,
    TensorFact,
    fact_value,
    key_fact,
    value_fact,
)


def test_a_signature_entry_gives_the_fact_it_guarantees():
    assert key_fact((torch.float32, (2, 3))) == TensorFact(torch.float32, (2, 3),
                                                           torch.device("cpu"))
    assert key_fact(type(None)) == Const(None)
    assert key_fact((int, 3)) == Const(3)
    assert key_fact((int, True)) is None  # only the exact builtin type is trusted
    assert key_fact((list, ((int, 1), (str, "a")))) == SeqFact(list, (Const(1), Const("a")))


def test_a_tensor_fact_stands_as_a_meta_tensor_and_an_unknown_stays_unknown():
    t = fact_value(TensorFact(torch.float64, (4,)), real=False)
    assert t.is_meta and t.dtype is torch.float64 and tuple(t.shape) == (4,)
    assert fact_value(None, real=True) is UNKNOWN
    assert fact_value(SeqFact(list, (Const(1), None)), real=True) is UNKNOWN
    assert value_fact([1, 2.5]) == SeqFact(list, (Const(1), Const(2.5)))
