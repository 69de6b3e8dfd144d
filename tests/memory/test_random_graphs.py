"""Property test: random DAGs of elementwise, matmul, view and cat operators with random
shapes give eager PyTorch's results with the arena on, and every memory plan verifies."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import static_runtime as sr

UNARY = ["torch.tanh({a})", "torch.sigmoid({a})", "torch.relu({a})", "torch.neg({a})",
         "torch.abs({a})", "({a} * 0.5)", "torch.exp(torch.clamp({a}, -3.0, 3.0))"]
BINARY = ["({a} + {b})", "({a} * {b})", "({a} - {b})", "torch.maximum({a}, {b})"]


@st.composite
def programs(draw):
    """TorchScript (and Python) source of a random DAG over 2-D tensors, its input shapes."""
    n_inputs = draw(st.integers(1, 3))
    shapes: list[tuple[int, int]] = []
    lines: list[str] = []
    for i in range(n_inputs):
        shapes.append((draw(st.integers(1, 6)), draw(st.integers(1, 6))))
    names = [f"x{i}" for i in range(n_inputs)]
    env = list(zip(names, shapes))
    for k in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["unary", "binary", "matmul", "view", "t", "cat"]))
        a, (r, c) = draw(st.sampled_from(env))
        name = f"v{k}"
        if kind == "unary":
            expr, shape = draw(st.sampled_from(UNARY)).format(a=a), (r, c)
        elif kind == "binary":
            same = [e for e in env if e[1] == (r, c)]
            b = draw(st.sampled_from(same))[0]
            expr, shape = draw(st.sampled_from(BINARY)).format(a=a, b=b), (r, c)
        elif kind == "matmul":
            fits = [e for e in env if e[1][0] == c]
            if fits:
                b, (_, c2) = draw(st.sampled_from(fits))
                expr, shape = f"torch.matmul({a}, {b})", (r, c2)
            else:
                expr, shape = f"torch.matmul({a}, {a}.t())", (r, r)
        elif kind == "view":
            expr, shape = f"{a}.reshape(-1).view({c}, {r})", (c, r)
        elif kind == "t":
            expr, shape = f"{a}.t().contiguous()", (c, r)
        else:
            fits = [e for e in env if e[1][1] == c]
            b = draw(st.sampled_from(fits))[0]
            rows = r + next(s for n, s in env if n == b)[0]
            expr, shape = f"torch.cat([{a}, {b}], 0)", (rows, c)
        lines.append(f"    {name} = {expr}")
        env.append((name, shape))
    produced = [n for n, _ in env[n_inputs:]]
    outs = draw(st.lists(st.sampled_from(produced), min_size=1, max_size=3, unique=True))
    params = ", ".join(f"{n}: torch.Tensor" for n in names)
    ret = f"({', '.join(outs)},)" if len(outs) > 1 else outs[0]
    source = f"def f({params}):\n" + "\n".join(lines) + f"\n    return {ret}\n"
    return source, shapes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_graphs_match_eager(program):
    source, shapes = program
    scope: dict = {"torch": torch}
    exec(source, scope)  # the same source is plain Python: eager PyTorch is the oracle
    eager = scope["f"]
    scripted = torch.jit.CompilationUnit(source).f
    mod = sr.StaticModule(scripted, options=sr.StaticModuleOptions(verify_memory_plans=True))
    gen = torch.Generator().manual_seed(len(source))
    held = []
    for _ in range(3):  # records and plans, then runs twice in the arena
        inputs = [torch.randn(r, c, generator=gen) for r, c in shapes]
        before = [x.clone() for x in inputs]
        expected = eager(*inputs)
        actual = mod(*inputs)
        torch.testing.assert_close(actual, expected)
        for x, b in zip(inputs, before):
            torch.testing.assert_close(x, b)
        held.append((actual, expected))
    for actual, expected in held:  # earlier results were not overwritten by later calls
        torch.testing.assert_close(actual, expected)
    if mod.plan.managed_slots:
        mod.memory_plan().verify()
