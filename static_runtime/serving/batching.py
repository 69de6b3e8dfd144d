"""Joining concurrent requests along their batch dimension and splitting the answer back.

A request can be joined with others when every argument (positional and keyword) is a tensor
of at least one dimension and all of them have the same size ``n`` in dimension 0: its batch.
Requests join only with requests of the same key: the same argument names and count, and per
argument the same dtype, device and trailing shape. Anything else (a scalar, a list of tensors
such as DLRM's per-table indices, tensors of different leading sizes) runs alone, because
whether such an argument's rows belong to samples is not something shapes can tell.

The joined call's outputs are split back when every output tensor has the joined batch size in
dimension 0 (lists, tuples and dicts of such tensors are walked); when one does not, the
requests are run again one by one, so an answer is never a slice it was not computed as.

Joining assumes that the model treats the rows of dimension 0 independently, as a served model
does; ``max_batch_size > 1`` is the user's statement that it does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

Key = tuple


def batch_key(args: Sequence, kwargs: dict) -> tuple[Key, int] | None:
    """``(key, batch size)`` for a joinable request, or ``None``."""
    values = list(args) + [kwargs[k] for k in sorted(kwargs)]
    if not values:
        return None
    n = None
    parts = []
    for v in values:
        if type(v) is not torch.Tensor or v.dim() == 0:
            return None
        if n is None:
            n = v.shape[0]
        elif v.shape[0] != n:
            return None
        parts.append((v.dtype, v.device, tuple(v.shape[1:])))
    return (len(args), tuple(sorted(kwargs)), tuple(parts)), n


def join(requests: Sequence[tuple[Sequence, dict]]) -> tuple[list, dict]:
    """The arguments of one call over requests that share a key (see ``batch_key``)."""
    first_args, first_kwargs = requests[0]
    args = [torch.cat([r[0][i] for r in requests]) for i in range(len(first_args))]
    kwargs = {k: torch.cat([r[1][k] for r in requests]) for k in first_kwargs}
    return args, kwargs


def split(output: Any, sizes: Sequence[int]) -> list | None:
    """The joined call's output cut into one output per request, or ``None`` when an output is
    not a tensor with ``sum(sizes)`` rows (or a container of such)."""
    total = sum(sizes)

    def cut(v: Any) -> list | None:
        if isinstance(v, torch.Tensor):
            if v.dim() == 0 or v.shape[0] != total:
                return None
            return list(torch.split(v, list(sizes)))
        if isinstance(v, (list, tuple)):
            parts = [cut(x) for x in v]
            if any(p is None for p in parts):
                return None
            return [type(v)(p[i] for p in parts) for i in range(len(sizes))]
        if isinstance(v, dict):
            parts = {k: cut(x) for k, x in v.items()}
            if any(p is None for p in parts.values()):
                return None
            return [{k: p[i] for k, p in parts.items()} for i in range(len(sizes))]
        return None

    return cut(output)


Outcome = tuple[bool, Any]   # (True, output) or (False, the exception raised)


def run_batch(call: Callable[..., Any], requests: Sequence[tuple[Sequence, dict]]
              ) -> list[Outcome]:
    """Run ``requests`` through ``call``: those sharing a key as one joined call each, the others
    alone. One request's failure is its own: it never fails the others."""
    outcomes: list[Outcome | None] = [None] * len(requests)
    groups: dict[Key, list[tuple[int, int]]] = {}   # key -> [(request index, batch size)]
    for i, (args, kwargs) in enumerate(requests):
        kb = batch_key(args, kwargs)
        if kb is None:
            outcomes[i] = _run_one(call, args, kwargs)
        else:
            groups.setdefault(kb[0], []).append((i, kb[1]))
    for group in groups.values():
        members = [i for i, _ in group]
        if len(members) == 1:
            outcomes[members[0]] = _run_one(call, *requests[members[0]])
            continue
        try:
            args, kwargs = join([requests[i] for i in members])
            pieces = split(call(*args, **kwargs), [n for _, n in group])
        except Exception:  # noqa: BLE001  (each request is run again and gets its own error)
            # One request may be the cause (a value the model refuses): run each alone so
            # that each gets its own answer or its own error.
            pieces = None
        if pieces is None:
            for i in members:
                outcomes[i] = _run_one(call, *requests[i])
        else:
            for i, piece in zip(members, pieces, strict=True):
                outcomes[i] = (True, _own(piece))
    return outcomes  # type: ignore[return-value]


def _run_one(call: Callable[..., Any], args: Sequence, kwargs: dict) -> Outcome:
    try:
        return True, call(*args, **kwargs)
    except Exception as e:  # noqa: BLE001  (the request's answer: 400/500 or raised)
        return False, e


def _own(v: Any) -> Any:
    """A split piece as a tensor of its own: a view would keep the whole batch's storage alive
    and serialise all of it when the piece is sent to another process."""
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_own(x) for x in v)
    if isinstance(v, dict):
        return {k: _own(x) for k, x in v.items()}
    return v
