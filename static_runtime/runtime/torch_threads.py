"""PyTorch state one thread's work must not see from another's.

``torch.export`` (and every trace that runs before dispatch) keeps the modes of its tracing
in one object for the whole process, ``torch._ops._mode_stack_state_for_pre_dispatch``,
while the dispatch key that turns them on is the tracing thread's own. Arithmetic on a
symbolic size asks that object whether a trace is running (``proxy_tensor.get_proxy_mode``),
so a shape program built on one thread while another exported wrote its size arithmetic
into the export's graph, taking the export's mode away meanwhile: the export lost the
operators it traced in that moment (PyTorch: "We found a fake tensor in the exported
program constant's list"), and the build failed ("... is not tracked with proxy"). The cure
is the one the dispatch key already has: each thread its own modes.
"""

from __future__ import annotations

import threading

from torch import _ops

_lock = threading.Lock()


class _PreDispatchModesPerThread(threading.local):
    """``torch._ops._ModeStackStateForPreDispatch``'s interface over one per thread."""

    def __init__(self):
        self.state = _ops._ModeStackStateForPreDispatch()

    def set(self, index, mode):
        self.state.set(index, mode)

    def get(self, index):
        return self.state.get(index)

    def count(self) -> int:
        return self.state.count()

    @property
    def _schema_check_mode(self):
        return self.state._schema_check_mode

    @_schema_check_mode.setter
    def _schema_check_mode(self, mode) -> None:
        self.state._schema_check_mode = mode


def separate_pre_dispatch_modes() -> bool:
    """Give every thread its own pre-dispatch modes, once per process; whether they are.
    Not while a trace is running (its modes are in the shared object): False then, and a
    later call tries again. False too where PyTorch keeps them otherwise (this PyTorch
    differs from 2.13's layout: left as it is)."""
    current = getattr(_ops, "_mode_stack_state_for_pre_dispatch", None)
    if isinstance(current, _PreDispatchModesPerThread):
        return True
    shared = getattr(_ops, "_ModeStackStateForPreDispatch", None)
    if shared is None or type(current) is not shared:
        return False
    with _lock:
        current = _ops._mode_stack_state_for_pre_dispatch
        if isinstance(current, _PreDispatchModesPerThread):
            return True
        if current.count():
            return False
        _ops._mode_stack_state_for_pre_dispatch = _PreDispatchModesPerThread()
    return True


#: At import, before any trace of ours: nearly always no trace is running anywhere yet.
separate_pre_dispatch_modes()
