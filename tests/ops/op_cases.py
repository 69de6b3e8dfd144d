"""Helpers for the operator case tables in ``tests/ops``.

A case is a model (a Python function with type annotations, or TorchScript source), a first
input set and a second input set of other shapes; the parametrized test of each module hands
it to ``differential.check``. ``ts("x, y", "x + y")`` compiles a one-line TorchScript
function whose unannotated parameters are tensors.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch


def ts(params: str, body: str) -> torch.jit.ScriptFunction:
    """The TorchScript function ``def f(<params>): return <body>``; bare parameter names are
    tensors. A body with several lines is used as the function body as it is.

    Compiled here rather than handed to ``check`` as source: ``differential.script`` strips
    the text, and TorchScript's lexer refuses source whose last line has no newline."""
    typed, depth, start = [], 0, 0
    for i, ch in enumerate(params + ","):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            p = params[start:i].strip()
            start = i + 1
            if p:
                typed.append(p if ":" in p else f"{p}: Tensor")
    if "\n" in body.strip():
        lines = body.strip("\n").splitlines()
        indent = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
        text = "\n".join("    " + ln[indent:] for ln in lines)
    else:
        text = f"    return {body}"
    return torch.jit.CompilationUnit(f"def f({', '.join(typed)}):\n{text}\n").f


def case(name: str, model: Any, first: list[Any], second: list[Any], *,
         xfail: str | None = None, **tol: Any) -> Any:
    """One parametrize entry: ``(model, first, second, tol)`` with ``name`` as its id;
    ``xfail`` gives the reason for a known runtime fault (strict: it must still fail)."""
    marks = [pytest.mark.xfail(reason=xfail, strict=True)] if xfail else []
    return pytest.param(model, first, second, tol, id=name, marks=marks)


def layout(expr: str, y: str = "x.transpose(0, 1)") -> torch.jit.ScriptFunction:
    """``expr`` of ``y`` (by default a transposed view of the input ``x``), returned with
    its layout.

    An out variant writes into a tensor the runtime resized; the result must still have the
    strides the functional op gives (observable through ``is_contiguous``, ``stride`` and
    ``view``), on the first call and on later ones with other shapes. ``z`` is returned
    through ``clone`` so that it stays an intermediate (``z * 1`` would not do: the
    TorchScript executor's peephole pass drops it, and a bool ``z`` then stays bool)."""
    return ts("x", f"""
        y = {y}
        z = {expr}
        return z.is_contiguous(), z.stride(), z.clone()
    """)


class Inputs:
    """Deterministic inputs for one test module (its own generator, so the values do not
    depend on which modules were imported before it)."""

    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=self.g).to(dtype)

    def rand(self, *shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return torch.rand(*shape, generator=self.g) * (high - low) + low

    def randint(self, low: int, high: int, *shape: int,
                dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.g, dtype=dtype)

    def bools(self, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=self.g) > 0.5

    def perm(self, n: int) -> torch.Tensor:
        return torch.randperm(n, generator=self.g)
