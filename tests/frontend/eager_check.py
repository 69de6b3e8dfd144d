"""Differential checks with eager PyTorch as the oracle, for models our runtime imports from
``torch.export`` (``tests/differential.check`` scripts its model; an exported one is not).

``check_eager(build, eager, input_sets)`` builds a ``StaticModule`` per option set of
``OPTION_SETS`` with ``build(options)`` and runs every input set, then the first again, through
it and through ``eager`` (under ``torch.no_grad``): outputs equal (values, dtypes, container
structure), inputs unchanged, outputs of earlier calls not changed by later ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from differential import OPTION_SETS, _snapshot, assert_same

import static_runtime as sr


def check_eager(build: Callable[[sr.StaticModuleOptions], sr.StaticModule],
                eager: Callable[..., Any], input_sets: Sequence[tuple],
                kwargs_sets: Sequence[dict] | None = None,
                options: dict[str, sr.StaticModuleOptions] | None = None,
                **tol: Any) -> dict[str, sr.StaticModule]:
    kwargs_sets = list(kwargs_sets or [{}] * len(input_sets))
    sets = list(zip(input_sets, kwargs_sets, strict=True))
    sets.append(sets[0])
    modules = {}
    for name, opts in (options or OPTION_SETS).items():
        mod = modules[name] = build(opts)
        held = []
        for k, (xs, kw) in enumerate(sets):
            where = f"[{name} options, input set {k}]"
            with torch.no_grad():
                expected = eager(*_snapshot(list(xs)), **_snapshot(kw))
            ours_in, ours_kw = _snapshot(list(xs)), _snapshot(kw)
            before = _snapshot((ours_in, ours_kw))
            actual = mod(*ours_in, **ours_kw)
            assert_same(actual, expected, f"{where} output", **tol)
            assert_same((ours_in, ours_kw), before, f"{where} input (must be unchanged)")
            held.append((actual, _snapshot(actual)))
        for k, (actual, snap) in enumerate(held):
            assert_same(actual, snap, f"[{name} options] output of call {k} after later calls")
    return modules
