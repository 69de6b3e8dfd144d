"""The on-disk cache of binding signature lists: one JSON file per torch build, holding
strings only, so a later process skips torchgen (~0.15 s)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path


class SignatureCache:
    """The signature rows of the bindings looked up so far, in a JSON file per torch build.

    The file (``signatures-<torch version>-<hash>.json`` under ``$STATIC_RUNTIME_CACHE``, else
    ``$XDG_CACHE_HOME/static_runtime``, else ``~/.cache/static_runtime``) is named after
    what the rows depend on: the torch version and the bytes of the yaml files torchgen reads,
    so another torch never reads it. It holds strings only and is parsed as JSON: reading it
    runs nothing. A file that does not parse, or holds rows of the wrong shape, is ignored
    (and rewritten). ``STATIC_RUNTIME_CACHE=off`` turns the cache off."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: dict[str, list] = {}
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if isinstance(loaded, dict) and all(_valid_rows(v) for v in loaded.values()):
            self.rows = loaded

    def get(self, namespace: str, name: str) -> list[tuple[str, str, str | None]] | None:
        rows = self.rows.get(f"{namespace}:{name}")
        return None if rows is None else [tuple(r) for r in rows]

    def put(self, namespace: str, name: str, rows: list) -> None:
        self.rows[f"{namespace}:{name}"] = [list(r) for r in rows]
        try:  # written whole and renamed into place: a reader never sees half a file
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.rows, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only home: the cache stays in memory


def _valid_rows(rows) -> bool:
    return isinstance(rows, list) and all(
        isinstance(r, list) and len(r) == 3 and isinstance(r[0], str) and isinstance(r[1], str)
        and (r[2] is None or isinstance(r[2], str)) for r in rows)


@functools.cache
def disk_cache() -> SignatureCache | None:
    """This process's cache (None when turned off or without torchgen)."""
    where = os.environ.get("STATIC_RUNTIME_CACHE")
    if where == "off":
        return None
    if where:
        folder = Path(where)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = Path(base) / "static_runtime"
    fingerprint = _yaml_fingerprint()
    if fingerprint is None:
        return None
    import torch

    return SignatureCache(folder / f"signatures-{torch.__version__}-{fingerprint}.json")


def _yaml_fingerprint() -> str | None:
    """A hash of the yaml files the signatures are built from (None without torchgen)."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("torchgen")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent / "packaged"
    digest = hashlib.sha256()
    for rel in ("ATen/native/native_functions.yaml", "ATen/native/tags.yaml",
                "autograd/deprecated.yaml"):
        try:
            digest.update((root / rel).read_bytes())
        except OSError:
            return None
    return digest.hexdigest()[:16]
