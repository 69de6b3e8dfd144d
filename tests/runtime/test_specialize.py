"""Generated code specialised on the input signature its guard checks (issue 4, "Speed").

Every case is differential (``check`` against the TorchScript interpreter, both option sets)
and then looks at the code: what the signature decides is gone from it, and a new signature
gets code of its own.
"""

from __future__ import annotations

import re

import pytest
import torch
from differential import OPTION_SETS, check, script
from torch import Tensor

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.runtime.codegen import generate

#: specialised code on a signature's first call from the arena (what these tests look at)
AT_ONCE = sr.StaticModuleOptions(specialize_after=0)
OFF = sr.StaticModuleOptions(specialize_after=0, specialize_signature=False)


def _code_for(mod: sr.StaticModule, *inputs) -> str:
    """The generated code that runs ``inputs`` (a new signature's first call records)."""
    first = mod(*inputs)
    second = mod(*inputs)
    torch.testing.assert_close(second, first)
    return mod.code


def _run_lines(code: str) -> str:
    return code.split("    def run(", 1)[1]


def _body(code: str) -> str:
    """What ``run`` does past its signature guard (which checks a list's length itself)."""
    return _run_lines(code).split("raise SignatureChanged", 1)[1]


def test_dlrm_embedding_bag_checks_are_folded():
    spec = MODELS["dlrm"]
    model = spec.build()
    b1, b4 = spec.example_inputs(batch=1), spec.example_inputs(batch=4)
    mods = check(model, b1, b4)
    mod = mods["default"]
    for inputs in (b1, b4):
        code = _run_lines(_code_for(mod, *inputs))
        assert ".dim()" not in code and "RaiseException" not in code, code
        assert "_f_embedding_bag_7(" in code
        assert re.search(r"\d+ branches decided", mod.code)
    off = sr.StaticModule(torch.jit.script(model), options=OFF)
    off_code = _run_lines(_code_for(off, *b1))
    assert off_code.count(".dim()") >= 8 and "RaiseException" in off_code
    torch.testing.assert_close(off(*b4), mod(*b4))


def _rank_branch(x: Tensor) -> Tensor:
    y = x * 2.0
    if x.dim() == 2:
        return torch.relu(y) + x.size(1)
    else:
        return y.sum(0) - x.size(-1)


def test_branch_on_rank_specialised_per_signature():
    x2, x3 = torch.randn(3, 4), torch.randn(2, 3, 5)
    mod = check(_rank_branch, [x2], [x3])["default"]
    code2 = _code_for(mod, x2)
    code3 = _code_for(mod, x3)
    for code, kept, gone in ((code2, "relu", "sum"), (code3, "sum", "relu")):
        body = _run_lines(code)
        assert ".dim()" not in body and ".size(" not in body and "if " not in body.split(
            "raise SignatureChanged", 1)[1], body
        assert kept in body and gone not in body, body
    torch.testing.assert_close(mod(x2), _rank_branch(x2))
    torch.testing.assert_close(mod(x3), _rank_branch(x3))


def _int_branch(x: Tensor, n: int) -> Tensor:
    y = x + 1.0
    if n > 3:
        return y * n
    return y - (n * 2 + 1)


def test_int_input_values_are_folded():
    x = torch.randn(2, 3)
    mod = check(_int_branch, [x, 5], [x, 2])["default"]
    big = _run_lines(_code_for(mod, x, 5))
    small = _run_lines(_code_for(mod, x, 2))
    assert "mul" in big and "sub" not in big, big
    assert "sub" in small and "mul" not in small, small
    # n * 2 + 1 with n = 2 is the literal 5: the arithmetic is folded too
    assert re.search(r"_f_sub\w*\(\w+, 5\)", small), small
    for n in (-7, 0, 4, 2**62):
        torch.testing.assert_close(mod(x, n), _int_branch(x, n))


def _sum_list(xs: list[Tensor]) -> Tensor:
    acc = xs[0] * 1.0
    if len(xs) > 2:
        acc = acc + xs[2]
    if xs[1].dim() == 1:
        acc = acc + xs[1]
    return acc + len(xs)


