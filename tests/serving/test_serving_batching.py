"""Joining requests along their batch dimension and splitting the answer (``serving.batching``)
against calling the module once per request: mixed batch sizes, other trailing shapes, dtypes,
keyword arguments, list inputs (DLRM) and requests that fail. No Ray needed."""

from __future__ import annotations

import torch
from differential import script

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.serving import batching


class Counting:
    """A module wrapper recording the batch size of each call."""

    def __init__(self, module):
        self.module, self.sizes = module, []

    def __call__(self, *args, **kwargs):
        first = args[0] if args else next(iter(kwargs.values()))
        self.sizes.append(first.shape[0] if isinstance(first, torch.Tensor) else None)
        return self.module(*args, **kwargs)


def _check(outcomes, requests, module):
    assert len(outcomes) == len(requests)
    for (ok, out), (args, kwargs) in zip(outcomes, requests, strict=True):
        try:
            expected = (True, module(*args, **kwargs))
        except Exception as e:  # noqa: BLE001
            expected = (False, e)
        assert ok == expected[0], (out, expected)
        if ok:
            torch.testing.assert_close(out, expected[1])
        else:
            assert type(out) is type(expected[1]) and str(out) == str(expected[1])


def test_mlp_joins_same_trailing_shape_and_runs_others_alone():
    mod = sr.StaticModule(script(MODELS["mlp"].build()))
    g = torch.Generator().manual_seed(1)
    requests = [((torch.randn(n, 64, generator=g),), {}) for n in (1, 3, 2, 1)]
    requests += [((torch.randn(2, 32, generator=g),), {})]            # other trailing shape
    requests += [((torch.randn(2, 64, dtype=torch.float64, generator=g),), {})]  # other dtype
    requests += [((), {"x": torch.randn(2, 64, generator=g)})]         # keyword: its own key
    requests += [((), {"x": torch.randn(1, 64, generator=g)})]
    requests += [(("not a tensor",), {})]
    counting = Counting(mod)
    inputs_before = [[a.clone() for a in args if isinstance(a, torch.Tensor)]
                     for args, _ in requests]
    outcomes = batching.run_batch(counting, requests)
    _check(outcomes, requests, mod)
    assert 7 in counting.sizes and 3 in counting.sizes       # 1+3+2+1 joined; two kwargs joined
    assert len(counting.sizes) == 5                           # + 3 alone (32-wide, f64, str)
    for (args, _), before in zip(requests, inputs_before, strict=True):
        for a, b in zip([a for a in args if isinstance(a, torch.Tensor)], before, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    for ok, out in outcomes:                                  # pieces own their storage
        if ok:
            assert out.untyped_storage().nbytes() == out.numel() * out.element_size()


def test_dlrm_list_inputs_run_alone():
    mod = sr.StaticModule(script(MODELS["dlrm"].build()))
    requests = [(MODELS["dlrm"].example_inputs(n, seed=n), {}) for n in (2, 2, 3)]
    counting = Counting(mod)
    outcomes = batching.run_batch(counting, requests)
    _check(outcomes, requests, mod)
    assert counting.sizes == [2, 2, 3]


def test_output_without_batch_rows_is_recomputed_per_request():
    mod = sr.StaticModule(script(_Summing()))
    requests = [((torch.randn(n, 4),), {}) for n in (1, 2, 3)]
    counting = Counting(mod)
    outcomes = batching.run_batch(counting, requests)
    _check(outcomes, requests, mod)
    assert counting.sizes == [6, 1, 2, 3]       # joined once, split impossible, run alone


def test_split_walks_tuples_lists_dicts():
    out = (torch.arange(6).reshape(3, 2), [torch.arange(3)], {"a": torch.zeros(3, 1)})
    pieces = batching.split(out, [1, 2])
    assert pieces[1][0].tolist() == [[2, 3], [4, 5]] and pieces[0][1][0].tolist() == [0]
    assert pieces[1][2]["a"].shape == (2, 1)
    assert batching.split((torch.ones(3), 1), [1, 2]) is None
    assert batching.batch_key((), {}) is None
    assert batching.batch_key((torch.ones(2, 3), torch.ones(3, 3)), {}) is None
    assert batching.batch_key((torch.tensor(1.0),), {}) is None


class _Summing(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(0)
