"""``variadic_sizes``: a size list built in the graph and read only by calls whose binding
provably takes its elements as separate ints is never built; the generated code passes the
ints (``x.view(a, b, -1)``). The TorchScript interpreter is the oracle."""

import pytest
from differential import check
from op_cases import Inputs, case, ts

import static_runtime as sr

I = Inputs(12)
randn = I.randn

CASES = [
    case("view", ts("x", "x.view(x.size(0), -1, 2)"), [randn(3, 4)], [randn(2, 6)]),
    case("view_shared_list", ts("x", """
        s = [x.size(0), -1]
        return x.view(s) + 1, (x * 2).view(s), x.reshape(s)
        """), [randn(3, 4)], [randn(2, 6)]),
    case("view_one_element", ts("x", "x.view([x.numel()])"), [randn(3, 4)], [randn(2, 6)]),
    case("view_error", ts("x", "x.view(x.size(0), 5)"), [randn(3, 4)], [randn(2, 5)]),
    case("view_noncontiguous_error", ts("x", "x.t().view(x.size(0), -1)"), [randn(3, 4)],
         [randn(2, 5)]),
    case("reshape", ts("x", "x.reshape(x.size(1), x.size(0))"), [randn(3, 4)], [randn(2, 6)]),
    case("expand", ts("x", "x.expand(3, x.size(0), x.size(1))"), [randn(3, 1)],
         [randn(1, 5)]),
    case("permute", ts("x", "x.permute(2, 0, 1)"), [randn(3, 4, 2)], [randn(2, 6, 1)]),
    case("repeat", ts("x", "x.repeat(2, x.size(0))"), [randn(3, 4)], [randn(2, 6)]),
    case("new_zeros", ts("x", "x.new_zeros([x.size(0), 2])"), [randn(3, 4)], [randn(2, 6)]),
    case("zeros_device", ts("x", "torch.zeros([2, x.size(0)], device=x.device)"),
         [randn(3, 4)], [randn(2, 6)]),
    case("list_also_returned", ts("x", """
        s = [x.size(0), -1]
        return x.view(s), s
        """), [randn(3, 4)], [randn(2, 6)]),
    case("list_appended_first", ts("x", """
        s = [x.size(0)]
        s.append(-1)
        return x.view(s)
        """), [randn(3, 4)], [randn(2, 6)]),
    case("in_a_branch", ts("x, b: bool", """
        s = [x.size(0), -1]
        if b:
            y = x.view(s)
        else:
            y = x.reshape(s) * 2
        return y
        """), [randn(3, 4), True], [randn(2, 6), False]),
]


@pytest.mark.parametrize("model,first,second,tol", CASES)
def test_against_torchscript(model, first, second, tol):
    check(model, first, second, **tol)


def _code(fn, **options):
    mod = sr.StaticModule(fn, options=sr.StaticModuleOptions(**options))
    mod(randn(3, 4))
    return mod.code


def test_generated_code_passes_the_elements():
    fn = ts("x", """
        s = [x.size(0), -1]
        return x.view(s) + 1, x.reshape(s)
        """)
    code = _code(fn, specialize_signature=False)
    assert "= [" not in code            # the list is never built
    assert ", -1)" in code
    off = _code(fn, specialize_signature=False, variadic_sizes=False)
    assert "-1]" in off


def test_list_with_another_reader_is_built():
    fn = ts("x", """
        s = [x.size(0)]
        s.append(-1)
        return x.view(s)
        """)
    assert "= [" in _code(fn, specialize_signature=False)
