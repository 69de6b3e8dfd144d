"""Example inputs for the ``bench``/``profile``/``inspect`` commands.

From the command line, one ``--input`` per positional argument of the model::

    SHAPE:DTYPE[:LOW..HIGH]     1x64:float32   8:int64:0..1000   Bx13:float32   :float32

``SHAPE`` is dimensions joined by ``x`` (empty for a 0-dim tensor); a dimension ``B`` is the
batch size (``--batch-sizes``). Floating-point tensors are drawn from a standard normal
distribution, integer ones uniformly from ``[LOW, HIGH)`` (default ``[0, 10)``), booleans
uniformly; all from a fixed seed. Or a file of example arguments: ``torch.save`` of a tuple
(or list) of positional arguments, loaded with ``weights_only=True`` (no code runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

_DTYPES = {
    name: getattr(torch, name)
    for name in ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16",
                 "int8", "uint8", "bool")
}
_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
            "int": "int32"}
_SPEC = re.compile(r"^(?P<shape>[0-9Bx]*):(?P<dtype>\w+)(?::(?P<low>-?\d+)\.\.(?P<high>-?\d+))?$")


class InputSpecError(ValueError):
    """An ``--input`` spec or an inputs file the command cannot use."""


@dataclass(frozen=True)
class InputSpec:
    """One tensor argument: its shape (``None`` for the batch dimension), dtype and, for
    integer dtypes, the range values are drawn from."""

    text: str
    shape: tuple[int | None, ...]
    dtype: torch.dtype
    low: int = 0
    high: int = 10

    @property
    def batched(self) -> bool:
        return None in self.shape

    def make(self, batch: int, generator: torch.Generator) -> torch.Tensor:
        shape = tuple(batch if d is None else d for d in self.shape)
        if self.dtype.is_floating_point:
            return torch.randn(shape, generator=generator).to(self.dtype)
        if self.dtype is torch.bool:
            return torch.randint(0, 2, shape, generator=generator).bool()
        return torch.randint(self.low, self.high, shape, generator=generator, dtype=self.dtype)


def parse_spec(text: str) -> InputSpec:
    m = _SPEC.match(text.strip())
    if m is None:
        raise InputSpecError(
            f"--input {text!r}: expected SHAPE:DTYPE[:LOW..HIGH], e.g. 1x64:float32, "
            "8:int64:0..1000 or Bx13:float32 (B = the batch size)")
    name = _ALIASES.get(m["dtype"], m["dtype"])
    if name not in _DTYPES:
        raise InputSpecError(f"--input {text!r}: unknown dtype {m['dtype']!r}; choose from "
                             f"{', '.join(_DTYPES)}")
    dims: list[int | None] = []
    for d in m["shape"].split("x") if m["shape"] else []:
        if d == "B":
            dims.append(None)
        elif d.isdigit():
            dims.append(int(d))
        else:
            raise InputSpecError(f"--input {text!r}: dimension {d!r} is neither a number nor B")
    low, high = (int(m["low"]), int(m["high"])) if m["low"] is not None else (0, 10)
    dtype = _DTYPES[name]
    if m["low"] is not None and (dtype.is_floating_point or dtype is torch.bool):
        raise InputSpecError(f"--input {text!r}: a range applies to integer dtypes only")
    if low >= high:
        raise InputSpecError(f"--input {text!r}: empty range {low}..{high}")
    return InputSpec(text, tuple(dims), dtype, low, high)


def make_inputs(specs: list[InputSpec], batch: int, seed: int = 0) -> tuple:
    generator = torch.Generator().manual_seed(seed)
    return tuple(s.make(batch, generator) for s in specs)


def load_inputs_file(path: str | Path) -> tuple:
    """The positional arguments saved in ``path`` (``torch.save((x, y), path)``)."""
    path = Path(path)
    if not path.is_file():
        raise InputSpecError(f"inputs file {str(path)!r} does not exist")
    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputSpecError(f"inputs file {str(path)!r} could not be loaded with "
                             f"torch.load(weights_only=True): {first}") from e
    if isinstance(value, list):
        value = tuple(value)
    if not isinstance(value, tuple):
        value = (value,)
    return value


def describe_inputs(args: tuple) -> str:
    def one(x):
        if isinstance(x, torch.Tensor):
            dims = "x".join(str(d) for d in x.shape)
            return f"{dims}:{str(x.dtype).removeprefix('torch.')}"
        if isinstance(x, (list, tuple)):
            inner = ", ".join(one(e) for e in x[:3])
            more = ", ..." if len(x) > 3 else ""
            return f"[{inner}{more}] ({len(x)})"
        return repr(x)

    return ", ".join(one(x) for x in args)
