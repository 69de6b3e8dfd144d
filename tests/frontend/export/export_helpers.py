"""Helpers for the torch.export importer tests."""

import torch

from static_runtime.models.export import export_case


def exported(name: str, batch: int = 2) -> torch.export.ExportedProgram:
    """The built-in model ``name`` exported as its export case says (with its dynamic shapes)."""
    model, example, dynamic = export_case(name, batch=batch)
    return torch.export.export(model, example, dynamic_shapes=dynamic)
