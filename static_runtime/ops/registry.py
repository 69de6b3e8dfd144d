"""The operator registry: implementations are a table, selection is an ordered claim.

For each node, in this order (the seed's "Registering Ops"):

1. an **out variant** — writes its result into a tensor the runtime hands it (the hook the
   memory planner uses); derived automatically from ATen's ``.out`` overloads, or hand-written;
2. a **native** implementation — Python code for views, containers, scalars, objects and
   control flow;
3. the **fallback** — the PyTorch operator resolved from the node's schema.

Nothing claims the node → ``UnsupportedOperatorError`` naming kind, schema and source line,
raised when the ``StaticModule`` is built, never in the middle of a request.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from static_runtime.ir import own_ops
from static_runtime.ir.graph import Node

#: the most out tensors' flattened views one operator's implementation keeps (the arena hands
#: the same out tensor on every call of a layout: ``selection._linear``, ``out_variants``)
FLAT_VIEWS = 1024


class Tier(enum.Enum):
    OUT = "out variant"
    NATIVE = "native"
    FALLBACK = "fallback"


#: Node kinds the executor runs itself (their sub-blocks are the executor's business).
CONTROL_FLOW = frozenset({"prim::If", "prim::Loop"})


@dataclass(frozen=True)
class OpImpl:
    """How to run one node.

    ``fn(*inputs)`` returns the node's output (one output), or a sequence of outputs (any
    other count; ignored when the node has none). For the OUT tier, ``out_fn(out, *inputs)``
    writes the result into the tensor ``out`` instead of allocating.
    """

    tier: Tier
    fn: Callable[..., Any] | None
    out_fn: Callable[..., Any] | None = None
    label: str = ""
    #: another form of ``fn`` taking an int list built in the graph as separate ints
    #: (``bindings.Spread``), for generated code; None if there is none
    spread: Any = None


@dataclass(frozen=True)
class InlineCall:
    """What an implementation that only forwards to a binding does, so generated code can
    call the binding itself and save a Python frame per node (~0.1 µs):
    ``target(*args, **kwargs[, out=<the out tensor>])``, each argument either the index of a
    node input (an ``int``) or a ``Const``; with ``as_list``, the result made a list."""

    target: Callable[..., Any]
    args: tuple[int | Const, ...]
    kwargs: tuple[tuple[str, int | Const], ...] = ()
    #: the keyword the out tensor is passed as (out variants), or None
    out: str | None = None
    as_list: bool = False


@dataclass(frozen=True)
class Const:
    """A constant argument of an ``InlineCall``."""

    value: Any


def inline_call(fn: Callable[..., Any]) -> InlineCall | None:
    """The ``InlineCall`` an implementation carries (``forwards``), or None."""
    return getattr(fn, "__sr_inline__", None)


def forwards(call: InlineCall) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark an implementation as doing exactly ``call``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__sr_inline__ = call  # type: ignore[attr-defined]
        return fn

    return deco


class UnsupportedOperatorError(RuntimeError):
    """No implementation can run a node."""

    def __init__(self, node: Node, reason: str = ""):
        where = f" at {node.source}" if node.source else ""
        schema = node.schema or "(no schema)"
        msg = f"no implementation for {node.kind}{where}; schema: {schema}"
        if reason:
            msg += f"; {reason}"
        super().__init__(msg)
        self.node_kind = node.kind
        self.schema = node.schema
        self.source = node.source


NativeFactory = Callable[[Node], Callable[..., Any] | None]
OutFactory = Callable[[Node], tuple[Callable[..., Any], Callable[..., Any]] | None]

#: ``factory(node, chooser, default)`` → an implementation or None: implementations that
#: pick their kernel by measurement (``ops/gemm.py``, ``ops/conv.py``), taking the place of
#: ``default`` — what selection gives otherwise, an ``(fn, out_fn)`` pair for an out variant
#: (and the factory returns a pair), a function for a native (and the factory returns a
#: function, or a pair where it brings an out variant of its own) — under
#: ``kernel_choice="measure"``.
MeasuredFactory = Callable[[Node, Any, Any], Any]

_out_variants: dict[str, OutFactory] = {}
_natives: dict[str, NativeFactory] = {}
_measured: dict[str, MeasuredFactory] = {}


def register_out_variant(*kinds: str) -> Callable[[OutFactory], OutFactory]:
    """Register a factory that, given a node, returns ``(fn, out_fn)`` or None to decline."""

    def deco(factory: OutFactory) -> OutFactory:
        for kind in kinds:
            if kind in _out_variants:
                raise ValueError(f"an out variant for {kind} is already registered")
            _out_variants[kind] = factory
        return factory

    return deco


def register_measured(*kinds: str) -> Callable[[MeasuredFactory], MeasuredFactory]:
    """Register a factory of kernels chosen by measurement (see ``MeasuredFactory``)."""

    def deco(factory: MeasuredFactory) -> MeasuredFactory:
        for kind in kinds:
            if kind in _measured:
                raise ValueError(f"a measured implementation of {kind} is already registered")
            _measured[kind] = factory
        return factory

    return deco


def register_native(*kinds: str) -> Callable[[NativeFactory], NativeFactory]:
    """Register a factory that, given a node, returns a callable or None to decline."""

    def deco(factory: NativeFactory) -> NativeFactory:
        for kind in kinds:
            if kind in _natives:
                raise ValueError(f"a native implementation of {kind} is already registered")
            _natives[kind] = factory
        return factory

    return deco


def select(node: Node, *, enable_out_variant: bool = True, fast_bindings: bool = True,
           variadic_sizes: bool = False, kernels: Any = None) -> OpImpl:
    """Choose the implementation of ``node``: out variant, native, fallback, in that order.

    ``fast_bindings``: derived out variants and the fallback call the operator through its
    Python binding where that provably runs the same overload (``ops/bindings.py``), else
    through ``torch.ops``. ``variadic_sizes`` (with ``fast_bindings``): a fallback taking an
    int list that a ``prim::ListConstruct`` builds also gets the form taking its elements
    (``OpImpl.spread``, ``bindings.bind_spread``). ``kernels``: a ``KernelChooser``
    (``ops/kernels.py``) — an out variant whose kernel is chosen by measurement
    (``ops/gemm.py``) then takes the place of the one selected otherwise."""
    # Importing the implementation modules registers them.
    from static_runtime.ops import (  # noqa: F401
        activations,
        attention,
        conv,
        conv1d,
        conv_plain,
        conv_residual,
        embeddings,
        fallback,
        gated,
        gemm,
        norms,
        out_variants,
        residual,
        rnn,
        rotary,
        scalar_operands,
        scatter,
        selection,
    )
    from static_runtime.ops.native import (  # noqa: F401
        conditions,
        containers,
        fused,
        layout,
        objects,
        prim,
        recurrent,
        region,
        scalars,
        specialized,
        tensors,
    )

    if node.kind in CONTROL_FLOW:
        return OpImpl(Tier.NATIVE, None, None, "control flow")
    factory = _out_variants.get(node.kind)
    pair = factory(node) if factory is not None else None
    if pair is None and enable_out_variant:
        pair = out_variants.derived(node, fast_bindings=fast_bindings)
    if pair is not None:
        measured = _measured.get(node.kind) if kernels is not None else None
        if measured is not None:
            pair = measured(node, kernels, pair) or pair
        fn, out_fn = pair
        if enable_out_variant:
            return OpImpl(Tier.OUT, fn, out_fn, _label(out_fn))
        # A hand-written out variant also brings its allocating form (the variadic cat and
        # stack have no other implementation): with out variants off, that is a native one.
        return OpImpl(Tier.NATIVE, fn, None, _label(fn))
    factory = _natives.get(node.kind)
    if factory is not None:
        fn = factory(node)
        if fn is not None:
            measured = _measured.get(node.kind) if kernels is not None else None
            if measured is not None:
                fn = measured(node, kernels, fn) or fn
            if isinstance(fn, tuple):
                # a measured kernel may bring an out variant the default lacks
                fn, out_fn = fn
                if enable_out_variant:
                    return OpImpl(Tier.OUT, fn, out_fn, _label(out_fn))
            return OpImpl(Tier.NATIVE, fn, None, _label(fn))
    fn, reason = fallback.resolve(node, fast_bindings=fast_bindings)
    if fn is not None:
        spread = _spread(node) if fast_bindings and variadic_sizes else None
        return OpImpl(Tier.FALLBACK, fn, None, _label(fn), spread)
    raise UnsupportedOperatorError(node, reason)


def evaluator(node: Node) -> Callable[..., Any] | None:
    """The callable ``select`` chooses for ``node`` when its result is returned, not written
    into a given tensor, or None if nothing claims it: how constant propagation
    (``passes.constant_propagation.NodeEvaluator``) runs a node on constants, so that a fold
    computes what the run would."""
    try:
        return select(node).fn
    except UnsupportedOperatorError:
        return None


def _spread(node: Node) -> Any:
    """The spread form of the first int-list input built by a ``prim::ListConstruct`` of
    ints, if a binding provably takes it (``bindings.bind_spread``)."""
    from static_runtime.ir import types as T
    from static_runtime.ops import bindings

    for i, v in enumerate(node.inputs):
        if (v.node.kind == "prim::ListConstruct" and v.node.inputs
                and all(e.type is T.Int for e in v.node.inputs)):
            return bindings.bind_spread(node, i, len(v.node.inputs))
    return None


def _label(fn: Callable[..., Any]) -> str:
    label = getattr(fn, "__sr_label__", None)
    if label is None and _is_static_builtin(fn):
        label = _builtin_labels.get(id(fn))
    return label or getattr(fn, "__qualname__", repr(fn))


#: Labels of C functions of modules and classes and of method descriptors (``torch.abs``,
#: ``TensorBase.view``), which take no attributes. They live as long as the module that
#: holds them, so their ids stay theirs.
_builtin_labels: dict[int, str] = {}


def _is_static_builtin(fn: Any) -> bool:
    if isinstance(fn, types.MethodDescriptorType):
        return True
    return (isinstance(fn, types.BuiltinFunctionType)
            and (fn.__self__ is None or isinstance(fn.__self__, (types.ModuleType, type))))


def hands_back(out_fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark an out variant that may hand back a result of its own rather than write ``out``
    (the kernel chosen for those arguments makes its own result: a convolution measured
    faster on oneDNN than on our kernel): its caller takes what it returns as the value, for
    that call, and keeps no view of ``out`` for it. ``out`` is then left as it was."""
    out_fn.__sr_hands_back__ = True  # type: ignore[attr-defined]
    return out_fn


