"""Batch inference over a Ray Data dataset: ``Dataset.map_batches(Predictor, ...)``.

Each actor builds the module once; each batch (numpy format) is turned into one tensor per input
column, in the order of ``input_columns``, and passed positionally. The output's rows become a
column: a tensor output of shape ``(n,)`` a column of numbers, ``(n, ...)`` a column of arrays;
a tuple of tensors gives the columns ``<output_column>_0``, ``<output_column>_1``, ...  The
batch's columns are passed through, so each output row stays beside its input.

Nothing here imports Ray: the class is what Ray Data instantiates in its actors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from static_runtime.serving.loading import ModelSource, load_model


class Predictor:
    """A callable class for ``map_batches``: one module per actor."""

    def __init__(self, model: ModelSource, input_columns: list[str],
                 output_column: str = "output", options: Any = None) -> None:
        if isinstance(input_columns, str) or not input_columns:
            raise ValueError(f"input_columns must be a non-empty list of column names, got "
                             f"{input_columns!r}")
        self.input_columns = list(input_columns)
        self.output_column = output_column
        self.module = load_model(model, options)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [c for c in self.input_columns if c not in batch]
        if missing:
            raise KeyError(f"input column(s) {missing} not in the batch; its columns are "
                           f"{sorted(batch)}")
        inputs = [column_tensor(batch[c], c) for c in self.input_columns]
        n = len(batch[self.input_columns[0]])
        with torch.inference_mode():
            out = self.module(*inputs)
        result = dict(batch)
        if isinstance(out, tuple):
            for i, o in enumerate(out):
                result[f"{self.output_column}_{i}"] = _rows(o, n, f"output {i}")
        else:
            result[self.output_column] = _rows(out, n, "the output")
        return result


def column_tensor(column: np.ndarray, name: str) -> torch.Tensor:
    """A column as one tensor, rows along dimension 0. A column of equal-shape arrays (what
    Ray Data gives for a list or tensor column read from Parquet) is stacked."""
    if column.dtype == object:
        try:
            column = np.stack([np.asarray(v) for v in column])
        except ValueError as e:
            raise ValueError(f"column {name!r}: its rows are arrays of different shapes and "
                             f"cannot be stacked into one tensor ({e})") from e
        if column.dtype == object:
            raise TypeError(f"column {name!r} holds values that are not numbers")
    return torch.from_numpy(np.ascontiguousarray(column))


def _rows(value: Any, n: int, what: str) -> np.ndarray:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} is a {type(value).__name__}; Predictor needs a tensor (or a "
                        "tuple of tensors) with one row per input row")
    if value.dim() == 0 or value.shape[0] != n:
        raise ValueError(f"{what} has shape {tuple(value.shape)}; Predictor needs {n} rows (one "
                         "per input row) in dimension 0")
    return value.detach().numpy().copy()
