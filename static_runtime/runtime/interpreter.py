"""The reference executor: runs processed nodes in order over a value array.

It is the executor every other one is checked against: straightforward, general, and
exactly right. Control flow (``prim::If``, ``prim::Loop``) runs sub-blocks over the same
array. One ``Interpreter`` per runtime: it owns the value array and is not thread-safe.
"""

from __future__ import annotations

from typing import Any

import torch

from static_runtime.runtime.plan import Control, ExecutionPlan, ProcessedBlock, ProcessedNode


def annotate(e: BaseException, pn: ProcessedNode) -> None:
    """Add a note naming the node (kind and source line) to an exception raised inside it."""
    note = f"static_runtime: while running {pn.where()}"
    if note not in getattr(e, "__notes__", ()):
        e.add_note(note)


class Interpreter:
    def __init__(self, plan: ExecutionPlan):
        self.plan = plan
        self.values: list[Any] = [None] * plan.n_slots
        for slot, value in plan.constants.items():
            self.values[slot] = value
        #: reused slots found at run time to alias an input: never kept (see ``_run_node``)
        self.unkept: set[int] = set()
        self._input_key: tuple | None = None

    # -- one call
    def run(self, inputs: list[Any]) -> list[Any]:
        plan, values = self.plan, self.values
        self._check_reuse_key(inputs)
        for slot, x in zip(plan.block.inputs, inputs):
            values[slot] = x
        try:
            self.run_block(plan.block)
            outputs = [values[s] for s in plan.block.outputs]
            for i in plan.copied_outputs:
                outputs[i] = copy_containers(outputs[i])
            return outputs
        finally:
            self.clear()

    def clear(self) -> None:
        """Drop every value but constants and kept out-variant outputs."""
        values = self.values
        for s in self.plan.transient_slots:
            values[s] = None
        for s in self.unkept:
            values[s] = None

    def drop_kept_outputs(self) -> None:
        for s in self.plan.reused_slots:
            self.values[s] = None

    def _check_reuse_key(self, inputs: list[Any]) -> None:
        # Kept outputs were produced for the previous call's inputs; an out variant handed a
        # tensor of another dtype casts silently. Result dtypes follow from the inputs'
        # dtypes, the Python types of scalars, and which tensors — inputs or intermediates —
        # are 0-dim (type promotion treats a 0-dim tensor like a scalar). Intermediate ranks
        # follow from input shapes, so the key is dtypes and shapes; a change drops them all.
        if not self.plan.reused_slots:
            return
        key = tuple((x.dtype, x.shape) if isinstance(x, torch.Tensor) else type(x)
                    for x in inputs)
        if key != self._input_key:
            self.drop_kept_outputs()
            self._input_key = key

    # -- blocks and nodes
    def run_block(self, block: ProcessedBlock) -> None:
        self.run_nodes(block.nodes)

    def run_nodes(self, nodes: tuple[ProcessedNode, ...]) -> None:
        values = self.values
        for pn in nodes:
            try:
                control = pn.control
                if control is Control.NONE:
                    self._run_node(pn)
                elif control is Control.IF:
                    branch = pn.blocks[0] if values[pn.inputs[0]] else pn.blocks[1]
                    self.run_block(branch)
                    for o, bo in zip(pn.outputs, branch.outputs):
                        values[o] = values[bo]
                else:
                    self._run_loop(pn)
            except BaseException as e:
                annotate(e, pn)
                raise

    def _run_node(self, pn: ProcessedNode) -> None:
        values = self.values
        args = [values[i] for i in pn.inputs]
        if pn.reuse_output:
            out = values[pn.outputs[0]]
            if out is not None:
                # Out variants resize their output; emptying it first keeps the storage and
                # avoids PyTorch's warning about resizing a non-empty out tensor.
                out.resize_(0)
                pn.out_fn(out, *args)
                return
            result = pn.fn(*args)
            values[pn.outputs[0]] = result
            if _shares_storage(result, args) or not result.is_contiguous():
                # Not kept: an op that hands back (a view of) an input would have the next
                # call overwrite the caller's tensor; and a kernel whose natural result is
                # not contiguous (cholesky's column-major factor) would, writing into a
                # resized kept tensor, return another layout than the functional op does.
                self.unkept.add(pn.outputs[0])
            return
        result = pn.fn(*args)
        n = len(pn.outputs)
        if n == 1:
            values[pn.outputs[0]] = result
        elif n:
            if len(result) != n:
                raise ValueError(
                    f"{pn.kind} produced {len(result)} values, the graph expects {n}")
            for slot, x in zip(pn.outputs, result):
                values[slot] = x

    def _run_loop(self, pn: ProcessedNode) -> None:
        values = self.values
        max_trip = values[pn.inputs[0]]
        cond = values[pn.inputs[1]]
        carried = [values[i] for i in pn.inputs[2:]]
        body = pn.blocks[0]
        it_slot, carried_slots = body.inputs[0], body.inputs[1:]
        cond_slot, out_slots = body.outputs[0], body.outputs[1:]
        i = 0
        while cond and i < max_trip:
            values[it_slot] = i
            for s, x in zip(carried_slots, carried):
                values[s] = x
            self.run_block(body)
            cond = values[cond_slot]
            carried = [values[s] for s in out_slots]
            i += 1
        for o, x in zip(pn.outputs, carried):
            values[o] = x


def _shares_storage(result: Any, args: list[Any]) -> bool:
    if not isinstance(result, torch.Tensor):
        return True
    ptr = result.untyped_storage().data_ptr()
    return ptr == 0 or any(
        isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr for a in args)


def copy_containers(x: Any) -> Any:
    """New lists, dicts and tuples all the way down; tensors and other objects as they are.

    Applied to outputs that may be (or hold) a container that outlives the call — an
    attribute of the module, say — so that the caller's result does not change when a later
    call writes into that container. The TorchScript interpreter's results are new Python
    containers likewise."""
    if isinstance(x, list):
        return [copy_containers(e) for e in x]
    if isinstance(x, tuple):
        return tuple(copy_containers(e) for e in x)
    if isinstance(x, dict):
        return {k: copy_containers(v) for k, v in x.items()}
    return x
