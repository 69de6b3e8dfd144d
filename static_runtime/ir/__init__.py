"""The SSA IR: graphs, their types, the facts of the operator schemas their nodes carry
(``schema``), the schemas of the operators graph preparation introduces (``own_ops``), their
canonical text form, and a verifier."""

from static_runtime.ir import own_ops, types
from static_runtime.ir.graph import Argument, Block, Graph, Node, Signature, Use, Value
from static_runtime.ir.parser import IRParseError, parse_graph
from static_runtime.ir.printer import print_graph, print_graph_with_constants
from static_runtime.ir.verifier import IRVerificationError, verify

__all__ = [
    "Argument",
    "Block",
    "Graph",
    "IRParseError",
    "IRVerificationError",
    "Node",
    "Signature",
    "Use",
    "Value",
    "own_ops",
    "parse_graph",
    "print_graph",
    "print_graph_with_constants",
    "types",
    "verify",
]
