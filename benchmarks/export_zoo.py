"""The model zoo through both frontends (issue 19): each ``benchmarks.zoo`` model exported with
``torch.export`` as a served model would be — a symbolic batch, and a symbolic sequence length
for token inputs — next to its own TorchScript module (``scripted()``: traced or scripted).

Which dimensions are symbolic is read from the zoo's inputs, not from model names: a dimension
whose size differs between ``inputs(2)`` and ``inputs(3)`` is the batch (``Dim("batch")``),
and dimension 1 of a 2-D integer tensor (token ids, masks) is a sequence (one ``Dim`` per
distinct length: an encoder-decoder's source and target lengths differ). If ``torch.export``
refuses that, the sequences are made static, then everything; ``ExportCase.dims`` says which
form was exported.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch.export import Dim

from benchmarks.zoo import ZOO

MAX_BATCH, MAX_SEQ = 1024, 128


@dataclass
class ExportCase:
    """A zoo model's eager module, its TorchScript module and its exported program;
    ``dims`` names the symbolic dimensions the program was exported with."""

    name: str
    eager: torch.nn.Module
    scripted: torch.jit.ScriptModule
    program: torch.export.ExportedProgram
    dims: str


def _dynamic_shapes(name: str, with_seq: bool, with_batch: bool) -> tuple | None:
    small, large = ZOO[name].inputs(2), ZOO[name].inputs(3)
    batch = Dim("batch", min=1, max=MAX_BATCH)
    seqs: dict[int, Dim] = {}
    spec = []
    for i, (a, b) in enumerate(zip(small, large, strict=True)):
        if not isinstance(a, torch.Tensor):
            spec.append(None)
            continue
        dims = {}
        for d, (sa, sb) in enumerate(zip(a.shape, b.shape, strict=True)):
            if with_batch and sa != sb:  # sizes that follow the batch without being it too
                dims[d] = batch if sa == 2 and sb == 3 else Dim(f"n{i}_{d}", min=1)
        if with_seq and a.dim() == 2 and not a.is_floating_point() and 1 not in dims:
            size = a.shape[1]
            seqs.setdefault(size, Dim(f"seq{size}", min=2, max=MAX_SEQ))
            dims[1] = seqs[size]
        spec.append(dims or None)
    return tuple(spec) if any(spec) else None


def export_case(name: str, batch: int = 2) -> ExportCase:
    """Export zoo model ``name`` from a batch of 2 (a batch of 1 would specialise it), with the
    most symbolic form ``torch.export`` accepts; a program with no symbolic size is exported
    from ``inputs(batch)`` instead, to take that batch."""
    m = ZOO[name]
    eager = m.eager()
    error: Exception | None = None
    for with_seq, with_batch in ((True, True), (False, True), (False, False)):
        shapes = _dynamic_shapes(name, with_seq, with_batch)
        example = m.inputs(2 if shapes else batch)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ep = torch.export.export(eager, example, dynamic_shapes=shapes)
        except Exception as e:  # noqa: BLE001 - export refusals come in many types
            error = e
            continue
        names = sorted({d.__name__ for dims in shapes or () if dims for d in dims.values()})
        return ExportCase(name, eager, m.scripted(), ep, "+".join(names) or "static")
    raise RuntimeError(f"{name}: torch.export refused every form") from error
