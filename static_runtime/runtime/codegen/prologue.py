"""The factory's prologue: the signature guard the generated ``run`` checks first (handing
back to the general path when the inputs differ), and the views of arena tensors taken once
per layout (``runtime.hoist``) instead of per call."""

from __future__ import annotations

from typing import Any

import torch

from static_runtime.ir import types as T
from static_runtime.memory.cache import _sig
from static_runtime.runtime.hoist import HoistRefused, check_hoisted

#: Lists of at most this many tensors get their elements checked one by one in a guard.
_GUARD_LIST_MAX = 32


def guard_kind(k: Any, t: T.Type) -> bool | tuple[str, int]:
    """How generated code checks an input against its signature entry ``k``: True, a
    tensor's dtype and shape directly (for inputs typed ``Tensor``: an ``Optional[Tensor]``
    may be None on the next call); ``("list", n)``, a ``List[Tensor]`` of n CPU tensors
    element by element; False, ``_sig`` (which compares anything)."""
    if isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], torch.dtype):
        return isinstance(t, T.TensorType)
    if (isinstance(t, T.ListType) and isinstance(t.elem, T.TensorType) and isinstance(k, tuple)
            and len(k) == 2 and k[0] is list and len(k[1]) <= _GUARD_LIST_MAX
            and all(isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], torch.dtype)
                    for e in k[1])):
        return ("list", len(k[1]))
    return False


class SignatureChanged(Exception):
    """Raised by generated code, before running anything, when the inputs' signature is not
    the one its memory layout was planned for."""


class PrologueEmission:
    """The factory's lines before ``def run``. Mixed into ``function.Emitter``, whose state and
    straight-line emission (``nodes.NodeEmission``) it uses."""

    def signature_guard(self, params: list[str], header: list[str]) -> list[str]:
        """The conditions under which ``run`` raises ``SignatureChanged`` (none without a
        guard); the factory's lines that unpack the key they compare with go on ``header``."""
        checks = []
        self.guard_names: list[str] = []  # (the factory's names ``run`` reads)
        if self.guard is not None:
            # The layout is only valid for its signature: check it as directly as possible
            # (dtype identity and shape equality for tensors) and hand back to the general
            # path, before anything ran, when it differs.
            self.globals["_sig"] = _sig
            self.globals["SignatureChanged"] = SignatureChanged
            on_cpu = self.spec is not None and self.spec.assumes_device
            for i, (param, kind) in enumerate(zip(params, self.guard)):
                if kind is True:
                    header.append(f"    _dtype{i}, _shape{i} = _key[{i}]")
                    self.guard_names += [f"_dtype{i}", f"_shape{i}"]
                    checks.append(f"{param}.dtype is not _dtype{i} or {param}.shape != _shape{i}")
                    if on_cpu:
                        checks.append(f"not {param}.is_cpu")
                elif isinstance(kind, tuple):  # ("list", n): a list of n tensors
                    n = kind[1]
                    header.append(f"    _elems{i} = _key[{i}][1]")
                    checks.append(f"type({param}) is not list or len({param}) != {n}")
                    for j in range(n):
                        header.append(f"    _dtype{i}_{j}, _shape{i}_{j} = _elems{i}[{j}]")
                        self.guard_names += [f"_dtype{i}_{j}", f"_shape{i}_{j}"]
                        checks.append(f"{param}[{j}].dtype is not _dtype{i}_{j} or "
                                      f"{param}[{j}].shape != _shape{i}_{j}")
                        if on_cpu:
                            checks.append(f"not {param}[{j}].is_cpu")
                else:
                    header.append(f"    _key{i} = _key[{i}]")
                    self.guard_names.append(f"_key{i}")
                    checks.append(f"_sig({param}) != _key{i}")
        return checks

    def hoist_prologue(self) -> list[str]:
        """The factory's part: names for the hoisted views, ``_hoist()`` taking them of the
        arena tensors (and naming the node whose call raised), the check that each is a
        view of its arena tensor (``runtime.hoist.check_hoisted``)."""
        hoisting = self.hoisting
        fixed = set(self.plan.constants) | (set(self.spec.known) if self.spec else set())
        for pn in self.plan.block.nodes:
            if (pn.kind in ("prim::ListConstruct", "prim::TupleConstruct")
                    and all(s in fixed or s in self.list_literals for s in pn.inputs)):
                items = ", ".join(self.list_literals.get(s) or self.expr[s] for s in pn.inputs)
                self.list_literals[pn.outputs[0]] = (
                    f"[{items}]" if pn.kind == "prim::ListConstruct"
                    else f"({items},)" if items else "()")
        for pn in hoisting.nodes:
            for s in pn.outputs:
                self.expr[s] = self.names.fresh(f"h_{self.value_of[s].name}")
                self.hoisted_names.append(self.expr[s])
        names = ", ".join(self.hoisted_names)
        self.globals["_hoisted"] = tuple(pn.node for pn in hoisting.nodes)
        self.globals["_check_hoisted"] = check_hoisted
        self.globals["HoistRefused"] = HoistRefused
        lines = [f"    {names} = {', '.join(['None'] * len(self.hoisted_names))}",
                 "    _dirty = False",
                 "    def _hoist():",
                 f"        nonlocal {names}",
                 "        _at = 0",
                 "        try:"]
        body_start = len(self.lines)
        with self.spelled(self.arena_names):  # in the factory: the arena tensors themselves
            for k, pn in enumerate(hoisting.nodes):
                self.emit(3, f"_at = {k}")
                self.hoisted_call(pn, 3)
        body = self.lines[body_start:]
        del self.lines[body_start:]
        lines += body
        lines += ["        except Exception as e:",
                  "            raise HoistRefused(_hoisted[_at]) from e",
                  "    _hoist()"]
        pairs = ", ".join(
            f"(({', '.join(self.expr[s] for s in pn.outputs)},), "
            f"{self.arena_names[hoisting.root[pn.node]]})" for pn in hoisting.nodes)
        lines.append(f"    _check_hoisted(_hoisted, ({pairs},))")
        return lines
