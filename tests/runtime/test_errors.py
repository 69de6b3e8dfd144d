"""Bad input gives a clear error, never a wrong answer (DESIGN.md, "Rules the runtime keeps").

Arguments that do not fit the signature, models that cannot be imported, operators nothing
can run (refused at construction, with kind, schema and source line), exceptions raised by
an operator mid-run (PyTorch's message, plus a note naming the node), and a runtime entered
twice.
"""

from __future__ import annotations

import copy
import os
import re

import pytest
import torch
from differential import OPTION_SETS, assert_same, check, script

import static_runtime as sr

# --------------------------------------------------------------------------- custom operators
#
# ``sr_test_errors::mutate_list`` writes into its list argument: PyTorch can run it, but only
# a native implementation could (the fallback's conversion to TorchScript values copies the
# list, losing the write), and none is registered, so the registry must refuse it.
# ``sr_test_errors::call_back`` calls back into Python (``_HOOK``), which lets a test re-enter
# the runtime from inside a run.

_LIB = torch.library.Library("sr_test_errors", "DEF")
_LIB.define("mutate_list(int[](a!) x) -> ()")
_LIB.impl("mutate_list", lambda x: None, "CompositeExplicitAutograd")
_HOOK = [lambda x: x + 1]


@torch.library.custom_op("sr_test_errors::call_back", mutates_args=())
def _call_back(x: torch.Tensor) -> torch.Tensor:
    return _HOOK[0](x).clone()


def _uses_mutate_list(xs: list[int]) -> list[int]:
    torch.ops.sr_test_errors.mutate_list(xs)
    return xs


