"""Getting an ``ExportedProgram``: from a ``.pt2`` archive, or by exporting an ``nn.Module``
from example inputs (in eval mode), with errors that say what went wrong."""

from __future__ import annotations

import os
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch.export import ExportedProgram

from static_runtime.frontend.torchscript import FrontendError


def is_pt2(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a ``torch.export.save`` archive: a ``.pt2`` file, or a zip with
    the ``archive_format`` record that ``torch.export.save`` writes (a TorchScript archive
    has none)."""
    p = Path(path)
    if p.suffix == ".pt2":
        return True
    if not p.is_file() or not zipfile.is_zipfile(p):
        return False
    with zipfile.ZipFile(p) as z:
        return any(n.rsplit("/", 1)[-1] == "archive_format" for n in z.namelist())


def load_pt2(path: str | os.PathLike) -> ExportedProgram:
    """``torch.export.load`` with errors that say what is wrong with the file."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such torch.export archive: {p}")
    if p.is_dir():
        raise FrontendError(f"{p} is a directory, not a torch.export archive")
    try:
        return torch.export.load(str(p))
    except Exception as e:  # torch raises RuntimeError/ValueError/KeyError from deep inside
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FrontendError(
            f"{p} is not a torch.export archive that torch.export.load can read "
            f"({type(e).__name__}: {first[:200]})") from e


def export_module(module: torch.nn.Module, example_inputs: Any,
                  dynamic_shapes: Any = None) -> ExportedProgram:
    """``torch.export.export`` in eval mode; every submodule gets its own flag back."""
    if example_inputs is None:
        raise FrontendError(
            f"{type(module).__name__} is a plain nn.Module: give example_inputs= to export it "
            "with torch.export (or pass a torch.jit.script'ed module)")
    args, kwargs = split_example(example_inputs)
    was_training = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FrontendError(
            f"torch.export could not export {type(module).__name__} "
            f"({type(e).__name__}: {first[:300]})") from e
    finally:
        for m, training in was_training:
            m.training = training


def split_example(example_inputs: Any) -> tuple[tuple, dict]:
    """``example_inputs`` is a tuple of positional arguments, or ``(args, kwargs)``."""
    if (isinstance(example_inputs, tuple) and len(example_inputs) == 2
            and isinstance(example_inputs[0], tuple) and isinstance(example_inputs[1], dict)):
        return example_inputs[0], example_inputs[1]
    if isinstance(example_inputs, tuple):
        return example_inputs, {}
    if isinstance(example_inputs, list):
        return tuple(example_inputs), {}
    return (example_inputs,), {}

