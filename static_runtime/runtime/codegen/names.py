"""Naming and literals of generated code: one namespace of legal, unique names, and the
constants that can be spelled as Python literals instead of bound as globals."""

from __future__ import annotations

import builtins
import keyword
import math
import re
from typing import Any


class Names:
    """One namespace for every name in the generated code."""

    def __init__(self) -> None:
        self.used: set[str] = set(dir(builtins)) | set(keyword.kwlist)

    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = f"v{base}"
        name = base
        k = 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name


def literal(value: Any) -> str | None:
    """Python source for a constant that can be inlined, or None."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    return None