def _uses_call_back(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.sr_test_errors.call_back(torch.relu(x)) * 2


def _line_of(fn, text: str) -> int:
    """The source line (in this file) of ``text`` inside ``fn``."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return start + k
    raise AssertionError(f"{text!r} not in {fn.__name__}")


HERE = os.path.basename(__file__)


# --------------------------------------------------------------------------- arguments


def _typed(x: torch.Tensor, n: int, scale: float = 2.0) -> torch.Tensor:
    return x * n * scale


SIGNATURE = "forward(x: Tensor, n: int, scale: float = 2.0)"


@pytest.fixture(scope="module")
def typed_module() -> sr.StaticModule:
    return sr.StaticModule(script(_typed))


def _argument_error(mod, *args, **kwargs) -> str:
    with pytest.raises(sr.ArgumentError) as info:
        mod(*args, **kwargs)
    assert isinstance(info.value, TypeError), "ArgumentError is a TypeError"
    return str(info.value)


def test_too_many_arguments(typed_module):
    msg = _argument_error(typed_module, torch.ones(2), 1, 2.0, 3)
    assert "too many arguments" in msg and "takes 3, got 4" in msg and SIGNATURE in msg


def test_missing_argument(typed_module):
    msg = _argument_error(typed_module, torch.ones(2))
    assert "missing argument 'n'" in msg and SIGNATURE in msg
    msg = _argument_error(typed_module)
    assert "missing argument 'x'" in msg


def test_unknown_keyword(typed_module):
    msg = _argument_error(typed_module, torch.ones(2), 1, bogus=3)
    assert "unknown keyword" in msg and "'bogus'" in msg and SIGNATURE in msg


def test_argument_given_twice(typed_module):
    msg = _argument_error(typed_module, torch.ones(2), 1, n=2)
    assert "'n'" in msg and "both" in msg and SIGNATURE in msg


def test_tensor_where_int_expected(typed_module):
    msg = _argument_error(typed_module, torch.ones(2), torch.tensor(3))
    assert "argument 'n'" in msg and "expected int" in msg
    assert "got Tensor(dtype=torch.int64, shape=())" in msg and SIGNATURE in msg


def test_int_where_tensor_expected(typed_module):
    msg = _argument_error(typed_module, 3, 2)
    assert "argument 'x'" in msg and "expected Tensor" in msg and "got int" in msg
    assert SIGNATURE in msg


@pytest.mark.parametrize("args,kwargs,name,came", [
    ((torch.ones(2), 2.5), {}, "n", "float"),
    ((torch.ones(2), 2, "a"), {}, "scale", "str"),
    ((torch.ones(2),), {"n": None}, "n", "NoneType"),
    ((torch.ones(2),), {"n": 1, "scale": torch.ones(1)}, "scale", "Tensor"),
], ids=["float_for_int", "str_for_float", "none_for_int", "tensor_for_float_keyword"])
def test_wrong_types_name_argument(typed_module, args, kwargs, name, came):
    msg = _argument_error(typed_module, *args, **kwargs)
    assert f"argument {name!r}" in msg and f"got {came}" in msg and SIGNATURE in msg


def test_list_argument_with_wrong_element():
    def f(x: torch.Tensor, idx: list[int]) -> torch.Tensor:
        return x[idx]

    mod = sr.StaticModule(script(f))
    msg = _argument_error(mod, torch.arange(4.0), [1, "a"])
    assert "argument 'idx'" in msg and "int[]" in msg
    assert_same(mod(torch.arange(4.0), [3, 1]), torch.tensor([3.0, 1.0]))


def test_arguments_by_keyword_and_default_still_work(typed_module):
    x = torch.arange(3.0)
    assert_same(typed_module(n=2, x=x), x * 4)
    assert_same(typed_module(x, 2, scale=0.5), x)


def test_positional_calls_of_other_exact_types_take_the_general_binder(typed_module):
    """The compiled binder accepts only exactly the named types; a subclass, an int for a
    float and a bool for an int go through the general one (converted, or refused)."""
    x = torch.arange(3.0)
    assert_same(typed_module(x, 2, 0.5), x)
    assert_same(typed_module(torch.nn.Parameter(x, requires_grad=False), 2, 0.5), x)
    assert_same(typed_module(x, 2, 1), x * 2)  # an int where a float is declared
    assert "got bool" in _argument_error(typed_module, x, True, 0.5)
    assert "got int" in _argument_error(typed_module, 3, 2, 0.5)


def _appends(xs: list[torch.Tensor], n: list[int]) -> list[torch.Tensor]:
    xs.append(xs[0] + 1)
    n.append(3)
    n[0] = 7
    return xs


def _nested(xss: list[list[int]], pair: tuple[list[int], int]) -> int:
    xss[0].append(5)
    pair[0].append(pair[1])
    return len(xss[0]) + len(pair[0])


def _sets_key(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    d["new"] = d["a"] * 2
    return d


@pytest.mark.parametrize("fn,first,second", [
    (_appends, [[torch.ones(2)], [1]], [[torch.ones(3), torch.zeros(3)], [1, 2]]),
    (_nested, [[[1], [2]], ([1, 2], 3)], [[[]], ([], 0)]),
    (_sets_key, [{"a": torch.ones(2)}], [{"a": torch.ones(3), "b": torch.zeros(1)}]),
], ids=["list_append", "nested_lists", "dict_setitem"])
def test_container_inputs_are_not_written(fn, first, second):
    """A graph that writes into a list or dict argument must not change the caller's."""
    check(fn, first, second)


def test_dict_argument_with_wrong_value_type():
    mod = sr.StaticModule(script(_sets_key))
    msg = _argument_error(mod, {"a": 1})
    assert "argument 'd'" in msg and "Dict(str, Tensor)" in msg and "got dict" in msg


def test_changed_dtype_between_calls_is_not_wrong():
    """Kept out-variant tensors of one dtype must not be reused for another."""
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a * b + 1) / 3

    x32 = torch.randn(3, 4)
    check(f, [x32, x32], [x32.double(), x32.double()])
    check(f, [x32, x32], [torch.arange(12).view(3, 4), torch.arange(12).view(3, 4)])


# --------------------------------------------------------------------------- training mode


class _Trainable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.bn(self.linear(x)))


