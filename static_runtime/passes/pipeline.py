"""``run_passes``: the ordered graph passes, each behind its option (PrepareForStaticRuntime)."""

from __future__ import annotations

from collections.abc import Callable

from static_runtime.ir.graph import Graph
from static_runtime.ir.verifier import verify
from static_runtime.passes.constant_propagation import NodeEvaluator

GraphPass = Callable[[Graph], bool]

#: Pass names (each is also a ``StaticModuleOptions`` field), in the order they run.
PASS_ORDER = (
    "inline", "remove_noops", "constant_propagation", "unroll_loops", "functionalize",
    "specialize_alpha",
    "batch_embeddings", "variadic_cat_stack", "merge_tuple_unpacks", "fuse_transformer_encoder",
    "scalarize_loop_counters", "fuse_scalar_compare", "plain_convolutions", "fold_batchnorm",
    "fuse_gated_linear",
    "fuse_linear_residual", "fuse_scaled_index_add", "fuse_rotary", "pack_linears",
    "fuse_attention",
    "fuse_rms_norm", "fuse_l2_normalize", "fuse_gelu", "causal_conv1d",
    "conv1d_as_2d", "fuse_convolution", "channels_last", "fuse_conv_residual", "fuse_linear_pointwise",
    "fuse_linear_activation",
    "compile_recurrent",
    "eliminate_dead_code", "fuse_regions", "inplace_activations",
)


#: Called after each pass that ran: ``(pass name, whether it changed the graph, the graph)``.
PassObserver = Callable[[str, bool, Graph], None]


def run_passes(graph: Graph, enabled: dict[str, bool], *, evaluate: NodeEvaluator,
               verify_each: bool = False, observer: PassObserver | None = None,
               measured_kernels: bool = False) -> list[str]:
    """Run the enabled passes in ``PASS_ORDER``, in place; return the names that changed it.
    ``evaluate`` says how a node runs on constants (``ops.registry.evaluator``: the stage after
    this one). ``observer`` (if given) sees the graph after each pass that ran.
    ``measured_kernels``: the nodes the passes make have their kernels chosen by measurement
    (a fusion that can lose with a fixed kernel is then made)."""
    from static_runtime.passes.registry import passes as registered

    passes = registered(evaluate, measured_kernels)
    changed: list[str] = []
    for name in PASS_ORDER:
        if not enabled.get(name, True) or name not in passes:
            continue
        did = bool(passes[name](graph))
        if did:
            changed.append(name)
        if verify_each:
            verify(graph)
        if observer is not None:
            observer(name, did, graph)
    return changed
