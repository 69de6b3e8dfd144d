"""Pass name → pass function; the names are ``StaticModuleOptions`` fields."""

from __future__ import annotations

import functools
from collections.abc import Callable

from static_runtime.ir.graph import Graph
from static_runtime.passes.alpha import specialize_alpha
from static_runtime.passes.causal import causal_conv1d
from static_runtime.passes.conditions import fuse_scalar_compare
from static_runtime.passes.constant_propagation import NodeEvaluator, constant_propagation
from static_runtime.passes.conv1d import conv1d_as_2d
from static_runtime.passes.convolutions import plain_convolutions
from static_runtime.passes.counters import scalarize_loop_counters
from static_runtime.passes.dead_code import eliminate_dead_code
from static_runtime.passes.embeddings import batch_embeddings
from static_runtime.passes.fold import fold_batchnorm
from static_runtime.passes.functionalize import functionalize
from static_runtime.passes.fusion import (
    fuse_attention,
    fuse_convolution,
    fuse_linear_activation,
    fuse_linear_pointwise,
)
from static_runtime.passes.gated import fuse_gated_linear
from static_runtime.passes.gelu import fuse_gelu
from static_runtime.passes.inline import inline
from static_runtime.passes.inplace import inplace_activations
from static_runtime.passes.layout import channels_last
from static_runtime.passes.noops import remove_noops
from static_runtime.passes.norms import fuse_l2_normalize, fuse_rms_norm
from static_runtime.passes.packing import pack_linears
from static_runtime.passes.recurrent import compile_recurrent
from static_runtime.passes.regions import fuse_regions
from static_runtime.passes.residual import fuse_conv_residual, fuse_linear_residual
from static_runtime.passes.rotary import fuse_rotary
from static_runtime.passes.scatter import fuse_scaled_index_add
from static_runtime.passes.transformer import fuse_transformer_encoder
from static_runtime.passes.tuples import merge_tuple_unpacks
from static_runtime.passes.unroll import unroll_loops
from static_runtime.passes.variadic import variadic_cat_stack


def passes(evaluate: NodeEvaluator, measured_kernels: bool = False
           ) -> dict[str, Callable[[Graph], bool]]:
    """Each pass as a function of the graph alone; ``constant_propagation`` runs nodes on
    constants with ``evaluate``; ``measured_kernels``: the nodes made will have their kernels
    chosen by measurement (``kernel_choice="measure"``)."""
    return {
        "inline": inline,
        "remove_noops": remove_noops,
        "constant_propagation": functools.partial(constant_propagation, evaluate=evaluate),
        "unroll_loops": functools.partial(unroll_loops, evaluate=evaluate),
        "functionalize": functionalize,
        "specialize_alpha": specialize_alpha,
        "batch_embeddings": batch_embeddings,
        "variadic_cat_stack": variadic_cat_stack,
        "merge_tuple_unpacks": merge_tuple_unpacks,
        "fuse_transformer_encoder": fuse_transformer_encoder,
        "scalarize_loop_counters": scalarize_loop_counters,
        "fuse_scalar_compare": fuse_scalar_compare,
        "plain_convolutions": plain_convolutions,
        "fold_batchnorm": fold_batchnorm,
        "fuse_gated_linear": fuse_gated_linear,
        "fuse_linear_residual": fuse_linear_residual,
        "fuse_scaled_index_add": fuse_scaled_index_add,
        "fuse_rotary": fuse_rotary,
        "pack_linears": pack_linears,
        "fuse_attention": functools.partial(fuse_attention, any_query=measured_kernels),
        "fuse_rms_norm": fuse_rms_norm,
        "fuse_l2_normalize": fuse_l2_normalize,
        "fuse_gelu": fuse_gelu,
        "causal_conv1d": causal_conv1d,
        "conv1d_as_2d": conv1d_as_2d,
        "fuse_convolution": fuse_convolution,
        "channels_last": channels_last,
        "fuse_conv_residual": fuse_conv_residual,
        "fuse_linear_pointwise": fuse_linear_pointwise,
        "fuse_linear_activation": fuse_linear_activation,
        "compile_recurrent": compile_recurrent,
        "eliminate_dead_code": eliminate_dead_code,
        "fuse_regions": fuse_regions,
        "inplace_activations": inplace_activations,
    }
