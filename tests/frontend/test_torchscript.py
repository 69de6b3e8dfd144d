"""The TorchScript importer: every form of model, signatures, constants, blocks, sources."""


import pytest
import torch
from differential import script

import static_runtime as sr
from static_runtime.frontend import import_model
from static_runtime.frontend.torchscript import import_graph, import_torchscript
from static_runtime.ir import types as T
from static_runtime.ir.verifier import verify


def fn_with_defaults(x: torch.Tensor, n: int = 2, scale: float = 0.5,
                     name: str | None = None) -> torch.Tensor:
    for _ in range(n):
        x = x * scale
    if name is not None:
        x = x + 1
    return x


class Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x) * self.calls


def test_script_function_signature_and_defaults():
    g = import_torchscript(script(fn_with_defaults))
    verify(g)
    sig = g.signature
    assert [a.name for a in sig.arguments] == ["x", "n", "scale", "name"]
    assert [a.default for a in sig.arguments[1:]] == [2, 0.5, None]
    assert [str(v.type) for v in g.inputs] == ["Tensor", "int", "float", "str?"]
    assert not sig.has_self


def test_module_is_frozen_and_self_becomes_a_constant():
    m = torch.jit.script(Stateful())
    g = import_torchscript(m)
    verify(g)
    assert [a.name for a in g.signature.arguments] == ["x"]
    assert len(g.inputs) == 1
    kinds = [n.kind for n in g.walk()]
    # The written attribute survives freezing; the Linear's parameters became constants.
    assert "prim::SetAttr" in kinds and "prim::GetAttr" in kinds
    tensors = [n for n in g.walk() if n.kind == "prim::Constant"
               and isinstance(n.attrs.get("value"), torch.Tensor)]
    assert {tuple(n.attrs["value"].shape) for n in tensors} == {(4, 4), (4,)}


def test_module_training_mode_is_restored():
    m = torch.jit.script(Stateful())
    m.train()
    sr.StaticModule(m)
    assert m.training


def test_constants_of_every_kind_are_imported():
    src = """
def f(x: torch.Tensor):
    a = [1, 2, 3]
    b = (1.5, "s", True)
    d = torch.device("cpu")
    t = torch.tensor([1.0, 2.0])
    return x + t + a[1] + b[0], b[1], b[2], d
"""
    g = import_torchscript(script(src))
    values = [n.attrs.get("value") for n in g.walk() if n.kind == "prim::Constant"]
    kinds = {type(v) for v in values}
    assert {int, float, str, bool} <= kinds or {int, float, str} <= kinds
    out = sr.StaticModule(script(src))(torch.ones(2))
    ref = script(src)(torch.ones(2))
    torch.testing.assert_close(out[0], ref[0])
    assert out[1:] == ref[1:]


def test_blocks_of_if_and_loop_are_imported():
    g = import_torchscript(script(fn_with_defaults))
    loops = [n for n in g.walk() if n.kind == "prim::Loop"]
    ifs = [n for n in g.walk() if n.kind == "prim::If"]
    assert len(loops) == 1 and len(loops[0].blocks) == 1
    assert len(loops[0].blocks[0].inputs) == 2  # iteration count + carried x
    assert len(ifs) == 1 and len(ifs[0].blocks) == 2


def test_source_locations_point_at_user_code():
    g = import_torchscript(script(fn_with_defaults))
    sources = {n.source for n in g.walk() if n.kind == "aten::mul"}
    assert sources and all(s and s.startswith("test_torchscript.py:") for s in sources)


def test_torch_graph_input_names_become_argument_names():
    tg = torch._C.parse_ir("""
graph(%a.1 : Tensor, %b : int):
  %c : Tensor = aten::mul(%a.1, %b)
  return (%c)""")
    g = import_torchscript(tg)
    assert [a.name for a in g.signature.arguments] == ["a", "b"]
    mod = sr.StaticModule(tg)
    torch.testing.assert_close(mod(torch.ones(2), 3), torch.full((2,), 3.0))
    torch.testing.assert_close(mod(a=torch.ones(2), b=2), torch.full((2,), 2.0))


def test_archive_path_is_loaded(tmp_path):
    m = torch.jit.script(Stateful())
    path = tmp_path / "m.pt"
    torch.jit.save(m, str(path))
    x = torch.randn(3, 4)
    ours = sr.StaticModule(str(path))
    ref = torch.jit.load(str(path))
    torch.testing.assert_close(ours(x), ref(x))
    ours_p = sr.StaticModule(path)  # a pathlib.Path works too
    torch.testing.assert_close(ours_p(x), torch.jit.load(str(path))(x))


def test_function_calls_are_inlined():
    @torch.jit.script
    def helper(a: torch.Tensor) -> torch.Tensor:
        return a * 2

    def outer(x: torch.Tensor) -> torch.Tensor:
        return helper(x) + 1

    g = import_torchscript(script(outer))
    assert not any(n.kind in ("prim::CallFunction", "prim::CallMethod") for n in g.walk())


def test_ir_graph_is_accepted_and_copied():
    g = sr.prepare(script(fn_with_defaults))
    copy = import_model(g)
    assert str(copy) == str(g) and copy is not g
    mod = sr.StaticModule(g)
    torch.testing.assert_close(mod(torch.ones(3)), script(fn_with_defaults)(torch.ones(3)))


def test_unfrozen_import_keeps_parameters_as_attributes():
    m = torch.jit.script(Stateful())
    g = import_torchscript(m, freeze=False)
    mod = sr.StaticModule(m, options=sr.StaticModuleOptions(freeze=False))
    x = torch.randn(2, 4)
    ref = torch.jit.script(Stateful())
    ref.load_state_dict(m.state_dict())
    torch.testing.assert_close(mod(x), ref(x))
    assert any(n.kind == "prim::GetAttr" for n in g.walk())


def test_list_input_types_are_converted():
    def f(xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(xs)

    g = import_graph(script(f).graph)
    assert g.inputs[0].type == T.ListType(T.Tensor)


@pytest.mark.parametrize("bad", [3, object(), torch.nn.Linear(2, 2)])
def test_unsupported_model_types_are_refused(bad):
    with pytest.raises(sr.FrontendError):
        sr.StaticModule(bad)


def test_python_the_script_calls_is_called_on_every_run(tmp_path):
    """``@torch.jit.ignore`` functions and modules held as Python values are ``prim::PythonOp``
    nodes: the runtime calls the Python object with the node's inputs (and the scalars
    TorchScript fixed), on every run, in order — never folded away or run ahead. A module
    calling Python cannot be saved: the error says which call."""
    import python_calls as pc

    s = torch.jit.script(pc.calls_python)
    assert sum(n.kind() == "prim::PythonOp" for n in s.graph.nodes()) == 2
    mod = sr.StaticModule(s)
    g = torch.Generator().manual_seed(0)
    for n in (3, 5, 3):
        x = torch.randn(n, 6, generator=g)
        before = x.clone()
        pc.CALLS.clear()
        with torch.no_grad():
            torch.testing.assert_close(mod(x), pc.calls_python(x))
        assert pc.CALLS == [3, 3]  # ours, then eager's
        torch.testing.assert_close(x, before)
    with pytest.raises(Exception, match="prim::PythonOp"):
        mod.save(tmp_path / "m.srm")
