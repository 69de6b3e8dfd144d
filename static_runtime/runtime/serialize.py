"""Prepared modules on disk: ``StaticModule.save(path)`` and ``load(path)``.

A service that loads a saved module starts without importing, freezing and preparing the
model again. The file is a zip archive (stored, not compressed) with exactly four members:

``manifest.json``
    format name and version, the torch and static_runtime versions that wrote it, the
    ``StaticModuleOptions``, the graph's Python signature, the non-tensor constants (a tagged
    JSON encoding: numbers, strings, lists, tuples, dicts, devices, dtypes, objects), the
    implementation chosen for every node (tier and label), and the SHA-256 of the other
    members.
``manifest.sha256``
    the SHA-256 of ``manifest.json``.
``graph.txt``
    the prepared graph in the IR's canonical text form (``ir.printer``); tensors and objects
    are ``<ref NAME>`` into the constants.
``tensors.pt``
    the constant tensors, one ``torch.save`` of a list, read back with
    ``torch.load(weights_only=True)`` (PyTorch's restricted unpickler: tensors, storages and
    plain containers only; any other global in the pickle is refused, never imported or
    called). One ``torch.save`` call keeps storage shared between views and strides as they
    were.

Loading parses JSON and text and never imports or calls anything the file names. The graph
names registered PyTorch operators (and our own implementations of them): running a loaded
module runs that graph, as running any model does, but the file cannot bring code of its own.

The checksums detect accidental corruption (a truncated copy, flipped bits). Stored in the same
file, they do not authenticate it: someone who alters the file on purpose can recompute them.
Check the file's digest against one kept elsewhere, or a signature, for that.

On load the implementations are selected again and compared with the saved ones; a file
written by another torch or static_runtime version is refused (prepare the model again).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import pickle
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from static_runtime.ir.graph import Argument, Graph, Signature
from static_runtime.ir.parser import IRParseError, parse_graph
from static_runtime.ir.printer import print_graph_with_constants
from static_runtime.ir.values import ScriptObjectValue, UnrepresentableConstant
from static_runtime.ir.verifier import IRVerificationError, verify
from static_runtime.runtime.options import StaticModuleOptions

if TYPE_CHECKING:
    from static_runtime.runtime.module import StaticModule

FORMAT = "static_runtime.prepared_module"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MANIFEST_DIGEST = "manifest.sha256"
GRAPH = "graph.txt"
TENSORS = "tensors.pt"
MEMBERS = (MANIFEST, MANIFEST_DIGEST, GRAPH, TENSORS)


class PreparedFileError(ValueError):
    """A file ``load`` refuses: not a prepared module, damaged, or written by another version."""


class UnsaveableValueError(TypeError):
    """The module holds a value with no safe on-disk form; the message names it."""


def _installed_version() -> str:
    try:
        return importlib.metadata.version("static-runtime")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "0+unknown"


#: This package's version, the installed distribution's (``pyproject.toml``): what a saved file
#: records and ``load`` compares. ``static_runtime.__version__`` is this.
VERSION = _installed_version()


def versions() -> dict[str, str]:
    return {"torch": torch.__version__, "static_runtime": VERSION}


# --------------------------------------------------------------------------- save


def save(module: StaticModule, path: str | os.PathLike) -> None:
    """Write ``module``'s prepared graph, constants, options and implementation choices.

    Module state is saved as it is now (attributes a forward wrote included). Raises
    ``UnsaveableValueError`` naming the first value that has no safe form (an opaque script
    object, a custom C++ class instance, a tensor subclass...); nothing is written then.
    """
    text, constants = print_graph_with_constants(module.graph)
    encoder = _Encoder(_value_names(module.graph))
    encoded = {name: encoder.encode(value, encoder.name_of(value, name))
               for name, value in constants.items()}
    signature = None
    if module.graph.signature is not None:
        sig = module.graph.signature
        signature = {"has_self": sig.has_self, "arguments": [
            {"name": a.name, "has_default": a.has_default, "kwarg_only": a.kwarg_only,
             "default": encoder.encode(a.default, f"the default of argument {a.name!r}")}
            for a in sig.arguments]}
    buffer = io.BytesIO()
    torch.save(encoder.tensors, buffer)
    members = {GRAPH: text.encode("utf-8"), TENSORS: buffer.getvalue()}
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "versions": versions(),
        "options": asdict(module.options),
        "signature": signature,
        "constants": encoded,
        "objects": encoder.objects,
        "implementations": implementation_choices(module),
        "sha256": {name: _sha256(data) for name, data in members.items()},
    }
    manifest_bytes = json.dumps(manifest, indent=1, allow_nan=False).encode("utf-8")
    members[MANIFEST] = manifest_bytes
    members[MANIFEST_DIGEST] = _sha256(manifest_bytes).encode("ascii")
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in MEMBERS:
            zf.writestr(name, members[name])
    os.replace(tmp, path)  # a reader never sees a half-written file under ``path``


def implementation_choices(module: StaticModule) -> list[dict[str, str]]:
    """Per node (program order, nested blocks included): kind, tier and implementation."""
    return [{"node": _node_name(pn.node), "tier": pn.tier.value, "label": pn.impl.label}
            for pn in module.plan.nodes()]


def _node_name(node) -> str:
    outs = ", ".join(f"%{v.name}" for v in node.outputs)
    return f"{outs} = {node.kind}" if outs else node.kind


def _value_names(graph: Graph) -> dict[int, str]:
    """id of each attribute value → a name for it in error messages."""
    names: dict[int, str] = {}
    for node in graph.walk():
        for key, value in node.attrs.items():
            if node.kind == "prim::Constant" and node.outputs:
                names.setdefault(id(value), f"%{node.output.name}")
            else:
                names.setdefault(id(value), f"attribute {key!r} of {_node_name(node)}")
    return names


class _Encoder:
    """Values → JSON: tensors into ``tensors`` and objects into ``objects`` (each once, by
    identity, so shared state stays shared and cycles terminate), references by index."""

    def __init__(self, names: dict[int, str]):
        self.names = names
        self.tensors: list[torch.Tensor] = []
        self.objects: list[dict[str, Any]] = []
        self._tensor_index: dict[int, int] = {}
        self._object_index: dict[int, int] = {}

    def name_of(self, value: Any, fallback: str) -> str:
        return self.names.get(id(value), f"constant {fallback}")

    def encode(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return {"float": repr(float(value))}
        if isinstance(value, complex):
            return {"complex": [repr(value.real), repr(value.imag)]}
        if type(value) is list:
            return {"list": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if type(value) is tuple:
            return {"tuple": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if type(value) is dict:
            return {"dict": [[self.encode(k, f"{where} (a key)"),
                              self.encode(v, f"{where}[{k!r}]")] for k, v in value.items()]}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        if isinstance(value, torch.dtype):
            return {"dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.Tensor):
            return {"tensor": self._tensor(value, where)}
        if isinstance(value, ScriptObjectValue):
            return {"object": self._object(value, where)}
        if isinstance(value, UnrepresentableConstant):
            return {"unrepresentable": value.type_str}
        raise UnsaveableValueError(
            f"cannot save {where}: a {type(value).__module__}.{type(value).__qualname__} "
            f"({_short_repr(value)}) has no safe on-disk form. Saveable are tensors, numbers, "
            "strings, None, devices, dtypes, lists, tuples and dicts of those, and module or "
            "TorchScript-class state made of them")

    def _tensor(self, t: torch.Tensor, where: str) -> int:
        if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
            raise UnsaveableValueError(
                f"cannot save {where}: a tensor subclass {type(t).__qualname__} needs its "
                "class to be read back, which loading never imports")
        if t.device.type != "cpu" or t.is_quantized or t.layout != torch.strided:
            raise UnsaveableValueError(
                f"cannot save {where}: only dense CPU tensors are saved "
                f"(this one: device {t.device}, layout {t.layout}, dtype {t.dtype})")
        if id(t) not in self._tensor_index:
            self._tensor_index[id(t)] = len(self.tensors)
            self.tensors.append(t.detach())
        return self._tensor_index[id(t)]

    def _object(self, obj: ScriptObjectValue, where: str) -> int:
        if id(obj) not in self._object_index:
            self._object_index[id(obj)] = len(self.objects)
            entry: dict[str, Any] = {"type": obj.type_name, "attrs": {}}
            self.objects.append(entry)
            for name, value in obj.attrs.items():
                entry["attrs"][name] = self.encode(value, f"{where}.{name}")
        return self._object_index[id(obj)]


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001  (a broken __repr__ must not hide the real error)
        text = object.__repr__(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- load


def load(path: str | os.PathLike, example_inputs: Any = None) -> StaticModule:
    """Read a module ``StaticModule.save`` wrote; raises ``PreparedFileError`` saying what is
    wrong with a file it refuses. ``example_inputs`` as for ``StaticModule``."""
    from static_runtime.runtime.module import StaticModule

    path = Path(path)
    manifest, graph_text, tensor_bytes = _read_archive(path)
    _check_versions(path, manifest)
    tensors = _load_tensors(path, tensor_bytes)
    try:
        decoder = _Decoder(tensors, manifest["objects"])
        constants = {name: decoder.decode(v) for name, v in manifest["constants"].items()}
        signature = _decode_signature(manifest["signature"], decoder)
        options = StaticModuleOptions(**manifest["options"])
        choices = manifest["implementations"]
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise PreparedFileError(f"{path}: the manifest is malformed ({e})") from e
    try:
        graph = parse_graph(graph_text, constants)
        graph.signature = signature
        verify(graph)
    except (IRParseError, IRVerificationError, LookupError) as e:
        raise PreparedFileError(f"{path}: the saved graph is invalid: {e}") from e
    module = StaticModule.from_prepared(graph, options, example_inputs,
                                        origin=f"prepared module {path.name}")
    _check_implementations(path, choices, implementation_choices(module))
    return module


def _read_archive(path: Path) -> tuple[dict, str, bytes]:
    if not path.exists():
        raise FileNotFoundError(f"no such prepared module file: {path}")
    if path.is_dir():
        raise PreparedFileError(f"{path} is a directory, not a prepared module file")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"PK\x03\x04":
        raise PreparedFileError(
            f"{path} is not a prepared module file (not a zip archive; write one with "
            "StaticModule.save)")
    try:
        with zipfile.ZipFile(path) as zf:
            names = sorted(zf.namelist())
            if names != sorted(MEMBERS):
                raise PreparedFileError(
                    f"{path} is a zip archive but not a prepared module: its members are "
                    f"{names}, expected {sorted(MEMBERS)}")
            data = {name: zf.read(name) for name in MEMBERS}
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise PreparedFileError(f"{path} is truncated or corrupted (the zip archive cannot "
                                f"be read: {e})") from e
    if _sha256(data[MANIFEST]).encode("ascii") != data[MANIFEST_DIGEST].strip():
        raise PreparedFileError(f"{path} is corrupted: {MANIFEST} does not match its SHA-256")
    try:
        manifest = json.loads(data[MANIFEST].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PreparedFileError(f"{path}: {MANIFEST} is not valid JSON ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PreparedFileError(f"{path} is not a prepared module file (format "
                                f"{manifest.get('format') if isinstance(manifest, dict) else None!r}"
                                f", expected {FORMAT!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise PreparedFileError(
            f"{path} has format version {manifest.get('format_version')!r}; this static_runtime "
            f"reads version {FORMAT_VERSION}. Save the module again with this version")
    digests = manifest.get("sha256")
    for name in (GRAPH, TENSORS):
        if not isinstance(digests, dict) or digests.get(name) != _sha256(data[name]):
            raise PreparedFileError(
                f"{path} is corrupted: {name} does not match the SHA-256 in the manifest")
    try:
        graph_text = data[GRAPH].decode("utf-8")
    except UnicodeDecodeError as e:
        raise PreparedFileError(f"{path}: {GRAPH} is not UTF-8 text ({e})") from e
    return manifest, graph_text, data[TENSORS]


def _check_versions(path: Path, manifest: dict) -> None:
    saved = manifest.get("versions")
    here = versions()
    if not isinstance(saved, dict):
        raise PreparedFileError(f"{path}: the manifest records no versions")
    for name, version in here.items():
        if saved.get(name) != version:
            raise PreparedFileError(
                f"{path} was written with {name} {saved.get(name)!r}; this is {name} "
                f"{version!r}. A prepared module is tied to the versions that prepared it "
                "(operator schemas, passes, implementations): prepare the model again "
                "(StaticModule(model)) and save it")


def _load_tensors(path: Path, data: bytes) -> list[torch.Tensor]:
    try:
        tensors = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, ValueError, EOFError, AttributeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PreparedFileError(
            f"{path}: {TENSORS} was refused by torch.load(weights_only=True), which reads "
            f"tensors only and runs nothing from the file ({first})") from e
    if not isinstance(tensors, list) or not all(type(t) is torch.Tensor for t in tensors):
        raise PreparedFileError(f"{path}: {TENSORS} does not hold a list of tensors")
    return tensors


class _Decoder:
    """The inverse of ``_Encoder``; refuses anything it did not write."""

    def __init__(self, tensors: list[torch.Tensor], objects: list[dict[str, Any]]):
        self.tensors = tensors
        self.raw_objects = objects
        self.objects: dict[int, ScriptObjectValue] = {}

    def decode(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if not (isinstance(v, dict) and len(v) == 1):
            raise ValueError(f"unexpected encoded value {_short_repr(v)}")
        (tag, x), = v.items()
        if tag == "float":
            return float(x)
        if tag == "complex":
            return complex(float(x[0]), float(x[1]))
        if tag == "list":
            return [self.decode(e) for e in x]
        if tag == "tuple":
            return tuple(self.decode(e) for e in x)
        if tag == "dict":
            return {self.decode(k): self.decode(e) for k, e in x}
        if tag == "device":
            return torch.device(x)
        if tag == "dtype":
            dtype = getattr(torch, x, None) if isinstance(x, str) else None
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"{x!r} is not a torch dtype")
            return dtype
        if tag == "tensor":
            return self.tensors[_index(x)]
        if tag == "object":
            return self._object(_index(x))
        if tag == "unrepresentable":
            return UnrepresentableConstant(str(x))
        raise ValueError(f"unknown value tag {tag!r}")

    def _object(self, i: int) -> ScriptObjectValue:
        if i not in self.objects:
            raw = self.raw_objects[i]
            obj = ScriptObjectValue(str(raw["type"]))
            self.objects[i] = obj  # before the attributes: an object may reach itself
            for name, value in raw["attrs"].items():
                obj.attrs[name] = self.decode(value)
        return self.objects[i]


def _index(x: Any) -> int:
    if type(x) is not int or x < 0:
        raise ValueError(f"bad index {x!r}")
    return x


def _decode_signature(raw: Any, decoder: _Decoder) -> Signature | None:
    if raw is None:
        return None
    return Signature([Argument(str(a["name"]), bool(a["has_default"]),
                               decoder.decode(a["default"]), bool(a["kwarg_only"]))
                      for a in raw["arguments"]], has_self=bool(raw["has_self"]))


def _check_implementations(path: Path, saved: Any, now: list[dict[str, str]]) -> None:
    if not isinstance(saved, list) or len(saved) != len(now):
        raise PreparedFileError(
            f"{path}: the saved implementation choices do not cover the graph's "
            f"{len(now)} nodes")
    for s, n in zip(saved, now):
        if s != n:
            raise PreparedFileError(
                f"{path}: node {n['node']} now selects {n['tier']} {n['label']!r}, but was "
                f"saved with {s.get('tier') if isinstance(s, dict) else s!r} "
                f"{s.get('label') if isinstance(s, dict) else ''!r}; the operators registered "
                "in this process differ from the ones it was saved with: prepare the model "
                "again and save it")