def test_list_length_folded_and_new_length_gets_new_code():
    a, b, c = torch.randn(4), torch.randn(4), torch.randn(4)
    mod = check(_sum_list, [[a, b]], [[a, b, c]])["default"]
    two = _code_for(mod, [a, b])
    three = _code_for(mod, [a, b, c])
    assert two != three
    for code in (two, three):
        body = _body(code)
        assert "len(" not in body and ".dim()" not in body, body
    assert "xs_1[2]" in _body(three) and "xs_1[2]" not in _body(two)
    torch.testing.assert_close(mod([a, b]), _sum_list([a, b]))
    torch.testing.assert_close(mod([a, b, c]), _sum_list([a, b, c]))


# (``y`` a view: no tensor of the arena, so the signature that raises, whose recording
# never ends, still gets code of its own)
_REFUSES_RANK = """
def refuses_rank(x: Tensor) -> Tensor:
    y = x.view(-1)
    if x.dim() != 2:
        raise ValueError("expected a 2-D input, got " + str(x.dim()) + "-D")
    return y + 1.0
"""


def test_folded_branch_that_raises_still_raises_and_names_the_node():
    fn = script(_REFUSES_RANK)
    good, bad = torch.randn(2, 3), torch.randn(2, 3, 4)
    mod = check(fn, [good], [bad])["default"]
    with pytest.raises(torch.jit.Error) as ref:
        fn(bad)
    off = sr.StaticModule(fn, options=OFF)
    for _ in range(3):  # the recording call, then the generated code for this signature
        with pytest.raises(ValueError) as ours:
            mod(bad)
        # TorchScript's message ends with the exception it was asked to raise
        assert str(ref.value).endswith(f"builtins.ValueError: {ours.value}\n"), \
            (ref.value, ours.value)
        with pytest.raises(ValueError) as unspecialised:
            off(bad)
        assert str(unspecialised.value) == str(ours.value)
    assert any("prim::RaiseException" in n for n in ours.value.__notes__), ours.value.__notes__
    body = _run_lines(mod.code)
    assert "RaiseException" in body and ".dim()" not in body and "if " not in body.split(
        "raise SignatureChanged", 1)[1], body
    torch.testing.assert_close(mod(good), fn(good))


def test_option_off_generates_the_unspecialised_code():
    x2 = torch.randn(3, 4)
    fn = script(_rank_branch)
    off = sr.StaticModule(fn, options=OFF)
    code = _code_for(off, x2)
    assert "Specialised" not in code and ".dim()" in code
    rt = off.runtime()
    rt(x2), rt(x2)
    interp = rt._interp
    plain = generate(off.plan, interp._arena_slots(), off._codes.title, interp._guard())
    assert plain.source.split("\n", 1)[1] == code.split("\n", 1)[1]
    on = sr.StaticModule(fn, options=AT_ONCE)
    assert "Specialised" in _code_for(on, x2)
    with pytest.raises(TypeError, match="specialize_signature"):
        sr.StaticModuleOptions(specialize_after=0, specialize_signature=1)


def test_interpreter_executor_ignores_the_option():
    x2, x3 = torch.randn(3, 4), torch.randn(2, 3, 5)
    opts = {"interpreter": sr.StaticModuleOptions(specialize_after=0, executor="interpreter"),
            "interpreter_off": sr.StaticModuleOptions(specialize_after=0, executor="interpreter",
                                                      specialize_signature=False)}
    check(_rank_branch, [x2], [x3], options=opts)


def _no_arena(x: Tensor, k: int) -> Tensor:
    if k == 1:
        return x.sum(x.dim() - 1)
    return x.mean(0)


def test_module_without_planned_memory_still_specialises():
    x2, x3 = torch.randn(3, 4), torch.randn(2, 3, 5)
    opts = {**OPTION_SETS, "no_memory": sr.StaticModuleOptions(specialize_after=0, optimize_memory=False)}
    mod = check(_no_arena, [x2, 1], [x3, 2], options=opts)["no_memory"]
    body = _run_lines(_code_for(mod, x3, 1))
    assert ".dim()" not in body and "mean" not in body, body
    torch.testing.assert_close(mod(x2, 2), _no_arena(x2, 2))


def _mutates_metadata(x: Tensor, xs: list[Tensor]) -> Tensor:
    d = x.dim()
    n = len(xs)
    xs.append(x)
    y = x.clone()
    y.unsqueeze_(0)
    return y * (d + n + len(xs) + y.dim())


def test_writes_that_change_facts_keep_them_unfolded():
    x = torch.randn(3)
    check(_mutates_metadata, [x, [x]], [torch.randn(2, 2), [x, x]])
    mod = sr.StaticModule(script(_mutates_metadata), options=AT_ONCE)
    code = _run_lines(_code_for(mod, x, [x]))
    # The input list is appended to: its length after that is not the key's.
    assert "len(" in code, code


