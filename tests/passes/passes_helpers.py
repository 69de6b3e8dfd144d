"""Helpers for the pass tests: build graphs from IR text, look at them, run them.

Graphs run on the real runtime (``StaticModule``) with every pass switched off, so the graph
before and after a pass can be compared directly; scripted functions are compared with the
TorchScript interpreter by ``differential.check``.
"""

from __future__ import annotations

from typing import Any

import torch
from differential import assert_same, check

import static_runtime as sr
from static_runtime.ir.graph import Argument, Graph, Signature
from static_runtime.ir.parser import parse_graph
from static_runtime.ir.verifier import verify
from static_runtime.ops.registry import evaluator
from static_runtime.passes.pipeline import PASS_ORDER
from static_runtime.passes.registry import passes

NO_PASSES = sr.StaticModuleOptions(**{p: False for p in PASS_ORDER})


def only(name: str, **extra: Any) -> sr.StaticModuleOptions:
    """Options with one pass on and every other pass off (``extra``: other fields)."""
    flags: dict[str, Any] = {p: p == name for p in PASS_ORDER}
    flags.update(extra)
    return sr.StaticModuleOptions(**flags)


def ir(text: str, constants: dict[str, Any] | None = None) -> Graph:
    """A verified graph from IR text (``<ref NAME>`` attributes from ``constants``), with a
    positional signature."""
    graph = parse_graph(text, constants)
    graph.signature = Signature([Argument(v.name) for v in graph.inputs])
    verify(graph)
    return graph


def kinds(graph: Graph, *, constants: bool = False) -> list[str]:
    """Node kinds in program order (nested blocks included), constants left out."""
    return [n.kind for n in graph.walk() if constants or n.kind != "prim::Constant"]


def run_pass(name: str, graph: Graph) -> bool:
    """Run one registered pass, then verify the graph."""
    changed = passes(evaluator)[name](graph)
    verify(graph)
    return changed


def run_graph(graph: Graph, *args: Any) -> Any:
    """Run an IR graph as it is, on the real runtime with no pass."""
    return sr.StaticModule(graph, options=NO_PASSES)(*args)


def assert_pass_preserves(name: str, text: str, *input_sets: tuple) -> Graph:
    """Run graph ``text`` before and after pass ``name`` on each input set; results must match
    (values, dtypes, structure). Returns the rewritten graph."""
    before = ir(text)
    after = ir(text)
    run_pass(name, after)
    for args in input_sets:
        expected = run_graph(before, *_clone(args))
        actual = run_graph(after, *_clone(args))
        assert_same(actual, expected)
    return after


def check_scripted(fn: Any, name: str, inputs: list, second: list | None = None) -> None:
    """The TorchScript interpreter against our runtime with only pass ``name``, and with it
    off (``differential.check``: values, unchanged inputs, outputs not overwritten)."""
    check(fn, inputs, second, options={"only": only(name), "none": NO_PASSES})


def _clone(args: tuple) -> list:
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
