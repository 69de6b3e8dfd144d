"""The execution plan: a prepared graph turned into processed nodes over one value array.

Built once per ``StaticModule`` and shared, read-only, by all its runtimes (the seed's
``ProcessedFunction``/``BlockInfo``). Every value of the graph, nested blocks included, gets
a slot in the runtime's value array; constants are baked into the initial array.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from static_runtime.ir import types as T
from static_runtime.ir.graph import Block, Graph, Node, Value
from static_runtime.ir.values import UnrepresentableConstant
from static_runtime.ops.registry import (
    OpImpl,
    Tier,
    UnsupportedOperatorError,
    may_hand_back,
    select,
)


class Control(enum.Enum):
    NONE = 0
    IF = 1
    LOOP = 2
    #: ``prim::fork``: its block runs on a launcher thread with its own values
    FORK = 3


@dataclass(frozen=True)
class ProcessedNode:
    node: Node
    kind: str
    impl: OpImpl
    fn: Callable[..., Any] | None
    out_fn: Callable[..., Any] | None
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    control: Control
    blocks: tuple[ProcessedBlock, ...]
    #: The single output is managed: it lives in the arena and ``out_fn`` writes it.
    managed: bool

    @property
    def tier(self) -> Tier:
        return self.impl.tier

    def where(self) -> str:
        loc = f" at {self.node.source}" if self.node.source else ""
        return f"{self.kind}{loc}"


@dataclass(frozen=True)
class ProcessedBlock:
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    nodes: tuple[ProcessedNode, ...]


@dataclass(frozen=True)
class ExecutionPlan:
    graph: Graph
    block: ProcessedBlock
    n_slots: int
    #: slot → constant value, filled into every runtime's value array once
    constants: dict[int, Any]
    #: slots cleared after each run (everything but constants and managed values)
    transient_slots: tuple[int, ...]
    #: slots of managed intermediates (arena tensors, kept between runs)
    managed_slots: tuple[int, ...]
    #: slots of managed outputs (written into the output arena; ``manage_output_tensors``)
    output_slots: tuple[int, ...]
    #: indices of graph outputs that may be containers outliving the call (copied on return)
    copied_outputs: tuple[int, ...]
    slot_of: dict[Value, int]

    def nodes(self) -> list[ProcessedNode]:
        """All processed nodes, nested ones included, in program order."""
        out: list[ProcessedNode] = []

        def walk(b: ProcessedBlock) -> None:
            for pn in b.nodes:
                out.append(pn)
                for sub in pn.blocks:
                    walk(sub)

        walk(self.block)
        return out

    def handing_back(self) -> frozenset[int]:
        """Managed values whose out variant may hand back a result of its own rather than
        write their arena tensor (``registry.hands_back``): no view of that tensor may be
        kept for them."""
        return frozenset(pn.outputs[0] for pn in self.nodes()
                         if pn.managed and may_hand_back(pn.out_fn))


def build_plan(graph: Graph, *, enable_out_variant: bool,
               managed: Callable[[Callable[[Node], bool]], tuple[set[Value], set[Value]]]
               | None,
               copied_outputs: tuple[int, ...] = (),
               fast_bindings: bool = True, variadic_sizes: bool = False,
               kernels: Any = None) -> ExecutionPlan:
    """Select an implementation for every node and lay the values out in slots.

    ``managed`` is given the out-variant predicate and returns the managed intermediates
    and the managed outputs (None: manage nothing). Raises ``UnsupportedOperatorError`` for the
    first node nothing can run. ``kernels``: a ``KernelChooser`` for the implementations
    whose kernel is chosen by measurement (``ops/gemm.py``), or None.
    """
    slot_of: dict[Value, int] = {}
    constants: dict[int, Any] = {}
    impls: dict[Node, OpImpl] = {}

    def slot(v: Value) -> int:
        if v not in slot_of:
            slot_of[v] = len(slot_of)
        return slot_of[v]

    for v in graph.inputs:
        slot(v)
    for node in graph.walk():
        if node.kind == "prim::Constant":
            value = node.attrs.get("value")
            if isinstance(value, UnrepresentableConstant) and node.output.uses:
                raise UnsupportedOperatorError(
                    node, f"the constant of type {value.type_str} cannot be held as a value")
            constants[slot(node.output)] = value
            continue
        if node.kind == "prim::fork":
            impls[node] = OpImpl(Tier.NATIVE, None, None, "fork")  # the executor's business
            continue
        impls[node] = select(node, enable_out_variant=enable_out_variant,
                             fast_bindings=fast_bindings, variadic_sizes=variadic_sizes,
                             kernels=kernels)

    intermediates: set[Value] = set()
    outputs: set[Value] = set()
    if managed is not None and enable_out_variant:
        intermediates, outputs = managed(lambda n: n in impls and impls[n].tier is Tier.OUT)
    in_arena = intermediates | outputs

    def process_block(block: Block) -> ProcessedBlock:
        inputs = tuple(slot(v) for v in block.inputs)
        nodes = []
        for node in block.nodes:
            if node.kind == "prim::Constant":
                continue
            impl = impls[node]
            control = {"prim::If": Control.IF, "prim::Loop": Control.LOOP,
                       "prim::fork": Control.FORK}.get(node.kind, Control.NONE)
            pn = ProcessedNode(
                node=node, kind=node.kind, impl=impl, fn=impl.fn, out_fn=impl.out_fn,
                inputs=tuple(slot(v) for v in node.inputs),
                outputs=tuple(slot(v) for v in node.outputs),
                control=control,
                blocks=tuple(process_block(b) for b in node.blocks),
                managed=len(node.outputs) == 1 and node.output in in_arena)
            nodes.append(pn)
        outputs = tuple(slot(v) for v in block.outputs)
        return ProcessedBlock(inputs, outputs, tuple(nodes))

    top = process_block(graph.block)
    managed_slots = tuple(sorted(slot_of[v] for v in intermediates))
    output_slots = tuple(sorted(slot_of[v] for v in outputs))
    keep = set(constants) | set(managed_slots) | set(output_slots)
    transient = tuple(s for s in range(len(slot_of)) if s not in keep)
    return ExecutionPlan(graph, top, len(slot_of), constants, transient, managed_slots,
                         output_slots, copied_outputs, slot_of)


def may_hold_list_or_dict(t: T.Type) -> bool:
    """Whether a value of type ``t`` may be or hold a list or dict.

    Such graph outputs are returned as new containers (``copy_containers``): a
    list the graph returns may be one that outlives the call (a module attribute the next
    call appends to), and copying a few references is cheaper than proving it is not."""
    if isinstance(t, (T.ListType, T.DictType)) or t is T.Any:
        return True
    if isinstance(t, T.TupleType):
        return any(may_hold_list_or_dict(e) for e in t.elems)
    if isinstance(t, (T.OptionalType, T.FutureType)):
        return may_hold_list_or_dict(t.elem)
    if isinstance(t, T.UnionType):
        return any(may_hold_list_or_dict(m) for m in t.members)
    return False


def map_nested(fn: Callable[[Any], Any], x: Any) -> Any:
    """``x`` with new lists, tuples and dicts all the way down, ``fn`` applied to the rest."""
    if isinstance(x, list):
        return [map_nested(fn, e) for e in x]
    if isinstance(x, tuple):
        return tuple(map_nested(fn, e) for e in x)
    if isinstance(x, dict):
        return {k: map_nested(fn, v) for k, v in x.items()}
    return fn(x)


def _same(x: Any) -> Any:
    return x


def copy_containers(x: Any) -> Any:
    """New lists, dicts and tuples all the way down; tensors and other objects as they are.

    Applied to outputs that may be (or hold) a container that outlives the call — an
    attribute of the module, say — so that the caller's result does not change when a later
    call writes into that container. The TorchScript interpreter's results are new Python
    containers likewise."""
    return map_nested(_same, x)
