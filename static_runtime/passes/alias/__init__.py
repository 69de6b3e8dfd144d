"""Alias analysis: which values may be the same object (or share storage), what containers
may hold, and who writes what — the facts every rewrite that moves, removes or reuses a value
asks before it does.

* ``families`` — what kinds of object a value of a type may be or hold;
* ``rules`` — how structural prim nodes relate their outputs to their inputs;
* ``build`` — the alias classes of one graph, built from schemas and those rules;
* ``db`` — ``AliasDb``, the questions passes, memory planning and the runtime ask of them.

The names below are the analysis's interface to the rest of the package.
"""

from static_runtime.passes.alias.db import AliasDb
from static_runtime.passes.alias.families import (
    ALL_FAMILIES,
    DICT,
    FUTURE,
    LIST,
    OBJECT,
    TENSOR,
    TUPLE,
    deep_families,
    element_families,
    is_container_type,
    is_mutable,
    shallow_families,
)
from static_runtime.passes.alias.rules import PRIM_RULES, Rule

__all__ = [
    "ALL_FAMILIES", "DICT", "FUTURE", "LIST", "OBJECT", "PRIM_RULES", "TENSOR", "TUPLE",
    "AliasDb", "Rule", "deep_families", "element_families", "is_container_type", "is_mutable",
    "shallow_families",
]
