"""The operators graph preparation introduces and ATen does not have: their schemas.

A pass that puts one of these into a graph (``passes/alpha.py``, ``fusion.py``,
``recurrent.py``) and the operator tier that runs it (``ops/native/``) both read the schema
from here, so the passes need nothing from the later ``ops/`` stage. The schema is what every
stage reads: alias analysis its annotations, the printer and parser its name.

Importing this module also declares each one as a PyTorch operator
(``torch.ops.static_runtime.attention``...), so a prepared graph printed and parsed back
(``ir.parser.resolve_kind``) finds its schema. Their meanings, the unfused operators they
replace, are registered as the PyTorch implementations by ``ops/`` (``implement_torch_ops``),
which is also where the fast kernels are.
"""

from __future__ import annotations

import torch

#: ``aten::add``/``aten::sub`` (``.Tensor`` and ``.Scalar``) whose ``alpha`` was the constant 1
#: (``passes/alpha.py``): overload → schema. Their outputs are fresh.
SPECIALIZED_SCHEMAS = {
    "static_runtime::add.Tensor": "static_runtime::add.Tensor(Tensor self, Tensor other) -> Tensor",
    "static_runtime::add.Scalar": "static_runtime::add.Scalar(Tensor self, Scalar other) -> Tensor",
    "static_runtime::sub.Tensor": "static_runtime::sub.Tensor(Tensor self, Tensor other) -> Tensor",
    "static_runtime::sub.Scalar": "static_runtime::sub.Scalar(Tensor self, Scalar other) -> Tensor",
}

#: ``matmul(softmax(matmul(query, key_t) * scale, dim), value)`` (``/ scale`` when ``divide``;
#: no scaling when ``scale`` is None).
ATTENTION = ("static_runtime::attention(Tensor query, Tensor key_t, Tensor value, Scalar? scale, "
             "bool divide, int dim) -> Tensor")
#: ``attention`` with a mask applied to the scaled scores as ``mask_kind`` says: ``"add"``
#: (``scores + mask``), ``"fill"`` (``masked_fill(mask, -inf)``), ``"keep"``
#: (``where(mask, scores, -inf)``).
MASKED_ATTENTION = ("static_runtime::masked_attention(Tensor query, Tensor key_t, Tensor value, "
                    "Scalar? scale, bool divide, int dim, Tensor mask, str mask_kind) -> Tensor")
#: ``conv2d`` followed by the activation ``attr`` names.
CONV2D_POINTWISE = ("static_runtime::conv2d_pointwise(Tensor input, Tensor weight, Tensor? bias, "
                    "int[] stride, int[] padding, int[] dilation, int groups, str attr) -> Tensor")
#: ``linear`` followed by the activation ``attr`` names.
LINEAR_POINTWISE = ("static_runtime::linear_pointwise(Tensor input, Tensor weight, "
                    "Tensor? bias, str attr) -> Tensor")
#: ``self`` in the memory layout eager gives the model's output from ``like``'s (contiguous,
#: or channels-last for a channels-last ``like``): where ``passes/layout.py`` ends a region
#: of channels-last activations.
LAYOUT_AS = "static_runtime::layout_as(Tensor(a) self, Tensor like) -> Tensor(a)"
#: ``aten::lstm.input`` / ``aten::gru.input`` whose weights are constants compiled into a
#: recurrence (``passes/recurrent.py``).
LSTM = ("static_runtime::lstm(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, "
        "int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) "
        "-> (Tensor, Tensor, Tensor)")
GRU = ("static_runtime::gru(Tensor input, Tensor hx, Tensor[] params, bool has_biases, "
       "int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) "
       "-> (Tensor, Tensor)")

#: LLaMA's / T5's RMS normalisation written as pow-mean-add-rsqrt-mul-mul (a cast of the
#: normalised value to ``dtype`` before the weight, where the model casts):
#: ``weight * (input * rsqrt(input.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)``.
RMS_NORM = ("static_runtime::rms_norm(Tensor input, Tensor weight, float eps, "
            "ScalarType? dtype=None) -> Tensor")

#: Lookups in ``len(rows)`` tables laid end to end in ``weight`` (table ``t``: the next
#: ``rows[t]`` rows), table ``t`` by the indices ``indices.select(1, first + t)``, the results
#: concatenated along dimension 1 (``passes/embeddings.py``): ``aten::embedding`` each, or
#: ``nn.functional.embedding_bag`` each (a 2-D input: bags of one size) with ``mode`` — or,
#: given ``end`` and ``step``, ``embedding_bag`` of the column flattened with the bag starts
#: ``arange(0, end, step)``, as an exported program computes them.
EMBEDDINGS = ("static_runtime::embeddings(Tensor indices, Tensor weight, int[] rows, "
              "int first) -> Tensor")
EMBEDDING_BAGS = ("static_runtime::embedding_bags(Tensor indices, Tensor weight, int[] rows, "
                  "int first, int mode, int? end=None, int? step=None) -> Tensor")
