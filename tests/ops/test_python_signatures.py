"""The replay of PyTorch's argument parser on kinds of values: which signature a call surely
reaches, and where that depends on the values."""

from static_runtime.ops import python_signatures as P
from static_runtime.ops.python_signatures import Fit, Kind
from static_runtime.ops.signature_lists import signatures


def test_signature_strings_are_read_as_the_parser_reads_them():
    sig = P.parse_signature("add(Tensor input, Tensor other, *, Scalar alpha=1, Tensor? out=None)",
                            "add.Tensor", "add.out")
    assert [p.name for p in sig.params] == ["input", "other", "alpha", "out"]
    assert [p.kw_only for p in sig.params] == [False, False, True, True]
    assert sig.param("alpha").default == "1" and sig.param("alpha").optional
    assert sig.param("out").allow_none and sig.max_pos_args == 2
    assert sig.param("input").allow_numbers_as_tensors  # ``add`` takes numbers as tensors
    assert P.parse_signature("f(IntArrayRef[2] size)|deprecated", "f", None).deprecated


def test_replay_of_tensor_and_scalar_parameters():
    T, N = frozenset({P.Kind.TENSOR}), P.NUMBERS
    sigs = signatures("torch", "pow")
    # pow(Tensor, Tensor) first: a number exponent does not fit it, pow(Tensor, Scalar) does
    assert P.first_fit(sigs, [T, N], {}).base == "pow.Tensor_Scalar"
    assert P.first_fit(sigs, [T, T], {}).base == "pow.Tensor_Tensor"
    # add takes numbers as tensors: add(Tensor, number) is the .Tensor signature
    assert P.first_fit(signatures("torch", "add"), [T, N], {}).base == "add.Tensor"
    # eq does not: a number goes to eq.Scalar
    assert P.first_fit(signatures("torch", "eq"), [T, N], {}).base == "eq.Scalar"
    # a value that may be a tensor or None for clamp's first signature: no decision
    assert P.first_fit(signatures("torch", "clamp"), [T, N | {P.Kind.NONE}], {}) is None


def test_parser_reads_ints_as_the_list_only_for_a_lone_unsized_list():
    view = signatures("method", "view")
    ints = [frozenset({Kind.INT})] * 3
    assert P.first_fit(view, ints, {}).text.startswith("view(SymIntArrayRef")
    # ``torch.reshape(input, shape)`` has two positional parameters: no varargs reading.
    (reshape,) = signatures("torch", "reshape")
    assert P.parse_fit(reshape, [frozenset({Kind.TENSOR})] + ints, {}) is Fit.NO
