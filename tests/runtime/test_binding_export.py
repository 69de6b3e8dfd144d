"""The export binder's compiled check (the fast path of ``ExportBinder.bind``) decides every
call exactly as the general path does: same bound values for calls it accepts, the same
error for calls it refuses."""

import pytest
import torch
from torch.export import Dim

import static_runtime as sr
from static_runtime.models.export import export_case
from static_runtime.runtime.binding import ExportBinder, make_binder


def _general(graph) -> ExportBinder:
    """A binder of ``graph`` with the compiled check switched off."""
    binder = ExportBinder(graph)
    binder._fast = None
    binder.__dict__.pop("bind", None)  # the class's bind: the general path
    return binder


def _outcome(binder, args, kwargs):
    try:
        values = binder.bind(args, kwargs)
    except Exception as e:  # noqa: BLE001 (compared between the two paths)
        return "error", type(e), str(e)
    return "ok", [(type(v), id(v) if isinstance(v, torch.Tensor) else v) for v in values]


class _Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def _add_program():
    batch = Dim("batch", min=2, max=8)
    return torch.export.export(_Add(), (torch.randn(3, 4), torch.randn(3, 4)),
                               dynamic_shapes=({0: batch}, {0: batch}))


def _control_flow(dynamic: bool):
    model, example, shapes = export_case("control_flow")
    return torch.export.export(model, example, dynamic_shapes=shapes if dynamic else None)


t = torch.randn
CASES = {
    "symbolic-sizes": (_add_program, [
        ((t(5, 4), t(5, 4)), {}), ((t(2, 4), t(2, 4)), {}), ((t(8, 4), t(8, 4)), {}),
        ((t(1, 4), t(1, 4)), {}), ((t(9, 4), t(9, 4)), {}), ((t(5, 4), t(6, 4)), {}),
        ((t(5, 3), t(5, 3)), {}), ((t(5,), t(5, 4)), {}), ((t(5, 4, 1), t(5, 4)), {}),
        ((3, t(5, 4)), {}), ((t(5, 4),), {}), ((t(5, 4), t(5, 4), t(5, 4)), {}),
        ((), {"x": t(5, 4), "y": t(5, 4)}), ((t(5, 4),), {"y": t(5, 4)}),
        ((t(5, 4).int(), t(5, 4)), {}),
    ]),
    "symbolic-int": (lambda: _control_flow(True), [
        ((t(3, 32), 3), {}), ((t(3, 32), 0), {}), ((t(3, 32), True), {}),
        ((t(3, 32), 3.0), {}), ((t(3, 31), 3), {}), ((t(3, 32), -2), {}),
        ((t(3, 32),), {"steps": 4}),
    ]),
    "specialised-int": (lambda: _control_flow(False), [
        ((t(2, 32), 8), {}), ((t(2, 32), 3), {}), ((t(2, 32), 8.0), {}),
        ((t(2, 32), True), {}), ((t(3, 32), 8), {}),
    ]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_check_decides_as_the_general_path(name):
    program, calls = CASES[name]
    graph = sr.StaticModule(program()).graph
    fast = make_binder(graph)
    assert fast._fast is not None, "a flat program of tensors and ints gets a compiled check"
    general = _general(graph)
    accepted = 0
    for args, kwargs in calls:
        got, want = _outcome(fast, args, kwargs), _outcome(general, args, kwargs)
        assert got == want, f"{name}: call {args!r} {kwargs!r}"
        accepted += got[0] == "ok"
    assert 0 < accepted < len(calls)  # both outcomes exercised


class _Nested(torch.nn.Module):
    def forward(self, pair, feats):
        return pair[0] + pair[1] * feats["u"]


def test_nested_arguments_use_the_compiled_check_after_flattening():
    batch = Dim("batch", min=2, max=8)
    mk = lambda n, m=None: ((t(n, 3), t(m or n, 3)), {"u": t(n, 3)})
    ep = torch.export.export(_Nested(), mk(3), dynamic_shapes=(
        ({0: batch}, {0: batch}), {"u": {0: batch}}))
    graph = sr.StaticModule(ep).graph
    fast, general = make_binder(graph), _general(graph)
    assert fast._fast is not None and "bind" not in fast.__dict__
    calls = [(mk(4), {}), (mk(4, 5), {}), (mk(9), {}), (([t(4, 3), t(4, 3)], {"u": t(4, 3)}), {}),
             ((mk(4)[0],), {"feats": mk(4)[1]})]
    outcomes = [(_outcome(fast, a, k), _outcome(general, a, k)) for a, k in calls]
    assert all(got == want for got, want in outcomes)
    assert outcomes[0][0][0] == "ok" and outcomes[1][0][0] == "error"
