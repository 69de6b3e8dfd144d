"""Planning memory before the first call: run the graph once on meta tensors.

Meta tensors carry dtype and shape but no data, so a run over them computes every managed
value's size at no cost in memory or time. It cannot go through code that needs data: a
branch on a tensor's value, ``.item()``, object state (attributes are real tensors, and a
meta run must not write them). Such graphs are planned on their first real call instead,
and ``plan_ahead`` says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from static_runtime.runtime.interpreter import Interpreter
from static_runtime.runtime.plan import map_nested

if TYPE_CHECKING:
    from static_runtime.runtime.module import StaticModule

#: Nodes that touch object state: a meta run could write meta tensors into the model.
_STATEFUL = frozenset({"prim::GetAttr", "prim::SetAttr", "prim::CreateObject"})


def plan_ahead(module: StaticModule, inputs: list[Any]) -> str | None:
    """Plan the arena for ``inputs``' signature; None on success, else the reason it could
    not be done ahead of time."""
    stateful = sorted({n.kind for n in module.graph.walk() if n.kind in _STATEFUL})
    if stateful:
        return f"the graph uses object state ({', '.join(stateful)})"
    interp = Interpreter(module.plan, module._memory)
    for slot, value in module.plan.constants.items():
        interp.values[slot] = _to_meta(value)
    key_inputs = inputs
    meta_inputs = [_to_meta(x) for x in inputs]
    guard = torch._C._InferenceMode(True)
    try:
        interp.begin(key_inputs)
        for slot, x in zip(module.plan.block.inputs, meta_inputs):
            interp.values[slot] = x
        interp.run_block(module.plan.block)
        interp.record_layout(meta_inputs, checked=False)
    except Exception as e:  # noqa: BLE001  (an op that needs data: plan on the first call)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"a meta-tensor run failed ({type(e).__name__}: {first[:200]})"
    finally:
        del guard
        interp.clear()
    return None


def _meta_leaf(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


def _to_meta(x: Any) -> Any:
    return map_nested(_meta_leaf, x)
