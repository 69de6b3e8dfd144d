"""The JSON form of requests and answers (``serving.codec``): tensors round-trip exactly for
every dtype, nested and flat data mean the same, and each malformed part of a body is refused
with a message naming it. No Ray needed."""

from __future__ import annotations

import json

import pytest
import torch

from static_runtime.serving import codec
from static_runtime.serving.codec import RequestError


@pytest.mark.parametrize("name", sorted(codec.DTYPES))
def test_tensor_round_trip_every_dtype(name):
    dtype = codec.DTYPES[name]
    for shape in [(2, 3), (4,), (0, 5), ()]:
        t = (torch.arange(max(1, torch.Size(shape).numel())) % 3)[:torch.Size(shape).numel()]
        t = t.reshape(shape).to(dtype)
        wire = json.loads(json.dumps(codec.encode_outputs(t)))
        (back,) = codec.decode_outputs(wire)
        assert back.dtype == dtype and back.shape == t.shape
        torch.testing.assert_close(back, t, rtol=0, atol=0)


def test_nested_and_flat_data_agree_and_plain_values_pass():
    flat = {"dtype": "float32", "shape": [2, 2], "data": [1, 2, 3, 4]}
    nested = {"dtype": "float32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}
    args, kwargs = codec.decode_request({"inputs": [flat, 3, "s", True, None, [nested, 1.5]],
                                         "kwargs": {"k": {"a": nested}}})
    torch.testing.assert_close(args[0], torch.tensor([[1.0, 2], [3, 4]]))
    assert args[1:5] == [3, "s", True, None]
    torch.testing.assert_close(args[5][0], args[0])
    assert args[5][1] == 1.5
    torch.testing.assert_close(kwargs["k"]["a"], args[0])
    assert codec.decode_request({}) == ([], {})


def test_outputs_tuple_list_dict_scalars():
    out = (torch.ones(2), [torch.zeros(1, dtype=torch.int64), 3], {"a": 2.5, "b": "x"})
    wire = codec.encode_outputs(out)
    assert wire["outputs"][1][1] == 3 and wire["outputs"][2] == {"a": 2.5, "b": "x"}
    back = codec.decode_outputs(json.loads(json.dumps(wire)))
    torch.testing.assert_close(back[0], out[0])
    assert back[1][0].dtype == torch.int64
    with pytest.raises(TypeError, match="complex64"):
        codec.encode_outputs(torch.ones(2, dtype=torch.complex64))


@pytest.mark.parametrize("body, words", [
    ([1], "must be a JSON object"),
    ({"inputs": 3}, "'inputs' must be a list"),
    ({"kwargs": []}, "'kwargs' must be an object"),
    ({"input": []}, "unknown key"),
    ({"inputs": [{"dtype": "float99", "shape": [1], "data": [1]}]}, "unknown dtype 'float99'"),
    ({"inputs": [{"dtype": "float32", "shape": [2, 3], "data": [1, 2]}]},
     "inputs[0]: shape [2, 3] holds 6 element(s) but 'data' has 2"),
    ({"inputs": [{"dtype": "float32", "shape": [2], "data": [[1], [2, 3]]}]}, "has 3"),
    ({"inputs": [{"dtype": "float32", "shape": [-1], "data": [1]}]}, "non-negative"),
    ({"inputs": [{"dtype": "float32", "shape": [1]}]}, "missing ['data']"),
    ({"inputs": [{"dtype": "float32", "shape": [1], "data": ["a"]}]}, "only numbers"),
    ({"inputs": [{"dtype": "int64", "shape": [1], "data": [1.5]}]}, "non-integer"),
    ({"inputs": [{"dtype": "int8", "shape": [1], "data": [1000]}]}, "does not fit dtype int8"),
    ({"kwargs": {"x": {"dtype": "float32", "shape": [1], "data": "1"}}}, "kwargs['x']"),
])
def test_bad_requests_name_what_is_wrong(body, words):
    with pytest.raises(RequestError) as info:
        codec.decode_request(body)
    assert words in str(info.value)


def test_non_finite_floats_round_trip():
    t = torch.tensor([float("inf"), float("-inf"), float("nan"), 1.5])
    wire = json.loads(json.dumps(codec.encode_outputs(t)))
    (back,) = codec.decode_outputs(wire)
    torch.testing.assert_close(back, t, equal_nan=True)