def test_module_in_training_mode_runs_as_eval_and_stays_training():
    scripted = script(_Trainable())
    with torch.no_grad():
        scripted.bn.running_mean.uniform_(-1, 1)
        scripted.bn.running_var.uniform_(0.5, 2)
    scripted.train()
    reference = copy.deepcopy(scripted).eval()
    mod = sr.StaticModule(scripted)
    assert scripted.training and scripted.bn.training and scripted.drop.training
    x = torch.randn(5, 8)
    for _ in range(2):  # eval-mode results: no dropout, running statistics, deterministic
        assert_same(mod(x), reference(x))
    assert (scripted(x) == 0).any(), "the user's module should still drop out (training)"


def test_submodule_training_flags_are_restored_exactly():
    scripted = script(_Trainable())
    scripted.train()
    scripted.bn.eval()
    sr.StaticModule(scripted)
    assert [m.training for m in (scripted, scripted.linear, scripted.bn, scripted.drop)] == \
        [True, True, False, True]


# --------------------------------------------------------------------------- importing


def test_missing_path(tmp_path):
    path = tmp_path / "nowhere" / "model.pt"
    for given in (str(path), path):
        with pytest.raises(FileNotFoundError, match=re.escape(str(path))):
            sr.StaticModule(given)


def _write_random_bytes(path):
    path.write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0),
                                   dtype=torch.uint8).numpy().tobytes())


def _write_text(path):
    path.write_text("def forward(self, x):\n    return x\n")


def _write_state_dict(path):
    torch.save(torch.nn.Linear(4, 4).state_dict(), path)


def _write_empty(path):
    path.write_bytes(b"")


@pytest.mark.parametrize("write", [_write_random_bytes, _write_text, _write_state_dict,
                                   _write_empty],
                         ids=["random_bytes", "text", "state_dict", "empty"])
def test_file_that_is_not_a_torchscript_archive(tmp_path, write):
    path = tmp_path / "model.pt"
    write(path)
    with pytest.raises(sr.FrontendError, match=re.escape(str(path))) as info:
        sr.StaticModule(str(path))
    assert "TorchScript archive" in str(info.value)


def test_directory_is_not_an_archive(tmp_path):
    with pytest.raises(sr.FrontendError, match=re.escape(str(tmp_path))):
        sr.StaticModule(tmp_path)


def test_plain_nn_module_without_example_inputs():
    with pytest.raises(sr.FrontendError, match="Linear") as info:
        sr.StaticModule(torch.nn.Linear(4, 4))
    assert "torch.jit.script" in str(info.value) or "example_inputs" in str(info.value)


def test_unsupported_model_type():
    with pytest.raises(sr.FrontendError, match="dict"):
        sr.StaticModule({"weight": torch.ones(1)})


# --------------------------------------------------------------------------- unsupported ops


MUTATE_SCHEMA = "sr_test_errors::mutate_list(int[](a!) x) -> ()"


@pytest.mark.parametrize("name,opts", OPTION_SETS.items())
def test_unsupported_operator_reported_at_construction(name, opts):
    fn = script(_uses_mutate_list)
    assert fn([1, 2]) == [1, 2], "PyTorch itself can run the operator"
    with pytest.raises(sr.UnsupportedOperatorError) as info:
        sr.StaticModule(fn, options=opts)
    e = info.value
    line = _line_of(_uses_mutate_list, "torch.ops.sr_test_errors.mutate_list")
    assert e.node_kind == "sr_test_errors::mutate_list"
    assert e.schema == MUTATE_SCHEMA
    assert e.source == f"{HERE}:{line}"
    msg = str(e)
    assert "sr_test_errors::mutate_list" in msg and MUTATE_SCHEMA in msg
    assert f"{HERE}:{line}" in msg


def test_unsupported_operator_in_ir_text():
    graph = torch._C.parse_ir(
        "graph(%x : int[]):\n"
        "  sr_test_errors::mutate_list(%x)\n"
        "  return (%x)\n")
    with pytest.raises(sr.UnsupportedOperatorError) as info:
        sr.StaticModule(graph)
    assert info.value.node_kind == "sr_test_errors::mutate_list"
    assert MUTATE_SCHEMA in str(info.value)


