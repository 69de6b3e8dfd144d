"""The whole generated function (``runtime/codegen/function.py``): compiled, registered with
``linecache``, every line mapped back to its IR node."""

import linecache

import torch
from codegen_cases import LOOPY
from differential import script

import static_runtime as sr
from static_runtime.runtime.codegen import generate, stamp_layout


def test_generated_source_is_in_linecache_for_debuggers():
    mod = sr.StaticModule(script(LOOPY))
    for _ in range(2):  # (the first call records the memory plan; the code comes after it)
        mod(torch.ones(3), 2, True)
    code = mod._codes.latest
    assert any(linecache.getline(code.filename, n).startswith("def _factory(")
               for n in range(1, 8))


def test_every_line_of_run_that_runs_a_node_maps_back_to_it():
    """``line_to_node``: the line of each call names its node, then the nodes around it."""
    mod = sr.StaticModule(script(LOOPY))
    code = generate(mod.plan, frozenset(), "f")
    lines = code.source.splitlines()
    matmul_like = [n for n, text in enumerate(lines, 1) if "= _f_relu(" in text]
    assert matmul_like
    for n in matmul_like:
        kinds = [pn.kind for pn in code.nodes_at(n)]
        assert kinds[0] == "aten::relu" and "prim::If" in kinds and "prim::Loop" in kinds
    assert code.nodes_at(1) == ()  # the header runs no node


def test_timed_code_returns_one_reading_between_timed_neighbours():
    mod = sr.StaticModule(script(LOOPY))
    timed = frozenset({0, 1, 3})
    code = generate(mod.plan, frozenset(), "f", timed=timed)
    outputs, stamps = code.factory(None, None)(torch.ones(3), 2, True)
    # readings: before 0, after 0 = before 1, after 1, before 3, after 3, before the return
    assert len(stamps) == 6 and list(stamps) == sorted(stamps) and len(outputs) == 1
    assert stamp_layout(timed) == [(0, 0), (1, 1), (3, 3)]
