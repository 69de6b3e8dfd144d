"""Building the module a replica or a Ray Data actor runs, once, from what the user named."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import static_runtime as sr
from static_runtime.runtime.serialize import MANIFEST

# A path to a saved module (.srm), a TorchScript archive (.pt) or a torch.export archive
# (.pt2); or a function of no arguments that returns the module (called in each replica).
ModelSource = str | os.PathLike | Callable[[], Any]


def load_model(model: ModelSource, options: sr.StaticModuleOptions | None = None) -> Any:
    """The module ``model`` names. A prepared module (``StaticModule.save``) is loaded without
    preparing it again and carries its own options, so ``options`` must be ``None`` for it; a
    model archive is prepared here with ``options``."""
    if callable(model) and not isinstance(model, (str, os.PathLike)):
        if options is not None:
            raise ValueError("options apply to a model file; a factory builds its own module")
        return model()
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a path (.srm, .pt, .pt2) or a function returning a "
                        f"module, got {type(model).__name__}")
    path = Path(model)
    if not path.is_file():
        raise FileNotFoundError(f"no such model file: {path}")
    if is_prepared_module(path):
        if options is not None:
            raise ValueError(f"{path} is a prepared module: its options were fixed when it was "
                             "saved; pass options=None")
        return sr.load(path)
    return sr.StaticModule(str(path), options=options)


def is_prepared_module(path: Path) -> bool:
    """Whether ``path`` is a file ``StaticModule.save`` wrote (told by its members, not its
    name; ``sr.load`` then checks it fully)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as zf:
        return MANIFEST in zf.namelist()
