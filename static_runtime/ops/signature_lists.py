"""The signature lists of PyTorch's generated Python bindings, rebuilt with the torchgen
functions the build used (``gen_python_functions``) from the ``native_functions.yaml`` and
``deprecated.yaml`` the torch wheel ships, in the order the argument parser tries them.
Without torchgen, nothing is known and every list is empty."""

from __future__ import annotations

import functools
import itertools
import re
from collections import defaultdict
from pathlib import Path

from static_runtime.ops.python_signatures import PySignature, parse_signature
from static_runtime.ops.signature_cache import disk_cache

#: Binding namespaces: the module object's attribute path, and torchgen's predicate name.
NAMESPACES = {
    "torch": "is_py_torch_function",
    "nn": "is_py_nn_function",
    "fft": "is_py_fft_function",
    "linalg": "is_py_linalg_function",
    "special": "is_py_special_function",
    "method": "is_py_variable_method",
}


def _torchgen():
    """torchgen's modules, or None when they cannot be imported."""
    try:
        import torchgen
        from torchgen.api import python as api_python
        from torchgen.gen import parse_tags_yaml
        from torchgen.model import Location, NativeFunction
        from torchgen.packaged.autograd import gen_python_functions as gpf
        from torchgen.yaml_utils import YamlLoader
    except ImportError:
        return None
    return {"root": Path(torchgen.__file__).parent, "api_python": api_python,
            "parse_tags_yaml": parse_tags_yaml, "Location": Location,
            "NativeFunction": NativeFunction, "gpf": gpf, "YamlLoader": YamlLoader}


@functools.cache
def _yaml_entries() -> tuple[dict, dict[str, list[tuple[int, str]]]] | None:
    """torchgen, and the text of each ``native_functions.yaml`` entry by operator base name.

    Parsing the whole file into ``NativeFunction``s takes about a second; entries are parsed
    on demand instead, by name."""
    tg = _torchgen()
    if tg is None:
        return None
    path = tg["root"] / "packaged" / "ATen" / "native" / "native_functions.yaml"
    if not path.exists():
        return None
    by_name: dict[str, list[tuple[int, str]]] = defaultdict(list)
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("- func:")] + [len(lines)]
    for a, b in itertools.pairwise(starts):
        func = lines[a][len("- func:"):].strip()
        base = re.split(r"[.(]", func, maxsplit=1)[0]
        by_name[base].append((a + 1, "\n".join(lines[a:b])))
    return tg, dict(by_name)


@functools.cache
def _valid_tags() -> set[str]:
    tg, _ = _yaml_entries()
    return tg["parse_tags_yaml"](str(tg["root"] / "packaged" / "ATen" / "native" / "tags.yaml"))


@functools.cache
def _native_functions(name: str) -> tuple:
    """The ``NativeFunction``s named ``name`` (all overloads) that get a Python binding."""
    import yaml

    loaded = _yaml_entries()
    if loaded is None:
        return ()
    tg, by_name = loaded
    out = []
    for line, text in by_name.get(name, ()):
        (entry,) = yaml.load(text, Loader=tg["YamlLoader"])
        f, _ = tg["NativeFunction"].from_yaml(entry, tg["Location"]("native_functions.yaml",
                                                                    line), _valid_tags())
        if tg["gpf"].should_generate_py_binding(f):
            out.append(f)
    return tuple(out)


@functools.cache
def _deprecated_pairs(method: bool) -> tuple:
    """The deprecated signatures (``deprecated.yaml``), for all the names they concern."""
    import yaml

    tg, _ = _yaml_entries()
    path = tg["root"] / "packaged" / "autograd" / "deprecated.yaml"
    names = set()
    for d in yaml.load(path.read_text(), Loader=tg["YamlLoader"]):
        aten = d["aten"].split("(", 1)[0]
        names.add(aten.removesuffix("_out"))
    pairs = [_pair(f, method) for n in sorted(names) for f in _native_functions(n)]
    return tuple(tg["gpf"].load_deprecated_signatures(pairs, str(path), method=method,
                                                      pyi=False))


def _pair(f, method: bool):
    tg, _ = _yaml_entries()
    api = tg["api_python"]
    return api.PythonSignatureNativeFunctionPair(
        signature=api.signature(f, method=method, pyi=False), function=f)


@functools.cache
def signatures(namespace: str, name: str) -> tuple[PySignature, ...]:
    """The signatures of binding ``name`` in ``namespace`` (a key of ``NAMESPACES``), in the
    order the parser tries them; empty when there is no such generated binding.

    Read from the on-disk cache (``signature_cache.SignatureCache``) when it has them: building them needs
    torchgen and PyTorch's yaml files, ~0.15 s the first time in a process."""
    cache = disk_cache()
    rows = cache.get(namespace, name) if cache is not None else None
    if rows is None:
        rows = _signature_rows(namespace, name)
        if cache is not None:
            cache.put(namespace, name, rows)
    return tuple(parse_signature(*row) for row in rows)


def _signature_rows(namespace: str, name: str) -> list[tuple[str, str, str | None]]:
    """``(signature string, base name, out-of-place name)`` for ``parse_signature``, in the
    parser's order: what ``signatures`` is built from (and what the cache holds)."""
    functions = _native_functions(name)
    if not functions or any("view_copy" in f.tags for f in functions):
        # ``view_copy`` operators also get bindings for their generated ``.out`` overloads,
        # which are not entries of the yaml: their lists would miss signatures.
        return ()
    tg, _ = _yaml_entries()
    gpf = tg["gpf"]
    pred = getattr(gpf, NAMESPACES[namespace])
    method = namespace == "method"
    pairs = [_pair(f, method) for f in functions if pred(f)]
    if not pairs:
        return ()
    pairs += [p for p in _deprecated_pairs(method)
              if p.signature.name == name and pred(p.function)]
    groups = gpf.group_overloads(pairs, symint=True)
    rows = [(g.signature.signature_str(symint=True), str(g.base.func.name),
             str(g.outplace.func.name) if g.outplace is not None else None) for g in groups]
    # ``PythonArgParser``'s constructor moves deprecated signatures last (stable partition).
    deprecated = [row[0].endswith("|deprecated") for row in rows]
    return ([r for r, d in zip(rows, deprecated) if not d]
            + [r for r, d in zip(rows, deprecated) if d])
