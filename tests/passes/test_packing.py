"""pack_linears: sibling linears on one input packed into one, where every use of their
outputs reads values only; left alone where a use could see the packed layout."""

import pytest
import torch
from differential import check, script
from passes_helpers import NO_PASSES, only

import static_runtime as sr

F = torch.nn.functional


def kinds(model, options=None) -> list[str]:
    return [n.kind for n in sr.prepare(script(model), options).walk()
            if n.kind != "prim::Constant"]


def seeded(module: torch.nn.Module, seed=0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.data = torch.randn(p.shape, generator=g) * 0.2
    return module.eval()


class SelfAttention(torch.nn.Module):
    """Q, K and V projections viewed as heads (HF's layout), the key without a bias."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads, self.d = heads, dim // heads
        self.q = torch.nn.Linear(dim, dim)
        self.k = torch.nn.Linear(dim, dim, bias=False)
        self.v = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.size(0), x.size(1)
        q = self.q(x).view(b, t, -1, self.d).transpose(1, 2)
        k = self.k(x).view(b, t, -1, self.d).transpose(1, 2)
        v = self.v(x).view(b, t, -1, self.d).transpose(1, 2)
        out = torch.softmax(q @ k.transpose(-1, -2) * 0.3, -1) @ v
        return out.transpose(1, 2).reshape(b, t, -1)


class GatedMLP(torch.nn.Module):
    def __init__(self, dim=32, hidden=48):
        super().__init__()
        self.gate = torch.nn.Linear(dim, hidden, bias=False)
        self.up = torch.nn.Linear(dim, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def rows(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_qkv_packed_into_one_linear():
    model = seeded(SelfAttention())
    found = kinds(model, only("pack_linears"))
    assert found.count("aten::linear") == 1 and found.count("aten::slice") == 3
    assert "aten::view" not in found and found.count("aten::reshape") == 4
    assert kinds(model, NO_PASSES).count("aten::linear") == 3
    check(model, [rows(1, 5, 32)], [rows(3, 7, 32, seed=1)],
          options={"pack": only("pack_linears"), "default": sr.StaticModuleOptions()})
    # a rank-4 input: the head view now folds a batch dimension into the heads, which a
    # view of the packed slice could not do; reshape copies there, the values are eager's
    check(model, [rows(2, 3, 4, 32)])


def test_gated_mlp_gate_and_up_packed():
    model = seeded(GatedMLP())
    found = kinds(model, only("pack_linears"))
    assert found.count("aten::linear") == 2 and found.count("aten::slice") == 2
    check(model, [rows(1, 32)], [rows(4, 9, 32, seed=2)])


def test_zoo_attention_projections_packed():
    from benchmarks.zoo import ZOO

    for name, before, after in (("hf_bert", 13, 9), ("llama_scripted", 15, 9)):
        unmeasured = sr.StaticModuleOptions(kernel_choice="default")  # (no linear + act fused)
        graph = sr.StaticModule(ZOO[name].scripted(), unmeasured).graph
        assert [n.kind for n in graph.walk()].count("aten::linear") == after, name
        off = sr.StaticModule(ZOO[name].scripted(), sr.StaticModuleOptions(
            pack_linears=False, kernel_choice="default"))
        assert [n.kind for n in off.graph.walk()].count("aten::linear") == before, name


NOT_PACKED = {
    # a weight that is an input, not a constant
    "weight_not_constant": """
def f(x: torch.Tensor, w: torch.Tensor):
    return torch.nn.functional.linear(x, w) + torch.nn.functional.linear(x, w * 2.0)
""",
    # an output returned: the caller would see a slice of the packed product
    "output_returned": """
def f(x: torch.Tensor):
    w1 = torch.ones(6, 4)
    w2 = torch.ones(6, 4) * 2.0
    a = torch.nn.functional.linear(x, w1)
    return a, torch.nn.functional.linear(x, w2) + a
""",
    # a view of a view: unsqueeze keeps the former output contiguous, the packed slice not,
    # and view(-1) would fail on it
    "view_of_a_view": """
def f(x: torch.Tensor):
    w1 = torch.ones(6, 4)
    w2 = torch.ones(6, 4) * 2.0
    a = torch.nn.functional.linear(x, w1).unsqueeze(0).view(-1)
    return a.sum() + torch.nn.functional.linear(x, w2).sum()
""",
    # inside a branch: nothing there is planned, each slice would cost a call
    "in_a_branch": """
def f(x: torch.Tensor, y: torch.Tensor):
    w1 = torch.ones(6, 4)
    w2 = torch.ones(6, 4) * 2.0
    if bool(y.sum() > 0):
        return torch.nn.functional.linear(x, w1) + torch.nn.functional.linear(x, w2)
    return x.sum(1)
""",
    # written in place
    "written_in_place": """
def f(x: torch.Tensor, y: torch.Tensor):
    w1 = torch.ones(6, 4)
    w2 = torch.ones(6, 4) * 2.0
    a = torch.nn.functional.linear(x, w1)
    a.index_add_(0, torch.tensor([0]), y)
    return a + torch.nn.functional.linear(x, w2)
""",
    # different K (the inputs differ) and dtypes
    "different_inputs": """
def f(x: torch.Tensor):
    w1 = torch.ones(6, 4)
    w2 = torch.ones(6, 4, dtype=torch.float64)
    return torch.nn.functional.linear(x, w1).sum() + \\
        torch.nn.functional.linear(x.double(), w2).sum()
""",
}


@pytest.mark.parametrize("name", list(NOT_PACKED))
def test_not_packed(name):
    src = NOT_PACKED[name]
    assert "aten::slice" not in kinds(src, only("pack_linears", constant_propagation=True)), name
    args = [rows(3, 4)] + ([rows(6, 4, seed=1)] if "w:" in src else []) \
        + ([rows(1, 6, seed=2)] if "y:" in src else [])
    check(src, args)


def test_large_weights_not_packed():
    model = seeded(GatedMLP(dim=512, hidden=512))
    assert kinds(model, only("pack_linears")).count("aten::linear") == 3


def test_option_switches_packing_off():
    model = seeded(SelfAttention())
    off = sr.StaticModuleOptions(pack_linears=False)
    assert [n.kind for n in sr.prepare(script(model), off).walk()].count("aten::linear") == 3


MATMULS = """
def f(x: torch.Tensor):
    b1 = torch.ones(6, 4) * 0.5
    b2 = torch.ones(6, 5) * 0.25
    bias = torch.ones(4) * 0.1
    x2 = x.view(-1, 6)
    a = torch.addmm(bias, x2, b1)
    m = torch.matmul(x2, b2)
    return (a * 2.0).mean(-1) + m.mean(-1)
"""


def test_matmul_and_addmm_with_constant_matrices_packed_with_each_other():
    found = kinds(MATMULS, only("pack_linears", constant_propagation=True))
    assert found.count("aten::linear") == 1 and "aten::addmm" not in found \
        and "aten::matmul" not in found
    check(MATMULS, [rows(2, 3, 6)], [rows(5, 6, seed=1)])


def test_addmm_of_an_input_of_unknown_rank_not_packed():
    """``addmm`` raises for a 3-D input; the linear it would become would not."""
    src = MATMULS.replace("x2 = x.view(-1, 6)", "x2 = x")
    found = kinds(src, only("pack_linears", constant_propagation=True))
    assert "aten::addmm" in found and "aten::slice" not in found
    check(src, [rows(2, 3, 6)], [rows(5, 6, seed=1)])
