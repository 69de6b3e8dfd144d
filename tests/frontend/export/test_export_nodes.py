"""FX nodes → IR nodes: each kind of node the importer maps (operators, symbolic scalars,
``torch.cond``, ``while_loop``), checked against eager PyTorch; unmapped ones named."""

import operator

import pytest
import torch
from export_helpers import exported
from frontend.eager_check import check_eager
from torch.export import Dim

import static_runtime as sr
from static_runtime.ir.verifier import verify


def test_control_flow_maps_to_if_and_loop():
    mod = sr.StaticModule(exported("control_flow"))
    verify(mod.graph)
    kinds = [n.kind for n in mod.graph.walk()]
    assert "prim::If" in kinds and "prim::Loop" in kinds


# --------------------------------------------------------------------------- nn.Module input


# --------------------------------------------------------------------------- node kinds


class Kinds(torch.nn.Module):
    """Multi-output ops (getitem), list-returning ops (ListUnpack), symbolic size arithmetic,
    dtype/keyword arguments, optional-tensor lists, a lifted constant and a buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.linspace(-1, 1, 6), persistent=False)
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x, idx):
        values, indices = torch.max(x, dim=1)
        a, b = torch.split(x, [2, 4], dim=1)
        rows = x.shape[0] * 2
        y = torch.cat([b, a], 1).reshape(rows, 3).reshape(x.shape[0], -1)
        z = self.lin(y + self.shift).to(torch.float64).sum(dim=1, dtype=torch.float32)
        picked = x[idx]
        top = torch.topk(x, 2).values
        return values + z, indices, picked * torch.tensor([2.0]), top, rows // 2 + 1


def test_node_kinds_match_eager():
    model = Kinds().eval()
    batch = Dim("batch", min=2, max=64)
    mk = lambda n, k: (torch.randn(n, 6, generator=torch.Generator().manual_seed(n)),
                       torch.arange(k) % n)
    ep = torch.export.export(model, mk(4, 3), dynamic_shapes=({0: batch}, {0: Dim("k")}))
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert operator.getitem in targets and operator.mul in targets
    check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, [mk(4, 3), mk(9, 5)])


class Branchy(torch.nn.Module):
    def forward(self, x, y):
        # a predicate on a symbolic size (SymBool) and one on data (a bool tensor)
        small = torch.cond(x.shape[0] > 4, lambda x, y: x * 2, lambda x, y: x - y, (x, y))
        return torch.cond(small.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (small,))


def test_cond_with_symbolic_and_tensor_predicates():
    model = Branchy()
    mk = lambda n, s: (torch.randn(n, 3, generator=torch.Generator().manual_seed(s)),
                       torch.randn(n, 3, generator=torch.Generator().manual_seed(s + 1)))
    batch = Dim("batch", min=2, max=64)
    ep = torch.export.export(model, mk(3, 0), dynamic_shapes=({0: batch}, {0: batch}))
    sets = [mk(3, 0), mk(6, 1), mk(3, 7), mk(8, 9)]
    check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, sets)


# --------------------------------------------------------------------------- pytree


def test_unsupported_higher_order_op_is_named():
    from torch._higher_order_ops.scan import scan

    class Scan(torch.nn.Module):
        def forward(self, x):
            return scan(lambda c, y: (c + y, c * 2), torch.zeros(3), x)[0]

    with pytest.raises(sr.FrontendError, match="higher-order operator scan"):
        sr.StaticModule(Scan(), example_inputs=(torch.randn(4, 3),))


class SymbolicScalars(torch.nn.Module):
    """``torch.sym_min``/``sym_max`` of sizes (what ``min``/``max`` of sizes become under
    export: SEW's), ``torch.sym_float``, and a size squared (an int, not a float)."""

    def forward(self, x):
        n = torch.sym_min(x.shape[1], 8)
        m = torch.sym_max(x.shape[1] // 2, 3)
        scale = torch.sym_float(n) / 2
        squared = (x.shape[1] // 2) ** 2 + 1  # (an int: DINOv2's patch count)
        return x * n + m, torch.zeros(n + m), x * scale, x.new_ones(2, squared)


def test_symbolic_min_max_and_conversions_map():
    x = torch.randn(2, 10)
    ep = torch.export.export(SymbolicScalars(), (x,), dynamic_shapes=({1: Dim.AUTO},))
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert torch.sym_min in targets and torch.sym_max in targets
    check_eager(lambda opts: sr.StaticModule(ep, options=opts), SymbolicScalars(),
                [(x,), (torch.randn(2, 5),), (torch.randn(2, 21),)])
