"""A call of a binding with a node's inputs: what goes positionally or by keyword, which
constants are left out, and the callable made of it."""

import torch

from static_runtime.ops.binding_calls import DROP_ALL, DROP_NONE, Arg, call_of, make
from static_runtime.ops.python_signatures import NUMBERS, Kind, parse_signature

TENSOR = frozenset({Kind.TENSOR})
ADD = parse_signature("add(Tensor input, Tensor other, *, Scalar alpha=1, Tensor out=None)",
                      "add.Tensor", "add.out")


def _add_args(alpha):
    return [Arg(0, "self", TENSOR), Arg(1, "other", TENSOR), Arg(2, "alpha", NUMBERS, alpha)]


def test_schema_self_is_the_bindings_input_and_default_constants_are_left_out():
    receiver, positional, keywords = call_of(ADD, _add_args(1), False, False, DROP_ALL)
    assert receiver is None and [a.name for a in positional] == ["self", "other"]
    assert keywords == {}
    _, _, kept = call_of(ADD, _add_args(1), False, False, DROP_NONE)
    assert list(kept) == ["alpha"]
    _, _, other = call_of(ADD, _add_args(2), False, False, DROP_ALL)
    assert list(other) == ["alpha"]  # not the default: passed


def test_method_takes_self_as_the_receiver():
    receiver, positional, _ = call_of(parse_signature("add(Tensor other, *, Scalar alpha=1)",
                                                      "add.Tensor", None),
                                      _add_args(1), True, False, DROP_ALL)
    assert receiver.name == "self" and [a.name for a in positional] == ["other"]


def test_callable_is_the_binding_itself_or_a_generated_function():
    x, y = torch.randn(3), torch.randn(3)
    add = torch._C._VariableFunctions.add
    args = _add_args(2)
    plain = make(add, "torch.add", 2, None, args[:2], {}, False, "")
    assert plain is add
    scaled = make(add, "torch.add", 3, None, args[:2], {"alpha": args[2]}, False, "")
    assert scaled is not add
    torch.testing.assert_close(scaled(x, y, 2), torch.add(x, y, alpha=2))
    out = torch.empty(3)
    make(add, "torch.add", 2, None, args[:2], {}, True, "")(out, x, y)
    torch.testing.assert_close(out, x + y)
