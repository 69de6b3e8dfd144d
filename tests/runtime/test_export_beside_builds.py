"""``torch.export`` on one thread while a shape program is built on another: PyTorch keeps
the modes of an export's tracing in one process-wide place, and a symbolic size's arithmetic
on any thread asks it whether it is traced — the build then wrote into the export's graph
and took its tracing mode away, so the export lost operators ("We found a fake tensor in
the exported program constant's list"). ``runtime/torch_threads`` gives every thread its
own."""

from __future__ import annotations

import threading
import warnings

import torch

import static_runtime as sr
from static_runtime.runtime.hot import wait_for_builds


class Waits(torch.nn.Module):
    """Stops inside its own export's tracing until ``go`` is set."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 5)
        self.inside = threading.Event()
        self.go = threading.Event()

    def forward(self, x):
        y = torch.relu(self.lin(x))
        self.inside.set()
        assert self.go.wait(30)
        return torch.nn.functional.layer_norm(y * 2, (5,)) + x.sum(-1, keepdim=True)


class Sized(torch.nn.Module):
    def forward(self, x, y):
        z = torch.cat([x, y], 0).reshape(-1, x.shape[1] * 2)
        return torch.softmax(z * z.shape[0], -1).sum(0)


def test_a_shape_program_built_while_another_thread_exports():
    waits = Waits().eval()
    x = torch.randn(3, 6)
    result = {}

    def export():
        try:
            result["ep"] = torch.export.export(
                waits, (x,), dynamic_shapes=({0: torch.export.Dim("b")},))
        except Exception as e:  # noqa: BLE001  (the assertion below says what happened)
            result["error"] = e

    exporter = threading.Thread(target=export)
    exporter.start()
    try:
        assert waits.inside.wait(60)
        # the export is tracing now: build shape programs on this thread and on builders
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(Sized(), (torch.randn(2, 3), torch.randn(4, 3)))
        mod = sr.StaticModule(traced)
        for n in (2, 5, 7):
            a, b = torch.randn(n, 3), torch.randn(n + 2, 3)
            torch.testing.assert_close(mod(a, b), Sized()(a, b))
        wait_for_builds()
        programs = mod._memory.programs
        assert programs.failures == {}
        assert any(programs.get(structure) for structure in programs._items)
    finally:
        waits.go.set()
        exporter.join(60)
    assert "error" not in result, result.get("error")
    ep = result["ep"]
    assert not ep.constants  # every intermediate traced: none taken for a constant
    for b in (3, 8):
        x2 = torch.randn(b, 6)
        torch.testing.assert_close(ep.module()(x2), waits(x2))


def test_each_thread_has_its_own_pre_dispatch_modes():
    from torch._subclasses.schema_check_mode import SchemaCheckMode

    from static_runtime.runtime.torch_threads import separate_pre_dispatch_modes

    assert separate_pre_dispatch_modes()  # (at import already)
    seen = {}
    entered, leave = threading.Event(), threading.Event()

    def tracing():
        torch._ops._set_mode_pre_dispatch(SchemaCheckMode())
        seen["own"] = torch._ops._len_torch_dispatch_stack_pre_dispatch()
        entered.set()
        leave.wait(30)
        torch._ops.unset_mode_pre_dispatch(None, schema_check=True)
        seen["after"] = torch._ops._len_torch_dispatch_stack_pre_dispatch()

    t = threading.Thread(target=tracing)
    t.start()
    assert entered.wait(30)
    assert torch._ops._len_torch_dispatch_stack_pre_dispatch() == 0  # not this thread's
    assert torch.fx.experimental.proxy_tensor.get_proxy_mode() is None
    leave.set()
    t.join(30)
    assert seen == {"own": 1, "after": 0}


def test_modes_are_not_separated_while_a_trace_holds_the_shared_ones(monkeypatch):
    from torch._subclasses.schema_check_mode import SchemaCheckMode

    from static_runtime.runtime import torch_threads

    shared = torch._ops._ModeStackStateForPreDispatch()
    shared._schema_check_mode = SchemaCheckMode()
    monkeypatch.setattr(torch._ops, "_mode_stack_state_for_pre_dispatch", shared)
    assert not torch_threads.separate_pre_dispatch_modes()
    assert torch._ops._mode_stack_state_for_pre_dispatch is shared  # left for the trace
    shared._schema_check_mode = None  # the trace ended
    assert torch_threads.separate_pre_dispatch_modes()
    assert torch._ops._mode_stack_state_for_pre_dispatch is not shared
