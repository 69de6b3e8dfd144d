"""Naming and literals of generated code (``runtime/codegen/names.py``)."""

import torch
from differential import script

import static_runtime as sr
from static_runtime.runtime.codegen.names import Names, literal


def test_names_are_legal_and_unique():
    src = """
def f(x: torch.Tensor):
    a = x + 1
    a = a * 2
    a = a - 3
    return a
"""
    code = sr.StaticModule(script(src)).code
    targets = [ln.split("=")[0].strip() for ln in code.splitlines()
               if " = " in ln and not ln.lstrip().startswith("#")]
    assert all(t.replace(", ", "").replace(",", "").replace("_", "a").isalnum() for t in targets)
    assert len(set(targets)) == len(targets)


def test_fresh_names_avoid_builtins_keywords_and_each_other():
    names = Names()
    assert names.fresh("x") == "x"
    assert names.fresh("x") == "x_1"
    assert names.fresh("list") == "list_1" and names.fresh("if") == "if_1"
    assert names.fresh("0.a-b") == "v0_a_b" and names.fresh("") == "v"


def test_literals_are_inlined_only_where_python_spells_them_exactly():
    for value in (None, True, 3, -2.5, "a'b"):
        assert eval(literal(value)) == value
    assert literal(float("inf")) is None and literal(float("nan")) is None
    assert literal([1, 2]) is None and literal(torch.ones(1)) is None
