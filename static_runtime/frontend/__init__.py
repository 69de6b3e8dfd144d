"""Importers: models in the forms users hold them → an IR graph with its signature."""

from __future__ import annotations

import os
from typing import Any

import torch

from static_runtime.frontend.export import import_export, is_pt2
from static_runtime.frontend.torchscript import FrontendError, import_torchscript
from static_runtime.ir.graph import Graph

__all__ = ["FrontendError", "import_model"]


def import_model(model: Any, *, freeze: bool = True, example_inputs: Any = None,
                 dynamic_shapes: Any = None) -> Graph:
    """Import any supported model form into a fresh IR graph.

    ``example_inputs`` and ``dynamic_shapes`` are for a plain ``nn.Module``, which is exported
    with ``torch.export`` from them; other forms ignore them."""
    if isinstance(model, Graph):
        from static_runtime.ir.parser import parse_graph
        from static_runtime.ir.printer import print_graph_with_constants

        text, constants = print_graph_with_constants(model)
        copy = parse_graph(text, constants)
        copy.signature = model.signature
        return copy
    if isinstance(model, torch.export.ExportedProgram):
        return import_export(model)
    if isinstance(model, (str, os.PathLike)) and is_pt2(model):
        return import_export(model)
    if isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction, torch._C.Graph,
                          str, os.PathLike)):
        return import_torchscript(model, freeze=freeze)
    if isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise FrontendError(
                f"{type(model).__name__} is a plain nn.Module: give example_inputs= so it can "
                "be exported with torch.export, or script it (torch.jit.script(model))")
        return import_export(model, example_inputs=example_inputs,
                             dynamic_shapes=dynamic_shapes)
    raise FrontendError(
        f"cannot import a {type(model).__name__}: expected a torch.jit.ScriptModule, "
        "ScriptFunction, torch._C.Graph, a path to a TorchScript or torch.export (.pt2) "
        "archive, a torch.export.ExportedProgram, an nn.Module with example_inputs, or an IR "
        "Graph")
