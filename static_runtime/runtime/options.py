"""``StaticModuleOptions``: what a ``StaticModule`` does when it prepares and runs a model.

The seed's option names are kept where the seed has them (``enable_out_variant``,
``optimize_memory``, ``manage_output_tensors``). Every graph pass has its own switch, so a
wrong answer can be bisected to the pass that caused it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from static_runtime.passes.pipeline import PASS_ORDER

#: What ``StaticModuleOptions.fusion_compiler`` may be.
FUSION_COMPILERS = (None, "inductor")
#: What ``StaticModuleOptions.kernel_choice`` may be.
KERNEL_CHOICES = (None, "default", "measure")


@dataclass(frozen=True)
class StaticModuleOptions:
    #: Use out variants (write into tensors kept from the previous run) where one exists.
    enable_out_variant: bool = True
    #: Reuse intermediate tensors' memory between runs (needs ``enable_out_variant``).
    optimize_memory: bool = True
    #: "codegen" (generated straight-line Python, the default) or "interpreter" (the
    #: reference node loop).
    executor: str = "codegen"
    #: Call operators through their fastest Python binding (``torch._C._VariableFunctions``,
    #: ``torch._C._nn``, Tensor methods) instead of ``torch.ops`` overload objects.
    fast_bindings: bool = True
    #: Generated code passes an int list built in the graph (``prim::ListConstruct``) that
    #: only such calls read as separate ints where the binding provably reads them as that
    #: list: ``x.view(a, b, -1, 64)`` instead of ``x.view([a, b, -1, 64])`` (needs
    #: ``fast_bindings``).
    variadic_sizes: bool = True
    #: Also manage output tensors (issue 3; the default keeps outputs owned by the caller).
    manage_output_tensors: bool = False

    # -- graph preparation, one switch per pass (see ``static_runtime.passes``)
    inline: bool = True
    constant_propagation: bool = True
    eliminate_dead_code: bool = True
    remove_noops: bool = True
    variadic_cat_stack: bool = True
    merge_tuple_unpacks: bool = True
    specialize_alpha: bool = True
    functionalize: bool = True
    inplace_activations: bool = True
    #: lookups in constant tables by consecutive columns of one index tensor, concatenated
    #: (a recommender's sparse features: ``nn.Embedding``, or ``nn.EmbeddingBag`` of a 2-D
    #: input) → one lookup in the tables laid end to end (``passes/embeddings.py``)
    batch_embeddings: bool = True
    #: ``aten::_convolution``/``convolution`` as a trace records a convolution (not transposed,
    #: constant weight) → ``conv1d``/``conv2d``/``conv3d``, which the passes below fold and fuse
    #: (``passes/convolutions.py``)
    plain_convolutions: bool = True
    #: batch_norm (inference) after a convolution with constant weights → folded into them
    fold_batchnorm: bool = True
    #: sibling linears on one input (attention's Q/K/V, a gated MLP's gate and up) with
    #: constant weights under 512 × 512 → one linear and slices of its output, where every use
    #: of an output reads it as values only (``passes/packing.py``)
    pack_linears: bool = True
    #: matmul-(scale)-(mask)-softmax-matmul → scaled_dot_product_attention where measured
    #: faster (``passes/fusion.py``)
    fuse_attention: bool = True
    #: RMS normalisation written out (pow-mean-add-rsqrt-mul-mul) → one
    #: ``static_runtime::rms_norm`` node; only with ``kernel_choice="measure"``, which times
    #: our kernel for it (``passes/norms.py``)
    fuse_rms_norm: bool = True
    #: ``nn.functional.normalize(x, p=2)`` (norm, clamp_min, expand_as, div) → one
    #: ``static_runtime::l2_normalize`` node; only with ``kernel_choice="measure"``, which
    #: times our kernel for it (``passes/norms.py``)
    fuse_l2_normalize: bool = True
    #: a SwiGLU MLP's ``silu(linear(x, W_gate)) * linear(x, W_up)`` → one node whose kernel is
    #: measured (our product with the gated epilogue; ``passes/gated.py``), with
    #: ``kernel_choice="measure"``
    fuse_gated_linear: bool = True
    #: ``act(linear(x, W, b) + r)`` (a residual added to a product: transformers' output
    #: projections, recurrences) → one node whose kernel is measured (our product adding
    #: ``r`` in its epilogue; ``passes/residual.py``), with ``kernel_choice="measure"``
    fuse_linear_residual: bool = True
    #: ``self.index_add_(0, index, source * scale.unsqueeze(-1))`` (a mixture of experts'
    #: weighted scatter-add) → one node whose kernel is measured (our loop weighting each row
    #: as it adds it; ``passes/scatter.py``), with ``kernel_choice="measure"``
    fuse_scaled_index_add: bool = True
    #: rotary position embeddings, ``x * cos + rotate_half(x) * sin`` (LLaMA's query and key)
    #: → one node whose kernel is measured (``x * cos``, then our loop adding the rotated half
    #: times ``sin``; ``passes/rotary.py``), with ``kernel_choice="measure"``
    fuse_rotary: bool = True
    #: GELU's tanh approximation written out (GPT-2's gelu_new: eight operators) →
    #: ``aten::gelu(x, approximate="tanh")`` (``passes/gelu.py``)
    fuse_gelu: bool = True
    #: conv1d (stride 1) padded on both sides whose last ``padding`` outputs are sliced off (a
    #: TCN's causal convolution, "chomp") → conv1d of the input padded on the left only
    #: (``passes/causal.py``)
    causal_conv1d: bool = True
    #: chained 1-D convolutions (one's output reaching another through element-wise operators
    #: and pads) → 2-D convolutions of height 1, so that their activations stay channels-last
    #: from one to the next and their activations and residual adds fuse as a conv net's do
    #: (``passes/conv1d.py``); with fuse_convolution and channels_last only
    conv1d_as_2d: bool = True
    #: conv2d with constant weight (+ relu) → oneDNN prepacked, fused convolution
    fuse_convolution: bool = True
    #: activations kept channels-last from convolution to convolution, converted to eager's
    #: layout once where it can be seen (passes/layout.py); with fuse_convolution only. On
    #: by default: over the zoo's conv nets 0.41–1.05 × the time without it (UNet 0.41,
    #: ConvNeXt 0.78 at batch 1; MobileNet ~1 µs more for the conversion at its head)
    channels_last: bool = True
    #: ``act(conv(x) + r)`` (a residual block's last convolution, its shortcut and the
    #: activation after it) → one node whose kernel is measured (oneDNN's post-ops or our
    #: convolution adding ``r``; ``passes/residual.py``), with ``kernel_choice="measure"``
    fuse_conv_residual: bool = True
    #: linear with a constant float32 weight of 512 × 512 or more (+ the relu, gelu, tanh,
    #: sigmoid, hardswish, ReLU6 or silu after it) → one node that runs oneDNN's fused,
    #: prepacked linear from 8 rows on (0.4–0.9 × the time of addmm + activation there) and
    #: addmm + the activation in place below (benchmarks/onednn_postops.py --sweep)
    fuse_linear_pointwise: bool = True
    #: with ``kernel_choice="measure"``: a smaller linear and the activation after it → the
    #: same fused node, whose measured kernel applies the activation in its epilogue
    #: (``passes/fusion.py``)
    fuse_linear_activation: bool = True
    #: an exported nn.TransformerEncoderLayer → aten::_transformer_encoder_layer_fwd
    fuse_transformer_encoder: bool = True
    #: runs of small operators → ``static_runtime::fused_region`` (only with a
    #: ``fusion_compiler``; ``passes/regions.py``)
    fuse_regions: bool = True
    #: a loop of at most 16 trips fixed by a constant → its trips' copies, each with its
    #: counter a constant (selections of stacked constant weights fold; ``passes/unroll.py``)
    unroll_loops: bool = True
    #: a loop counter carried in a 0-dim int64 tensor (torch.export's while_loop) → an int
    scalarize_loop_counters: bool = True
    #: ``bool(x < c)`` for a constant number ``c`` (any of < <= > >= == !=) → one node that
    #: compares x's one value in Python, as ATen would (``passes/conditions.py``)
    fuse_scalar_compare: bool = True
    #: with ``fusion_compiler``: an LSTM/GRU layer with constant weights → compiled per input
    #: signature (``passes/recurrent.py``); does nothing while ``fusion_compiler`` is None
    compile_recurrent: bool = True

    #: Run the IR verifier after every pass (slower preparation; for debugging passes).
    verify_passes: bool = False
    #: Verify every memory plan (no two live tensors share bytes) when it is made.
    verify_memory_plans: bool = False
    #: Check each out variant against its functional form the first time it would write
    #: the arena (per node and its arguments' dtypes and ranks); one that disagrees runs
    #: functionally, with an ``OutVariantWarning`` (``runtime/checks.py``). Off: trusted.
    check_out_variants: bool = True
    #: How many arena layouts (one per input signature: shapes, dtypes) a module keeps, and
    #: how many functions specialised on a signature. A layout is metadata (~18 KB for a
    #: 2-layer BERT): traffic of every size re-plans only the sizes that fell out.
    plan_cache_size: int = 256
    #: With ``specialize_signature``: a signature gets code specialised on it once it made
    #: this many of the last 64 calls, built on a background thread; until then (and for a
    #: stream of many sizes, always) one generic function per set of arena values serves
    #: every size (``runtime/hot.py``). 0: each signature's code is specialised on its first
    #: call from the arena, while that call waits.
    specialize_after: int = 8
    #: Lay out a new input size without a recording call: once a signature structure
    #: (dtypes, ranks) has recorded, a background thread runs the graph on fake tensors with
    #: symbolic sizes and makes a *shape program* (``runtime/symbolic.py``) that gives every
    #: managed tensor's shape for any size its guards admit.
    shape_programs: bool = True
    #: "best" (the smallest arena of the three), "greedy_by_size", "greedy_by_lifetime" or
    #: "storage_groups".
    memory_planner: str = "best"
    #: Freeze TorchScript modules before import (the seed's freezing pass).
    freeze: bool = True
    #: At most this many runtimes in the module's pool (``mod(*args)`` borrows one per call
    #: in flight). 0, the default, sets no bound: the pool grows to the largest number of
    #: concurrent calls seen, each runtime with its own arena. With a bound, a call that finds
    #: every runtime busy blocks until another call returns one.
    max_runtimes: int = 0
    #: Intra-op threads (``torch.set_num_threads``) of the calling thread while a runtime of
    #: this module runs; the previous count is restored afterwards. 0 leaves torch's setting.
    #: See README, "Threads, pool and async", for what PyTorch makes per thread and what not.
    intra_op_threads: int = 0
    #: Generated code assumes what the input signature its guard checks fixes (shapes, dtypes,
    #: list lengths, int values): folds the metadata and branches they decide and leaves out
    #: the nodes that were only there for them. Does nothing with ``executor="interpreter"``.
    specialize_signature: bool = True
    #: Generated code takes views of arena tensors (``view``, ``transpose``, ``select``...
    #: with arguments fixed for the layout) once per memory layout instead of once per call
    #: (``runtime/hoist.py``). Does nothing with ``executor="interpreter"``.
    hoist_views: bool = True
    #: None, or "inductor": runs of small operators (element-wise, reductions, normalisations,
    #: with the views and casts between them) become ``static_runtime::fused_region`` nodes,
    #: each compiled by PyTorch's Inductor into fused kernels once per input signature
    #: (through Inductor's on-disk cache); recurrent layers likewise. Needs a C++ compiler;
    #: without one, or where Inductor refuses a region, a warning names it and it runs
    #: unfused. See README, "Fused regions".
    fusion_compiler: str | None = None
    #: "measure" (the default): GEMM-like nodes with a constant float32 weight (linear,
    #: addmm, mm, matmul, a linear fused with its activation), convolutions (fused or not), conv1d,
    #: LSTM/GRU layers and cells, scaled_dot_product_attention, layer, RMS and L2 norms and
    #: standalone GELU/tanh/sigmoid/SiLU get the fastest of their candidate kernels — ATen's,
    #: oneDNN's on a prepacked weight, MKL's packed GEMM, our own C kernels where a compiler
    #: built them — timed on this CPU on a new shape's first call (row counts up to the same
    #: power of two share a GEMM's choice), at most 20 ms a node and 1 s a module, and
    #: remembered on disk per CPU (``ops/kernels.py``; README, "Kernel choice by
    #: measurement"). "default" (or None): fixed rules (ATen's ``addmm``; oneDNN for a
    #: large fused linear from 8 rows on), nothing timed.
    kernel_choice: str | None = "measure"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            expected = {"bool": bool, "int": int, "str": str, "str | None": (str, type(None))}[
                f.type]
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise TypeError(f"StaticModuleOptions.{f.name} must be a {f.type}, "
                                f"got {type(value).__name__}")
        if self.plan_cache_size < 1:
            raise ValueError("StaticModuleOptions.plan_cache_size must be at least 1")
        if self.specialize_after < 0:
            raise ValueError("StaticModuleOptions.specialize_after must be 0 (specialise at "
                             f"once) or a number of calls, got {self.specialize_after}")
        if self.max_runtimes < 0:
            raise ValueError("StaticModuleOptions.max_runtimes must be 0 (no bound) or "
                             f"positive, got {self.max_runtimes}")
        if self.intra_op_threads < 0:
            raise ValueError("StaticModuleOptions.intra_op_threads must be 0 (leave torch's "
                             f"setting) or positive, got {self.intra_op_threads}")
        if self.executor not in ("codegen", "interpreter"):
            raise ValueError(f"StaticModuleOptions.executor must be 'codegen' or 'interpreter', "
                             f"got {self.executor!r}")
        if self.fusion_compiler not in FUSION_COMPILERS:
            raise ValueError(f"StaticModuleOptions.fusion_compiler must be one of "
                             f"{FUSION_COMPILERS}, got {self.fusion_compiler!r}")
        if self.kernel_choice not in KERNEL_CHOICES:
            raise ValueError(f"StaticModuleOptions.kernel_choice must be one of "
                             f"{KERNEL_CHOICES}, got {self.kernel_choice!r}")
        if self.memory_planner not in ("best", "greedy_by_size", "greedy_by_lifetime",
                                       "storage_groups"):
            raise ValueError(f"StaticModuleOptions.memory_planner must be 'best', "
                             f"'greedy_by_size', 'greedy_by_lifetime' or 'storage_groups', "
                             f"got {self.memory_planner!r}")

    def passes_enabled(self) -> dict[str, bool]:
        enabled = {name: getattr(self, name) for name in PASS_ORDER}
        enabled["fuse_regions"] = self.fuse_regions and self.fusion_compiler is not None
        enabled["compile_recurrent"] &= self.fusion_compiler is not None
        enabled["channels_last"] &= self.fuse_convolution
        enabled["conv1d_as_2d"] &= self.fuse_convolution and self.channels_last
        enabled["fuse_rms_norm"] &= self.kernel_choice == "measure"
        enabled["fuse_l2_normalize"] &= self.kernel_choice == "measure"
        enabled["fuse_gated_linear"] &= self.kernel_choice == "measure"
        enabled["fuse_linear_residual"] &= self.kernel_choice == "measure"
        enabled["fuse_conv_residual"] &= self.kernel_choice == "measure" and self.fuse_convolution
        enabled["fuse_scaled_index_add"] &= self.kernel_choice == "measure"
        enabled["fuse_rotary"] &= self.kernel_choice == "measure"
        enabled["fuse_linear_activation"] &= self.kernel_choice == "measure"
        return enabled
