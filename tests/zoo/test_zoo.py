"""Every zoo model at both of its batch sizes through ``StaticModule``, with the default
options and with fused regions (``fusion_compiler="inductor"``), against the TorchScript
interpreter running the same scripted or traced module (the oracle) and against eager
PyTorch; and that module against eager PyTorch. Two input sets per batch (different seeds:
the control-flow models then take other branches and trip counts), each run twice; inputs
unchanged, earlier outputs not overwritten by later calls."""

from __future__ import annotations

import warnings

import pytest
import torch
from differential import _snapshot, assert_same

import static_runtime as sr
from benchmarks.zoo import ZOO, ZooModel
from static_runtime.ops import inductor
from static_runtime.ops.native.region import RegionWarning


def test_zoo_shape():
    assert len(ZOO) >= 31
    assert len({m.family for m in ZOO.values()}) >= 12
    for name, m in ZOO.items():
        assert isinstance(m, ZooModel) and m.name == name
        assert m.batches[0] == 1 and m.batches[1] > 1


def test_models_are_seeded():
    m = ZOO["hf_bert"]
    a, b = m.eager().state_dict(), m.eager().state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    x, y = m.inputs(8, seed=3), m.inputs(8, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(x, y))
    assert not torch.equal(m.inputs(8, seed=4)[0], x[0])


#: How close to eager PyTorch, by dtype: TorchScript and ours may compute with other kernels
#: (oneDNN or MKL GEMMs, Inductor's fused loops) that sum in another order. Other dtypes: the
#: defaults of ``assert_close``.
EAGER_TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-4},
                   torch.float64: {"rtol": 1e-7, "atol": 1e-7}}

OPTIONS = {"default": sr.StaticModuleOptions(),
           "fused": sr.StaticModuleOptions(fusion_compiler="inductor")}


def eager_tolerance(outputs) -> dict:
    """The loosest tolerance of the floating dtypes among ``outputs`` (nested)."""
    tol: dict = {}
    for t in _tensors(outputs):
        for k, v in EAGER_TOLERANCE.get(t.dtype, {}).items():
            tol[k] = max(tol.get(k, 0.0), v)
    return tol


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for e in x:
            yield from _tensors(e)
    elif isinstance(x, dict):
        for e in x.values():
            yield from _tensors(e)


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_model(name: str, option: str):
    """One ``StaticModule`` for both batch sizes, in the order 1, B, B, 1: the second batch
    size and the return to the first exercise re-planning as well (and, fused, a region's
    second signature and the return to its first)."""
    model = ZOO[name]
    small, large = model.batches
    scripted = model.scripted()
    eager = model.eager()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = sr.StaticModule(model.scripted(), options=OPTIONS[option])
    held = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RegionWarning)
        for batch, seed in ((small, 0), (large, 0), (large, 1), (small, 1)):
            inputs = model.inputs(batch, seed)
            before = _snapshot(inputs)
            with torch.no_grad():
                expected = scripted(*_snapshot(inputs))
                reference = eager(*_snapshot(inputs))
            where = f"{name} {option} batch {batch} seed {seed}"
            tol = eager_tolerance(reference)
            assert_same(expected, reference, f"{where}: TorchScript vs eager", **tol)
            for call in range(2):
                actual = mod(*inputs)
                assert_same(actual, expected, f"{where} call {call}")
                assert_same(actual, reference, f"{where} call {call}: ours vs eager", **tol)
                assert_same(inputs, before, f"{where}: inputs (must be unchanged)")
                held.append((actual, _snapshot(actual)))
    for k, (actual, snap) in enumerate(held):
        assert_same(actual, snap, f"{name} {option}: output of call {k} after later calls")
    # where Inductor can compile, a region running unfused is a fault to find, not a choice
    refused = [str(w.message) for w in caught if issubclass(w.category, RegionWarning)]
    assert inductor.compiler_available() is not None or not refused, refused