def test_unsupported_operator_inside_control_flow_is_found():
    def f(xs: list[int], flag: bool) -> list[int]:
        if flag:
            torch.ops.sr_test_errors.mutate_list(xs)
        return xs

    with pytest.raises(sr.UnsupportedOperatorError, match="sr_test_errors::mutate_list"):
        sr.StaticModule(script(f))


# --------------------------------------------------------------------------- errors mid-run


def _add_mismatch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = torch.relu(a)
    z = y + b
    return z * 2


def _eager_error(fn, *args) -> BaseException:
    with pytest.raises(Exception) as info:  # whatever PyTorch raises
        fn(*args)
    return info.value


@pytest.mark.parametrize("name,opts", OPTION_SETS.items())
def test_op_error_mid_run_keeps_pytorch_message_and_names_node(name, opts):
    mod = sr.StaticModule(script(_add_mismatch), options=opts)
    good = (torch.ones(2, 3), torch.ones(2, 3))
    bad = (torch.ones(2, 3), torch.ones(4, 5))
    expected = _eager_error(torch.add, torch.ones(2, 3), torch.ones(4, 5))
    line = _line_of(_add_mismatch, "z = y + b")
    rt = mod.runtime()
    for _ in range(2):  # before and after kept (out-variant) tensors exist
        with pytest.raises(type(expected)) as info:
            rt(*bad)
        assert str(expected) in str(info.value)
        notes = getattr(info.value, "__notes__", [])
        # the node may have been specialised (aten::add → static_runtime::add): same line
        assert any(re.search(r"\w+::add\b", n) and f"{HERE}:{line}" in n for n in notes), notes
        assert_same(rt(*good), torch.full((2, 3), 4.0))
    with pytest.raises(type(expected)):
        mod(*bad)
    assert_same(mod(*good), torch.full((2, 3), 4.0))


def test_op_error_inside_loop_names_inner_node_first():
    def f(x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = torch.matmul(x, y)
        return x

    mod = sr.StaticModule(script(f))
    with pytest.raises(RuntimeError) as info:
        mod(torch.ones(2, 3), torch.ones(4, 4), 2)
    notes = info.value.__notes__
    assert "aten::matmul" in notes[0], notes
    assert any("prim::Loop" in n for n in notes[1:]), notes
    assert_same(mod(torch.ones(2, 2), torch.eye(2), 3), torch.ones(2, 2))


def test_raise_in_model_propagates():
    def f(x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() < 0):
            raise ValueError("negative input")
        return x + 1

    mod = sr.StaticModule(script(f))
    with pytest.raises(Exception, match="negative input"):
        mod(-torch.ones(2))
    assert_same(mod(torch.ones(2)), torch.full((2,), 2.0))


# --------------------------------------------------------------------------- re-entrancy


@pytest.fixture
def hook():
    saved = _HOOK[0]
    yield _HOOK
    _HOOK[0] = saved


def test_runtime_used_reentrantly_is_refused(hook):
    mod = sr.StaticModule(script(_uses_call_back))
    rt = mod.runtime()
    x = torch.randn(3)
    hook[0] = lambda t: t + 1
    first = rt(x)
    assert_same(first, (torch.relu(x) + 1) * 2)
    hook[0] = lambda t: rt(t)
    with pytest.raises(RuntimeError, match="already running") as info:
        rt(x)
    assert any("sr_test_errors::call_back" in n for n in info.value.__notes__)
    hook[0] = lambda t: t + 1
    assert_same(rt(x), first)
    assert_same(first, (torch.relu(x) + 1) * 2)


def test_module_call_from_inside_a_run_borrows_another_runtime(hook):
    """Calling the StaticModule (not one runtime) again from inside a run is safe."""
    mod = sr.StaticModule(script(_uses_call_back))
    depth = [0]

    def again(t):
        if depth[0]:
            return t + 1
        depth[0] += 1
        try:
            return mod(t)
        finally:
            depth[0] -= 1

    hook[0] = again
    x = torch.randn(3)
    inner = (torch.relu(torch.relu(x)) + 1) * 2
    assert_same(mod(x), inner * 2)