def _emptied_blocks(x: Tensor, n: int) -> Tensor:
    y = x * 2.0
    if bool(x.sum() > 100.0):
        print("large")
    else:
        if x.dim() == 3:
            print("3-D")
    for _ in range(n):
        if x.dim() == 4:
            print("4-D")
    return y + 1.0


def test_blocks_emptied_by_specialisation_still_compile():
    x = torch.randn(2, 3)
    mod = check(_emptied_blocks, [x, 2], [torch.randn(2, 3, 4), 3])["default"]
    body = _run_lines(_code_for(mod, x, 2))
    assert ".dim()" not in body and "pass" in body, body
    torch.testing.assert_close(mod(x, 2), _emptied_blocks(x, 2))


class _OptionalInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: Tensor | None, y: Tensor) -> Tensor:
        z = torch.relu(self.lin(y)) * 3.0
        if x is None:
            return z + 1.0
        return z + x


@pytest.mark.parametrize("options", [sr.StaticModuleOptions(specialize_after=0), OFF], ids=["on", "off"])
def test_optional_tensor_input_switching_to_none(options):
    model = _OptionalInput().eval()
    y = torch.randn(2, 3)
    check(model, [torch.randn(3), y], [None, y], options={"case": options})
    mod = sr.StaticModule(torch.jit.script(model), options=options)
    for x in (torch.randn(3), torch.randn(3), None, None, torch.randn(3), None):
        torch.testing.assert_close(mod(x, y), model(x, y))
    if options.specialize_signature:
        assert " is None" not in _run_lines(mod.code)


def test_sizes_of_intermediates_are_folded():
    """What a traced model records as ``size`` calls on intermediate tensors (a linear's
    output reshaped into heads) folds: the shape of every tensor an operator computes from
    the signature is known."""
    w = torch.randn(16, 8)

    def f(x: Tensor, w: Tensor) -> Tensor:
        y = torch.relu(x @ w.t())
        z = y.view(y.size(0), y.size(1), 4, -1).transpose(1, 2)
        return z.reshape(z.size(0), -1) * float(y.size(1))

    s = script(f)
    for x in (torch.randn(2, 5, 8), torch.randn(3, 7, 8)):
        check(s, [x, w])
    mod = sr.StaticModule(s, options=AT_ONCE)
    code = _run_lines(_code_for(mod, torch.randn(2, 5, 8), w))
    assert ".size(" not in code and "_f_size" not in code
    assert "2, 5, 4, -1" in code and "2, -1" in code


