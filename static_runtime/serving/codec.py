"""The JSON form of a request and of an answer, and its checks.

A request body is ``{"inputs": [ARG, ...], "kwargs": {NAME: ARG}}`` (both keys optional).
A tensor is ``{"dtype": "float32", "shape": [2, 16], "data": [...]}`` with ``data`` flat or
nested in row-major order; numbers, bools, strings, ``null``, lists and dicts of these are plain
JSON. An answer is ``{"outputs": [...]}`` in the same encoding (tensors with flat data), one
entry per output of the model (a tuple output gives several; any other one entry).

Nothing here needs Ray: the deployment, the CLI and the tests share it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

# The dtypes a request may name: the element types JSON numbers and bools can carry exactly.
DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "float64": torch.float64, "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
}
_NAMES = {v: k for k, v in DTYPES.items()}
_TENSOR_KEYS = {"dtype", "shape", "data"}


class RequestError(ValueError):
    """A request the server refuses before running the model (an HTTP 400); the message says
    which part of the request is wrong and how."""


def decode_request(body: Any) -> tuple[list, dict]:
    """``(args, kwargs)`` from a parsed JSON body; raises ``RequestError``."""
    if not isinstance(body, dict):
        raise RequestError(f"the body must be a JSON object with 'inputs' and/or 'kwargs', "
                           f"got {type(body).__name__}")
    unknown = sorted(set(body) - {"inputs", "kwargs"})
    if unknown:
        raise RequestError(f"unknown key(s) {unknown} in the body; expected 'inputs' "
                           "(a list) and/or 'kwargs' (an object)")
    inputs = body.get("inputs", [])
    kwargs = body.get("kwargs", {})
    if not isinstance(inputs, list):
        raise RequestError(f"'inputs' must be a list, got {type(inputs).__name__}")
    if not isinstance(kwargs, dict):
        raise RequestError(f"'kwargs' must be an object, got {type(kwargs).__name__}")
    args = [decode_value(v, f"inputs[{i}]") for i, v in enumerate(inputs)]
    kw = {k: decode_value(v, f"kwargs[{k!r}]") for k, v in kwargs.items()}
    return args, kw


def decode_value(value: Any, where: str) -> Any:
    """One argument: a tensor object becomes a tensor, containers are walked, scalars kept."""
    if isinstance(value, dict):
        if "dtype" in value or "shape" in value or "data" in value:
            return _decode_tensor(value, where)
        return {k: decode_value(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, list):
        return [decode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _decode_tensor(obj: dict, where: str) -> torch.Tensor:
    missing = sorted(_TENSOR_KEYS - set(obj))
    extra = sorted(set(obj) - _TENSOR_KEYS)
    if missing or extra:
        raise RequestError(f"{where}: a tensor is {{'dtype', 'shape', 'data'}}; "
                           + (f"missing {missing}" if missing else f"unknown key(s) {extra}"))
    name = obj["dtype"]
    if not isinstance(name, str) or name not in DTYPES:
        raise RequestError(f"{where}: unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    shape = obj["shape"]
    if (not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                       for d in shape)):
        raise RequestError(f"{where}: 'shape' must be a list of non-negative integers, "
                           f"got {shape!r}")
    data = obj["data"]
    flat: list = []
    if isinstance(data, list):
        _flatten(data, flat, where)
    elif isinstance(data, (int, float, bool)):
        flat.append(data)
    else:
        raise RequestError(f"{where}: 'data' must be a list (flat or nested) or a number, "
                           f"got {type(data).__name__}")
    numel = math.prod(shape)
    if len(flat) != numel:
        raise RequestError(f"{where}: shape {shape} holds {numel} element(s) but 'data' has "
                           f"{len(flat)}")
    dtype = DTYPES[name]
    if not dtype.is_floating_point and any(isinstance(x, float) for x in flat):
        raise RequestError(f"{where}: dtype {name} but 'data' has non-integer numbers")
    try:
        return torch.tensor(flat, dtype=dtype).reshape(shape)
    except (OverflowError, RuntimeError, TypeError) as e:
        raise RequestError(f"{where}: 'data' does not fit dtype {name} ({e})") from e


def _flatten(data: list, out: list, where: str) -> None:
    for x in data:
        if isinstance(x, list):
            _flatten(x, out, where)
        elif isinstance(x, (int, float)):  # bool is an int
            out.append(x)
        else:
            raise RequestError(f"{where}: 'data' must hold only numbers and bools, "
                               f"found {type(x).__name__}")


def encode_outputs(output: Any) -> dict:
    """The answer body for a model's return value."""
    items = output if isinstance(output, tuple) else (output,)
    return {"outputs": [encode_value(v) for v in items]}


def encode_value(value: Any) -> Any:
    """One value in the JSON form; raises ``TypeError`` for what JSON cannot carry."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.dtype not in _NAMES:
            raise TypeError(f"an output tensor has dtype {t.dtype}, which the JSON form does "
                            f"not carry (known: {', '.join(DTYPES)})")
        return {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                "data": t.reshape(-1).tolist()}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode_value(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"an output of type {type(value).__name__} has no JSON form")


def tensor_json(t: torch.Tensor) -> dict:
    """A tensor as a request argument (what a client sends)."""
    return encode_value(t)


def decode_outputs(body: dict) -> list:
    """The client side: the values of an answer ``{"outputs": [...]}``."""
    return [decode_value(v, f"outputs[{i}]") for i, v in enumerate(body["outputs"])]
