"""Values a graph's constants and the runtime hold that are neither tensors nor Python
builtins: TorchScript objects and constants no Python value can stand for.

They belong to the IR, not to an importer: the TorchScript frontend makes them, operators
(``ops/native``), the execution plan and saved modules (``runtime/serialize.py``) read them.
"""

from __future__ import annotations


class ScriptObjectValue:
    """A TorchScript object as the runtime holds it: a module's mirrored state (made by the
    importer) or an instance of a TorchScript class (made by ``prim::CreateObject``).

    Its attributes live in a dict; methods were inlined into the graph, so the object needs
    nothing else. ``type_name`` is the qualified name of its TorchScript class, as the IR's
    ``ClassType`` spells it."""

    __slots__ = ("attrs", "type_name")

    def __init__(self, type_name: str, attrs: dict | None = None):
        self.type_name = type_name
        self.attrs: dict = {} if attrs is None else attrs

    def __repr__(self) -> str:
        return f"<{self.type_name} object {self.attrs}>"


class UnrepresentableConstant:
    """A constant the importer cannot hold as a Python value (e.g. a function reference
    that inlining left unused). Running a node that reads it is refused at preparation."""

    def __init__(self, type_str: str):
        self.type_str = type_str

    def __repr__(self) -> str:
        return f"UnrepresentableConstant({self.type_str})"