def may_hand_back(out_fn: Any) -> bool:
    """Whether ``out_fn`` is marked by ``hands_back``."""
    return getattr(out_fn, "__sr_hands_back__", False)


def labelled(label: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Attach a human-readable description to an implementation (shown by ``describe``)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        try:
            fn.__sr_label__ = label  # type: ignore[attr-defined]
        except AttributeError:
            if _is_static_builtin(fn):
                _builtin_labels[id(fn)] = label
        return fn

    return deco


#: Keeps the implementations of ``implement_torch_ops`` alive (dropping a Library object
#: deregisters them).
_LIBRARIES: list[torch.library.Library] = []


#: schema of one of our own operators → its composite implementation (what it means, in
#: the memory layout its kernels give): what a run on meta or fake tensors calls, since a
#: kernel of ours may call one whose meta function gives other strides, or measure
MEANINGS: dict[str, Callable[..., Any]] = {}


#: ``namespace::name[.overload]`` → what a run on meta or fake tensors calls for it instead,
#: where a result's metadata is all it needs and the operator's own meta function costs much
#: more (an activation decomposed into refs over symbolic sizes: ~10 ms a node of a shape
#: program). Each gives exactly the dtype, shape and strides the operator's kernels give.
SHAPE_MEANINGS: dict[str, Callable[..., Any]] = {}


def implement_torch_ops(implementations: Iterable[tuple[str, Callable[..., Any]]]) -> None:
    """Give the operators graph preparation introduces (declared by ``ir/own_ops.py``) their
    meaning as PyTorch operators: ``(schema, composite implementation)`` pairs, the unfused
    operators each one replaces, so the fallback tier could run them. An operator that already
    has one (this module imported under another name) keeps it."""
    lib = torch.library.Library("static_runtime", "IMPL")
    for schema, impl in implementations:
        MEANINGS.setdefault(schema, impl)
        name = own_ops.qualified_name(schema)
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd"):
            continue
        lib.impl(name.split("::", 1)[1], impl, "CompositeExplicitAutograd")
    _LIBRARIES.append(lib)