def test_values_computed_from_sizes_fold_through_tensors():
    """A size turned into a tensor and back (``torch.tensor(n)``-style arithmetic a tracer
    records as ``NumToTensor`` → ``add`` → ``Int``) folds to its value; slicing a constant
    buffer with it is computed per signature."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.arange(64).unsqueeze(0))

        def forward(self, x: Tensor) -> Tensor:
            n = torch.ops.prim.NumToTensor(x.size(1))
            m = int(n + 1)
            pos = self.buf[:, 1:m]
            return x + pos.to(x.dtype)

    s = torch.jit.script(M().eval())
    for x in (torch.randn(2, 5), torch.randn(3, 9)):
        check(s, [x])
    mod = sr.StaticModule(s, options=AT_ONCE)
    code = _run_lines(_code_for(mod, torch.randn(2, 5)))
    assert "NumToTensor" not in code and "_f_Int" not in code


def test_meta_shape_fact_keeps_a_view_that_raises_on_real_strides():
    """Facts come from contiguous meta tensors: a ``view`` that the real (transposed) input
    refuses is still run, and raises as the interpreter does, though its size folded."""

    def f(x: Tensor) -> int:
        return x.view(-1).size(0)

    s = script(f)
    mod = sr.StaticModule(s, options=AT_ONCE)
    assert mod(torch.randn(3, 4)) == 12
    bad = torch.randn(4, 3).t()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        s(bad)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        mod(bad)


def test_tensors_the_signature_fixes_become_constants_of_the_code():
    """A position-embedding lookup of positions sliced from a buffer by the input's length
    (a traced transformer's embeddings) depends only on the signature: computed once per
    signature, not per call; a different length gets its own."""

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("positions", torch.arange(16).unsqueeze(0))
            self.emb = torch.nn.Embedding(16, 4)

        def forward(self, x: Tensor) -> Tensor:
            pos = self.positions[:, : x.size(1)]
            return x + self.emb(pos)

    s = torch.jit.script(M().eval())
    for x in (torch.randn(2, 5, 4), torch.randn(3, 9, 4)):
        check(s, [x])
    mod = sr.StaticModule(s, options=AT_ONCE)
    code = _run_lines(_code_for(mod, torch.randn(2, 5, 4)))
    assert "embedding" not in code and "_k_" in code


def test_signature_fixed_tensors_that_are_written_or_returned_stay_per_call():
    """The constant would be shared by every call: not when a node writes it, nor when the
    caller gets it."""

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("positions", torch.arange(16.0))

        def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
            p = self.positions[: x.size(0)] * 2.0
            q = self.positions[: x.size(0)] + 1.0
            q.mul_(x)
            return p, q

    s = torch.jit.script(M().eval())
    for x in (torch.randn(5), torch.randn(7)):
        check(s, [x])
    mod = sr.StaticModule(s, options=AT_ONCE)
    x = torch.randn(5)
    p1, _ = mod(x)
    with torch.inference_mode():
        p1.add_(100.0)  # the caller owns what it got
    p2, q2 = mod(x)
    assert p1 is not p2
    torch.testing.assert_close(p2, torch.arange(5.0) * 2.0)
    torch.testing.assert_close(q2, (torch.arange(5.0) + 1.0) * x)


class _Casts(torch.nn.Module):
    """``to`` a dtype the tensor already has: ``torch.export`` leaves an
    ``_assert_tensor_metadata`` check where the cast was."""

    def forward(self, x: Tensor, ids: Tensor) -> Tensor:
        return torch.relu(x.to(torch.float32)) * ids.to(torch.int64).unsqueeze(-1)


def test_metadata_checks_the_signature_decides_are_left_out():
    import sys
    from pathlib import Path

    from torch.export import Dim

    sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
    from eager_check import check_eager

    model = _Casts().eval()
    batch = Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (torch.randn(2, 4), torch.arange(2)),
                             dynamic_shapes=({0: batch}, {0: batch}))
    assert "_assert_tensor_metadata" in str(sr.StaticModule(ep).graph)
    sets = [(torch.randn(3, 4), torch.arange(3)), (torch.randn(1, 4), torch.arange(1))]
    check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, sets)
    mod = sr.StaticModule(ep, options=AT_ONCE)
    code = _code_for(mod, *sets[0])
    assert "_assert_tensor_metadata" not in code
    assert "_assert_tensor_metadata" in _code_for(sr.StaticModule(ep, options=OFF), *sets[0])
    # A dtype the program was not traced with fails the check, as the program's own run does.
    wrong = (torch.randn(3, 4, dtype=torch.float64), torch.arange(3))
    with pytest.raises(RuntimeError, match="dtype"):
        ep.module()(*wrong)
    with pytest.raises(RuntimeError, match="dtype"):
        mod(*wrong)


class _Positions(torch.nn.Module):
    """A tensor made with an explicit ``layout`` (``torch.strided``: a constant ``torch.export``
    keeps as it is, where TorchScript spells it as an int), then a cast the result already
    has."""

    def forward(self, x: Tensor) -> Tensor:
        pos = torch.ones(x.shape[1], dtype=torch.float32, layout=torch.strided,
                         device=x.device)
        y = x + pos
        return torch.relu(y.to(torch.float32)) * 2


def test_layout_and_memory_format_constants_are_facts():
    """A ``torch.layout`` (or ``torch.memory_format``) constant is a fact like a dtype: the
    values computed past it keep their dtype and shape facts, so the cast's metadata check
    after them is still left out of code specialised on the signature."""
    import sys
    from pathlib import Path

    from torch.export import Dim

    sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
    from eager_check import check_eager

    model = _Positions().eval()
    seq = Dim("seq", min=2, max=64)
    ep = torch.export.export(model, (torch.randn(2, 5),), dynamic_shapes=({1: seq},))
    plain = sr.StaticModule(ep)
    assert "_assert_tensor_metadata" in str(plain.graph)
    assert any(isinstance(c, torch.layout) for c in plain.plan.constants.values())
    sets = [(torch.randn(2, 7),), (torch.randn(2, 3),)]
    check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, sets)
    code = _code_for(sr.StaticModule(ep, options=AT_ONCE), *sets[0])
    assert "_assert_tensor_metadata" not in code
