"""The zoo summary of the latency benchmark: ours ÷ ONNX Runtime per case and its geometric
means (all cases, batch 1, larger batches), computed from recorded medians; cases where ORT
refused or the worker failed are left out. Nothing here is timed."""

from __future__ import annotations

import math

import pytest

from benchmarks.latency_cases import ZOO_PEERS
from benchmarks.latency_report import print_zoo_tables, zoo_ratios


def _row(model: str, batch: int, **medians: float | None) -> dict:
    runners = {}
    for name, us in medians.items():
        runners[name] = {"median_us": us, "note": "refused: why" if us is None else None,
                         "caveats": [], "agrees_with_eager": True, "max_abs_error": 0.0}
    return {"model": model, "family": "f", "compile": "script", "frozen_nodes": 3,
            "batch": batch, "runners": runners}


ROWS = [
    _row("a", 1, eager=50.0, torchscript=40.0, pytorch_static_runtime=30.0, onnxruntime=10.0,
         static_runtime=20.0),
    _row("a", 8, eager=90.0, torchscript=80.0, pytorch_static_runtime=70.0, onnxruntime=50.0,
         static_runtime=40.0),
    _row("b", 1, eager=50.0, torchscript=40.0, pytorch_static_runtime=30.0, onnxruntime=None,
         static_runtime=20.0),
    {"model": "c", "batch": 1, "error": "worker died"},
]


def test_ratios_of_a_case():
    vs_cpp, vs_best, vs_ort = zoo_ratios(ROWS[0])
    assert (vs_cpp, vs_best, vs_ort) == pytest.approx((20 / 30, 20 / 30, 2.0))
    assert zoo_ratios(ROWS[2])[2] is None  # ORT refused


def test_summary_has_ours_over_ort_geomeans(capsys):
    summary = print_zoo_tables(ROWS, ZOO_PEERS, repeats=3, threads=1)
    assert summary["cases_ort_all"] == 2
    assert summary["geomean_ours_over_ort_all"] == pytest.approx(math.sqrt(2.0 * 0.8))
    assert summary["geomean_ours_over_ort_batch_1"] == pytest.approx(2.0)
    assert summary["geomean_ours_over_ort_batch_gt_1"] == pytest.approx(0.8)
    assert summary["worst_ours_over_ort"] == {"ratio": pytest.approx(2.0), "case": "a:1"}
    out = capsys.readouterr().out
    assert "ours÷ORT" in out and "geomean ours ÷ ORT: 1.265 (2 cases)" in out


def test_no_ort_column_without_ort_among_the_peers(capsys):
    peers = tuple(p for p in ZOO_PEERS if p != "onnxruntime")
    summary = print_zoo_tables(ROWS, peers, repeats=3, threads=1)
    assert "geomean_ours_over_ort_all" not in summary
    assert "ours÷ORT" not in capsys.readouterr().out
