"""The built-in models (``builtin.py``) as ``torch.export`` takes them.

Six of the eight export as they are. Two use what only TorchScript (or eager Python) can run,
and are exported here from a rewrite with the same weights and the same results:

``control_flow``      ``if bool(x.sum() > 0)`` branches on data, which ``torch.export``
                      refuses (it cannot guard on a value it does not know); the loop's
                      trip count ``steps`` is an argument. Rewritten with ``torch.cond`` and
                      ``while_loop`` (a tensor counter), ``steps`` a symbolic int input.
``attribute_setter``  ``float(x.mean())`` makes a data-dependent Python float, which export
                      refuses likewise; and the forward's attribute writes (``self.b = 20``,
                      ``self.scaler.scale = ...``) are Python side effects that an exported
                      graph does not contain: export runs them once, while tracing. The
                      rewrite computes the same output with the scale kept a tensor; the
                      writes are not part of the program (nothing can export them).

``class_user`` exports as it is: export runs the TorchScript class as a Python class, and
its state never leaves the forward.

    from static_runtime.models.export import export_case
    model, inputs, dynamic_shapes = export_case("dlrm", batch=4)
    ep = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch._higher_order_ops.while_loop import while_loop
from torch.export import Dim

from static_runtime.models.builtin import MODELS, AttributeSetter, ControlFlowModel

__all__ = ["REWRITES", "AttributeSetterExportable", "ControlFlowExportable", "build_exportable",
           "dynamic_shapes_for", "export_case"]


class ControlFlowExportable(ControlFlowModel):
    """``ControlFlowModel`` with ``torch.cond`` for the data-dependent branch and
    ``while_loop`` for the loop (``steps`` stays a runtime argument)."""

    def forward(self, x: Tensor, steps: int = 8) -> Tensor:
        h = torch.cond(x.sum() > 0, lambda x: torch.relu(self.positive(x)),
                       lambda x: torch.tanh(self.negative(x)), (x,))

        def cond_fn(i: Tensor, h: Tensor) -> Tensor:
            return i < steps

        def body_fn(i: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
            return i + 1, 0.5 * h + torch.tanh(self.step(h)) * (i + 1) / steps

        _, h = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))
        return h


class AttributeSetterExportable(AttributeSetter):
    """``AttributeSetter``'s output with the scale kept a tensor (no ``float()``) and without
    the attribute writes, which an exported program cannot hold."""

    def forward(self, x: Tensor) -> Tensor:
        scale = x.mean() + 1.0
        return self.linear(x) * scale + 20


#: models whose forward ``torch.export`` refuses, and their exportable rewrites
REWRITES = {"control_flow": ControlFlowExportable, "attribute_setter": AttributeSetterExportable}


def build_exportable(name: str, seed: int = 0) -> torch.nn.Module:
    """The model ``name`` of ``MODELS`` (its rewrite where it has one), same weights as
    ``MODELS[name].build(seed)``, in eval mode."""
    spec = MODELS[name]
    factory = REWRITES.get(name, spec.factory)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = factory()
    return model.eval()


def dynamic_shapes_for(name: str, inputs: tuple) -> tuple:
    """``dynamic_shapes`` for ``inputs`` of model ``name``: the batch dimension symbolic
    (and DLRM's bag index lengths, ``control_flow``'s ``steps``)."""
    batch = Dim("batch", min=1, max=4096)
    if name == "dlrm":
        _, indices, _ = inputs
        return ({0: batch}, [{0: Dim(f"bag_{t}", min=1, max=1 << 20)} for t in
                             range(len(indices))], [{0: batch} for _ in indices])
    if name == "control_flow":
        return ({0: batch}, Dim.DYNAMIC)
    return ({0: batch},)


def export_case(name: str, batch: int = 2, seed: int = 0, steps: int = 8) -> tuple:
    """``(model, example_inputs, dynamic_shapes)`` to export model ``name`` with."""
    inputs = MODELS[name].example_inputs(batch=batch, seed=seed)
    if name == "control_flow":
        inputs = (*inputs, steps)
    return build_exportable(name, seed), inputs, dynamic_shapes_for(name, inputs)
