"""``compare.files``: the runners of the ``bench`` command for a ``.pt`` and a ``.pt2``, in
order, and a file that cannot be loaded reported by every peer as a one-line note."""

from __future__ import annotations

import torch

from static_runtime import compare
from static_runtime.compare.files import (
    ARCHIVE_RUNNERS,
    EXPORTED_RUNNERS,
    make_archive_runners,
    make_exported_runners,
)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 2)).eval()


def test_archive_runners_in_order_and_agreeing(tmp_path):
    path = tmp_path / "mlp.pt"
    torch.jit.save(torch.jit.script(_mlp()), str(path))
    x = torch.randn(3, 8)
    runners = make_archive_runners(path, (x,))
    assert tuple(r.name for r in runners) == ARCHIVE_RUNNERS
    by_name = {r.name: r for r in runners}
    assert "torch.jit.script" in by_name["torch_compile"].note
    agree = compare.outputs_agree(runners, reference="torchscript")
    assert all(agree[name] for name in ("torchscript_frozen", "pytorch_static_runtime",
                                        "static_runtime"))
    assert by_name["static_runtime"].held_bytes() > 0


def test_exported_runners_in_order(tmp_path):
    path = tmp_path / "mlp.pt2"
    x = torch.randn(3, 8)
    torch.export.save(torch.export.export(_mlp(), (x,)), str(path))
    runners = make_exported_runners(path, (x,))
    assert tuple(r.name for r in runners) == EXPORTED_RUNNERS
    by_name = {r.name: r for r in runners}
    assert not by_name["torch_compile"].note
    assert by_name["torch_compile"].details["compile_seconds"] > 0
    agree = compare.outputs_agree(runners, reference="eager")
    assert agree["torch_compile"] is True and agree["static_runtime"] is True


def test_a_file_that_cannot_be_loaded_is_a_note_for_every_peer(tmp_path):
    path = tmp_path / "missing.pt"
    runners = make_archive_runners(path, (torch.randn(1, 8),))
    assert tuple(r.name for r in runners) == ARCHIVE_RUNNERS
    for r in runners:
        assert r.note and "\n" not in r.note, (r.name, r.note)
