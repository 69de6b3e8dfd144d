"""Attention masks that mask nothing (run by ``constant_propagation``, after each round).

Where traced or scripted code passes ``attn_mask=None`` to ``scaled_dot_product_attention``,
an exported program often passes a mask made from constants: Hugging Face's mask helpers skip
the mask when TorchScript traces, but under ``torch.export`` build an all-``True`` one and
``expand`` it to the batch (ViT, wav2vec2). Given any mask, PyTorch's CPU kernel applies it to
every score (~9 µs more for 3 heads of 17 tokens, on ~12 µs of attention), so the mask is
replaced by ``None`` where that computes the same:

* the mask is a view of a view ... of a constant tensor (each an operator whose schema
  returns an alias of its first argument and writes nothing: ``expand``, ``view``,
  ``unsqueeze``, ``slice``...), so its elements are among the constant's;
* every element of the constant is ``True`` (a boolean mask: attend everywhere) or ``0`` (an
  additive float mask: a score plus 0 is the score);
* the frontend saw from the traced shapes that the mask does not widen the result
  (``MASK_WIDENS_NOTHING_META`` on the node: each mask dimension is 1 or the scores' size),
  so without it the result has the same shape. Without that fact the mask stays.
"""

from __future__ import annotations

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import MASK_WIDENS_NOTHING_META, Graph, Node, Value

_SDPA = ("aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
         "Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, "
         "float? scale=None, bool enable_gqa=False) -> Tensor")
_MASK = 3


def drop_noop_masks(graph: Graph) -> bool:
    """Replace each attention mask that masks nothing by ``None``; whether any was."""
    changed = False
    for node in list(graph.walk()):
        if (node.kind == "aten::scaled_dot_product_attention"
                and node.meta.get(MASK_WIDENS_NOTHING_META) and S.matches(node.schema, _SDPA)
                and len(node.inputs) > _MASK and _masks_nothing(node.inputs[_MASK])):
            none = graph.create("prim::Constant", output_types=[T.NoneT])
            none.insert_before(node)
            node.replace_input(_MASK, none.output)
            changed = True
    return changed


def is_view(node: Node) -> bool:
    """Whether ``node``'s one result is, by its schema, an alias of its first argument, and it
    writes nothing: the result's elements are among that argument's."""
    return (node.schema is not None and len(node.outputs) == 1 and bool(node.inputs)
            and S.parse(node.schema).views_first_argument())


def _masks_nothing(mask: Value) -> bool:
    while is_view(mask.node):
        mask = mask.node.inputs[0]
    if mask.node.kind != "prim::Constant":
        return False
    const = mask.node.attrs.get("value")
    if not isinstance(const, torch.Tensor) or const.layout is not torch.strided:
        return False
    if const.dtype is torch.bool:
        return bool(const.all())
    if const.is_floating_point():
        return bool((const == 0).all())
    return False
