"""``static_runtime::layout_as(self, like)``, which ``passes/layout.py`` puts where an
activation kept channels-last leaves its region: ``self`` in the memory format eager PyTorch
gives a convolution's output for an input like ``like`` — channels-last when ``like`` is a
4-D tensor with channels-last strides that is not also contiguous (ATen's
``suggest_memory_format``) and ``self`` is 4-D, contiguous otherwise. ``self`` itself when it already is (so the
output may alias it, as the schema says), else one copy."""

from __future__ import annotations

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import LAYOUT_AS
from static_runtime.ops.registry import implement_torch_ops, labelled, register_native

_CL = torch.channels_last
_CONTIGUOUS = torch.contiguous_format


def eager_format(like: torch.Tensor) -> torch.memory_format:
    """The memory format of eager ``conv2d``'s output for the input ``like``."""
    if like.dim() == 4 and not like.is_contiguous() and like.is_contiguous(memory_format=_CL):
        return _CL
    return _CONTIGUOUS


def layout_as_reference(self: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if self.dim() != 4:  # (a rank broadcast up inside the region: no 4-D format applies)
        return self.contiguous()
    return self.contiguous(memory_format=eager_format(like))


@register_native("static_runtime::layout_as")
def _layout_as(node: Node):
    if node.schema != LAYOUT_AS:
        return None
    cl, contiguous = _CL, _CONTIGUOUS

    @labelled("to eager's memory format (channels-last activations leave their region)")
    def layout_as(x, like):
        if x.dim() == 4 and like.dim() == 4 and not like.is_contiguous() \
                and like.is_contiguous(memory_format=cl):
            return x.contiguous(memory_format=cl)
        return x.contiguous(memory_format=contiguous)

    return layout_as


implement_torch_ops(((LAYOUT_AS, layout_as_reference),))
