"""What the latency benchmark measures: the peers it compares with ours, how tables name
them, and the (model, batch) cases, of the built-in models or of the model zoo."""

from __future__ import annotations

from pathlib import Path

import click

PEERS = ("eager", "torchscript", "optimize_for_inference", "pytorch_static_runtime",
         "torch_compile", "onnxruntime", "static_runtime_fused", "static_runtime_untuned")
#: ours with fusion_compiler="inductor" (issue 12); a peer only when asked for in --peers
FUSED = "static_runtime_fused"
#: ours with the defaults before issue 19 (kernel_choice="default", channels_last=False);
#: a peer only when asked for in --peers
UNTUNED = "static_runtime_untuned"
OURS = "static_runtime"
SHORT = {"eager": "eager", "torchscript": "TorchScript", "optimize_for_inference": "opt4inf",
         "pytorch_static_runtime": "C++ SR", "torch_compile": "compile",
         "onnxruntime": "ORT", "static_runtime": "ours",
         "static_runtime_fused": "ours+fused", "static_runtime_untuned": "ours untuned"}
CASES = ("mlp:1", "dlrm:1", "dlrm:256", "multi_head_attention:1", "multi_head_attention:64",
         "transformer_encoder:1", "resnet_small:1", "control_flow:1")
ZOO_PEERS = ("eager", "torchscript", "pytorch_static_runtime", "onnxruntime")
RESULTS = Path(__file__).parent / "results"


def cases_of(models: str) -> list[str]:
    """``mlp,dlrm:256`` → ``["mlp:1", "dlrm:256"]``; a bare name means its default batches."""
    cases = []
    for item in filter(None, (m.strip() for m in models.split(","))):
        if ":" in item:
            cases.append(item)
        else:
            cases += [c for c in CASES if c.split(":")[0] == item] or [f"{item}:1"]
    return cases


def zoo_cases(models: str | None) -> list[str]:
    """Zoo cases: every named zoo model (all if ``models`` is None) at its batches, or at the
    batch given as ``name:batch``."""
    from benchmarks.zoo import ZOO

    items = list(ZOO) if models is None else [
        m.strip() for m in models.split(",") if m.strip()]
    bad = [m for m in items if m.split(":")[0] not in ZOO]
    if bad:
        raise click.BadParameter(f"unknown zoo model(s) {bad}; choose from {list(ZOO)}",
                                 param_hint="--models")
    return [c for m in items for c in
            ([m] if ":" in m else [f"{m}:{b}" for b in ZOO[m].batches])]