#: ``nn.functional.embedding_bag`` with ``mode`` in each table by the flat indices
#: ``indices.select(0, first + t)`` and bag starts ``offsets.select(0, first + t)`` (DLRM's),
#: the results stacked along dimension 1: ``(batch, tables, width)``.
EMBEDDING_BAG_ROWS = ("static_runtime::embedding_bag_rows(Tensor indices, Tensor offsets, "
                      "Tensor weight, int[] rows, int first, int mode) -> Tensor")

#: ``nn.functional.normalize`` with ``p=2``: ``input / input.norm(2, dim, keepdim=True)
#: .clamp_min(eps).expand_as(input)`` (``passes/norms.py``).
L2_NORMALIZE = "static_runtime::l2_normalize(Tensor input, int dim, float eps) -> Tensor"

#: A SwiGLU MLP's gate and up projections and their gated product (``passes/gated.py``):
#: ``silu(linear(input, gate_weight, gate_bias)) * linear(input, up_weight, up_bias)``.
GATED_LINEAR = ("static_runtime::gated_linear(Tensor input, Tensor gate_weight, "
                "Tensor? gate_bias, Tensor up_weight, Tensor? up_bias) -> Tensor")

#: ``act(linear(input, weight, bias) + residual)``, ``attr`` one of ``LINEAR_POSTOPS``' names
#: (``passes/residual.py``): a product and the residual added to it, as a transformer's
#: output projections and a recurrence ``tanh(W h + U x)`` make them.
LINEAR_RESIDUAL = ("static_runtime::linear_residual(Tensor input, Tensor weight, Tensor? bias, "
                   "Tensor residual, str attr) -> Tensor")

#: ``act(conv2d_pointwise(input, weight, bias, stride, padding, dilation, groups, "none")
#: + residual)``, ``attr`` one of ``CONV_POSTOPS``' names (``passes/residual.py``): a residual
#: block's last convolution, the shortcut added and the activation after it.
CONV2D_RESIDUAL = ("static_runtime::conv2d_residual(Tensor input, Tensor weight, Tensor? bias, "
                   "int[] stride, int[] padding, int[] dilation, int groups, Tensor residual, "
                   "str attr) -> Tensor")

#: ``self.index_add_(0, index, source * scale.unsqueeze(-1))``: a mixture of experts adding
#: each expert's output, weighted by its routing weights, back at its tokens' rows
#: (``passes/scatter.py``).
INDEX_ADD_SCALED = ("static_runtime::index_add_scaled_(Tensor(a!) self, Tensor index, "
                    "Tensor source, Tensor scale) -> Tensor(a!)")

#: ``x * cos + cat([-x.slice(dim, half), x.slice(dim, 0, half)], cat_dim) * sin``: rotary
#: position embeddings (LLaMA's ``rotate_half``, ``dim`` and ``cat_dim`` the last dimension
#: as the model spells it) applied to a query or key (``passes/rotary.py``).
ROTARY = ("static_runtime::rotary(Tensor x, Tensor cos, Tensor sin, int half, int dim, "
          "int cat_dim) -> Tensor")

#: ``bool(op(self, other))`` for ``op`` one of ``lt le gt ge eq ne`` and a constant number
#: ``other``: a data-dependent condition (``if x.mean() > 0``, ``while delta > tol``) as one
#: node, with no tensor made for the comparison (``passes/conditions.py``).
COMPARE_SCALAR = "static_runtime::compare_scalar(Tensor self, Scalar other, str op) -> bool"

#: Every schema this module declares.
SCHEMAS = (*SPECIALIZED_SCHEMAS.values(), ATTENTION, MASKED_ATTENTION, CONV2D_POINTWISE,
           LINEAR_POINTWISE, LAYOUT_AS, LSTM, GRU, RMS_NORM, EMBEDDINGS, EMBEDDING_BAGS,
           EMBEDDING_BAG_ROWS, COMPARE_SCALAR,
           L2_NORMALIZE, GATED_LINEAR, LINEAR_RESIDUAL, CONV2D_RESIDUAL, INDEX_ADD_SCALED,
           ROTARY)

#: Keeps the declarations alive (dropping a Library object deregisters its operators).
_LIBRARIES: list[torch.library.Library] = []


def qualified_name(schema: str) -> str:
    """``static_runtime::add.Tensor(...) -> ...`` → ``static_runtime::add.Tensor``."""
    return schema.split("(", 1)[0]


def _declared(name: str) -> bool:
    base, _, overload = name.split("::", 1)[1].partition(".")
    try:
        return (overload or "default") in getattr(torch.ops.static_runtime, base).overloads()
    except (AttributeError, RuntimeError):
        return False


def _declare() -> None:
    lib = torch.library.Library("static_runtime", "FRAGMENT")
    for schema in SCHEMAS:
        if not _declared(qualified_name(schema)):  # this module imported under another name
            lib.define(schema.split("::", 1)[1])
    _LIBRARIES.append(lib)


_declare()
