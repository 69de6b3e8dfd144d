"""Helpers for the alias analysis tests: analyse IR text, find its values by name."""

from passes.passes_helpers import ir

from static_runtime.ir.graph import Graph
from static_runtime.passes.alias import AliasDb


def values(graph: Graph) -> dict:
    found = {v.name: v for v in graph.inputs}
    for n in graph.walk():
        for b in n.blocks:
            found.update({v.name: v for v in b.inputs})
        found.update({v.name: v for v in n.outputs})
    return found


def analyze(text: str):
    g = ir(text)
    return AliasDb(g), values(g)
