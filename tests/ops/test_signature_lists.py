"""The binding signature lists rebuilt from torchgen: the same lists, in the same order, as
the compiled argument parsers hold."""

import re

import pytest
import torch

from static_runtime.ops import signature_lists as lists
from static_runtime.ops.python_signatures import is_dunder

VF, TB = torch._C._VariableFunctions, torch._C.TensorBase


def _names(text: str) -> list[str]:
    parts = text.split(", ") if text else []
    return ["*" if p == "*" else p.split(" = ")[0].split(" ")[-1] for p in parts]


def test_signature_lists_match_the_compiled_bindings():
    """For every binding with several signatures (deprecated ones, which the parser tries
    last, aside), the list rebuilt from torchgen is the one the compiled parser holds: same
    order, same parameter names (its error message lists the non-deprecated signatures in
    the order it tries them)."""
    modules = {"torch": VF, "nn": torch._C._nn, "fft": torch._C._fft,
               "linalg": torch._C._linalg, "special": torch._C._special, "method": TB}
    _, by_name = lists._yaml_entries()
    checked = 0
    for name in sorted(by_name):
        if is_dunder(name):
            continue
        for ns, module in modules.items():
            sigs = lists.signatures(ns, name)
            if sum(not s.deprecated for s in sigs) < 2:
                continue
            binding = getattr(module, name)
            # more arguments than any signature takes: the message lists them all
            junk = {f"not_a_parameter_{i}": 1 for i in range(40)}
            with pytest.raises(TypeError) as info:
                if ns == "method":
                    binding(torch.empty(0), object(), **junk)
                else:
                    binding(object(), **junk)
            listed = re.findall(r"^ \* \((.*)\)$", str(info.value), re.MULTILINE)
            ours = []
            for sig in sigs:
                if sig.deprecated:
                    continue
                names, kw = [], False
                for p in sig.params:
                    if p.kw_only and not kw:
                        names.append("*")
                        kw = True
                    names.append(p.name)
                ours.append(names)
            assert ours == [_names(t) for t in listed], f"{ns}.{name}"
            checked += 1
    assert checked > 200
