"""The fake-tensor run of shape programs: a plan's nodes run on fake tensors whose sizes are
symbols, sizes held in 0-dim tensors followed as the integers they are, and ``Unsupported``
raised (with the reason) wherever the run cannot follow what the sizes depend on."""

from __future__ import annotations

from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.passes.effects import has_side_effects, is_nondeterministic
from static_runtime.runtime.hot import yield_to_requests
from static_runtime.runtime.plan import Control, ProcessedBlock, ProcessedNode
from static_runtime.runtime.specialize import meta_callable

_OWN_NAMESPACES = frozenset({"aten", "prim", "static_runtime"})
#: 0-dim tensors holding a size (``prim::NumToTensor``): arithmetic the run follows on them
_SIZE_ARITHMETIC = {
    "aten::add": lambda a, b, alpha=1: a + alpha * b,
    "static_runtime::add": lambda a, b, alpha=1: a + alpha * b,
    "aten::sub": lambda a, b, alpha=1: a - alpha * b,
    "static_runtime::sub": lambda a, b, alpha=1: a - alpha * b,
    "aten::rsub": lambda a, b, alpha=1: b - alpha * a,
    "aten::mul": lambda a, b: a * b,
    "aten::floor_divide": lambda a, b: a // b,
    # (integer ``remainder`` takes the divisor's sign, as Python's ``%``: a window's padding,
    # ``(w - n % w) % w``)
    "aten::remainder": lambda a, b: a % b,
}
#: reading a number out of a tensor
_READS = frozenset({"aten::Int", "aten::ScalarImplicit", "aten::item", "aten::Float"})


class Unsupported(Exception):
    """The plan cannot be followed symbolically; the message says where and why."""



