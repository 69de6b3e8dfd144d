"""Importers: models in the forms users hold them → an IR graph with its signature."""

from __future__ import annotations

import os
from typing import Any

import torch

from static_runtime.frontend.torchscript import FrontendError, import_torchscript
from static_runtime.ir.graph import Graph

__all__ = ["FrontendError", "import_model"]


def import_model(model: Any, *, freeze: bool = True) -> Graph:
    """Import any supported model form into a fresh IR graph."""
    if isinstance(model, Graph):
        from static_runtime.ir.parser import parse_graph
        from static_runtime.ir.printer import print_graph_with_constants

        text, constants = print_graph_with_constants(model)
        copy = parse_graph(text, constants)
        copy.signature = model.signature
        return copy
    if isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction, torch._C.Graph,
                          str, os.PathLike)):
        return import_torchscript(model, freeze=freeze)
    if isinstance(model, torch.nn.Module):
        raise FrontendError(
            f"{type(model).__name__} is a plain nn.Module: script it first "
            "(torch.jit.script(model)) or pass a TorchScript archive")
    raise FrontendError(
        f"cannot import a {type(model).__name__}: expected a torch.jit.ScriptModule, "
        "ScriptFunction, torch._C.Graph, a path to a TorchScript archive, or an IR Graph")