def stand_in(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.layout == torch.strided and x.device.type == "cpu":
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
    return x


def fake_constant(mode: Any, const: Any) -> Any:
    # a fake copy: an implementation that recognises its own constant by identity (to use a
    # prepacked form) must take its general path here
    if isinstance(const, torch.Tensor):
        return mode.from_tensor(const, static_shapes=True)
    if isinstance(const, list):
        return [fake_constant(mode, c) for c in const]
    if isinstance(const, tuple):
        return tuple(fake_constant(mode, c) for c in const)
    return const


def holds_tensor(x: Any) -> bool:
    if isinstance(x, (list, tuple)):
        return any(holds_tensor(e) for e in x)
    if isinstance(x, dict):
        return any(holds_tensor(e) for e in x.values())
    return isinstance(x, torch.Tensor)


class Runner:
    """Runs a plan's nodes on fake tensors, following sizes held in 0-dim tensors."""

    def __init__(self, values: list[Any], constants: Any = (), inputs: Any = ()):
        self.values = values
        #: the plan's constant slots
        self.constants = frozenset(constants)
        #: id of a 0-dim fake tensor → the size it holds (a SymInt or int), and the tensor
        #: (kept so the id stays its own)
        self.sizes: dict[int, tuple[Any, torch.Tensor]] = {}
        self.where = ""
        #: ``prim::If`` node → the branch the run took (decided under the guards)
        self.taken: dict[Any, int] = {}
        #: the slots the run defined, in order
        self.produced: list[int] = []
        #: slots whose value the input signature alone decides (computed from constants,
        #: sizes and the structure's non-tensor inputs, never from a tensor's data)
        self.signature_only: set[int] = set(inputs)
        #: how many loops the run is inside
        self.looping = 0

    def block(self, block: ProcessedBlock) -> None:
        pause = yield_to_requests()
        for pn in block.nodes:
            self.where = pn.where()
            self.node(pn)
            pause()

    def node(self, pn: ProcessedNode) -> None:
        values = self.values
        if pn.control is Control.IF:
            k = 0 if bool(values[pn.inputs[0]]) else 1
            if not self.looping:
                self.taken[pn.node] = k  # (in a loop body it may differ per iteration)
            taken = pn.blocks[k]
            self.block(taken)
            for out, inner in zip(pn.outputs, taken.outputs):
                values[out] = values[inner]
            if not self.looping:
                self.produced.extend(pn.outputs)
            return
        if pn.control is Control.LOOP:
            return self.loop(pn)
        if pn.control is not Control.NONE:
            raise Unsupported(f"{pn.where()}: forks are not followed")
        node = pn.node
        if node.kind == "prim::RaiseException":
            raise Unsupported(f"{pn.where()}: the sizes reach a raise")
        if is_nondeterministic(node):
            raise Unsupported(f"{pn.where()}: a random operator")
        if has_side_effects(node):
            if pn.outputs:
                raise Unsupported(f"{pn.where()}: an operator with effects")
            return  # a warning or a print: nothing the sizes need
        if node.schema is not None and S.parse(node.schema).namespace not in _OWN_NAMESPACES:
            raise Unsupported(f"{pn.where()}: a user's operator is never run at preparation")
        args = [values[i] for i in pn.inputs]
        result = self.follow_size(pn, args)
        if result is _NOT_A_SIZE:
            tensor_out = any(isinstance(v.type, T.TensorType) for v in node.outputs)
            fn = meta_callable(pn) if (tensor_out and node.schema is not None) else (
                getattr(pn.fn, "meta", pn.fn))
            if fn is None:
                raise Unsupported(f"{pn.where()}: no implementation")
            result = fn(*args)
        if len(pn.outputs) == 1:
            values[pn.outputs[0]] = result
        else:
            for out, x in zip(pn.outputs, result):
                values[out] = x
        if self.looping:
            return  # (a body's values differ per iteration: never folded or kept)
        self.produced.extend(pn.outputs)
        if pn.kind.split(".")[0] in _METADATA or all(
                i in self.signature_only or i in self.constants for i in pn.inputs):
            self.signature_only.update(pn.outputs)

    def loop(self, pn: ProcessedNode) -> None:
        """A loop, iteration by iteration (a scripted ``interpolate`` loops over the spatial
        dimensions): its trip count and conditions are decided under the guards, as a
        branch is. What its body computes is neither folded nor kept; its results are
        produced like any node's."""
        values = self.values
        limit, cond = values[pn.inputs[0]], values[pn.inputs[1]]
        if isinstance(limit, torch.SymInt):
            # (following it would pin the size to this run's: a program for one size)
            raise Unsupported(f"{pn.where()}: a loop whose trip count is a size")
        carried = [values[i] for i in pn.inputs[2:]]
        body = pn.blocks[0]
        it_slot, carried_slots = body.inputs[0], body.inputs[1:]
        self.looping += 1
        try:
            i = 0
            while True:
                if isinstance(cond, torch.SymBool):
                    raise Unsupported(f"{pn.where()}: a loop whose condition is on sizes")
                if not (cond and i < limit):
                    break
                if i >= MAX_ITERATIONS:
                    raise Unsupported(f"{pn.where()}: a loop of more than {MAX_ITERATIONS} "
                                      "iterations")
                values[it_slot] = i
                for slot, x in zip(carried_slots, carried):
                    values[slot] = x
                self.block(body)
                cond = values[body.outputs[0]]
                carried = [values[slot] for slot in body.outputs[1:]]
                i += 1
        finally:
            self.looping -= 1
        for out, x in zip(pn.outputs, carried):
            values[out] = x
        if not self.looping:
            self.produced.extend(pn.outputs)

    def follow_size(self, pn: ProcessedNode, args: list[Any]) -> Any:
        """A size turned into a 0-dim tensor, arithmetic on it and reading it back are
        followed as the integer they hold (a fake run would otherwise lose it to data)."""
        kind = pn.kind.split(".")[0]
        if kind == "prim::NumToTensor" and args and isinstance(args[0], (int, torch.SymInt)) \
                and not isinstance(args[0], bool):
            t = torch.ops.aten.scalar_tensor.default(args[0], dtype=torch.long)
            self.sizes[id(t)] = (args[0], t)
            return t
        if not any(isinstance(a, torch.Tensor) and id(a) in self.sizes for a in args):
            if kind in _READS and args and isinstance(args[0], torch.Tensor):
                raise Unsupported(f"{pn.where()}: a number read from a tensor's data")
            return _NOT_A_SIZE
        if kind in _READS and len(args) == 1:
            n = self.sizes[id(args[0])][0]
            return float(n) if kind == "aten::Float" else n
        op = _SIZE_ARITHMETIC.get(kind)
        if op is None:
            # any other use: an ordinary (fake) tensor, which an in-place one may change
            if kind.endswith("_"):
                for a in args:
                    self.sizes.pop(id(a), None)
            return _NOT_A_SIZE
        numbers = [self._number(a) for a in args]
        if any(n is None for n in numbers):
            return _NOT_A_SIZE
        n = op(*numbers)
        t = torch.ops.aten.scalar_tensor.default(n, dtype=torch.long)
        self.sizes[id(t)] = (n, t)
        return t

    def _number(self, a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            if id(a) in self.sizes:
                return self.sizes[id(a)][0]
            return None
        return a if isinstance(a, (int, torch.SymInt)) and not isinstance(a, bool) else None


_NOT_A_SIZE = object()
#: the most iterations of one loop a run follows (more: no program)
MAX_ITERATIONS = 256
#: operators that read only a tensor's metadata (sizes, rank, dtype, device)
_METADATA = frozenset({"aten::size", "aten::sym_size", "aten::numel", "aten::sym_numel",
                       "aten::dim", "prim::dtype", "prim::device", "aten::len"})


