"""Out variants find the call they made for an arena tensor again after a change of size
(``ops/written.py``): traffic of many sizes switches layouts on most calls, and each measured
out variant (GEMMs, a product with a residual, layer norm, convolutions) keeps what it wrote
by the tensor, weakly — results stay eager's whichever layout comes, the slow path runs once
per tensor written, and a tensor dropped is neither kept alive nor mistaken for a new one."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import static_runtime as sr
from static_runtime.ops import ckernels, written
from static_runtime.ops.kernels import Choice
from static_runtime.ops.written import find_written, keep_written

MAX_WRITTEN = ckernels._MAX_SHAPES  # (the kernels' per-shape caches' bound)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))


class Block(nn.Module):
    """A transformer-like block on (batch, length, 32) and a conv on an image: every
    measured out variant that writes the arena."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)
        self.norm = nn.LayerNorm(32)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x, image):
        h = self.norm(x + self.down(torch.relu(self.up(x))))
        return self.up(h).sum(-1), torch.relu(self.conv(image)) * 2.0


def test_a_tensor_is_held_weakly_and_the_entries_are_bounded():
    kept: dict[int, tuple] = {}
    t = torch.ones(3)
    keep_written(kept, t, "facts")
    entry = kept[id(t)]
    assert entry[0]() is t and entry[1:] == ("facts",)
    assert find_written(kept, t) is entry and find_written(kept, torch.ones(3)) is None
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None and entry[0]() is None  # (not kept alive by the entry)
    tensors = [torch.ones(1) for _ in range(MAX_WRITTEN + 5)]
    for x in tensors:
        keep_written(kept, x, 0)
    assert len(kept) == MAX_WRITTEN
    assert id(tensors[-1]) in kept and id(tensors[0]) not in kept  # (the oldest dropped)


@pytest.mark.skipif(not ckernels.available(),
                    reason=f"no C kernels: {ckernels.why_unavailable()}")
def test_sizes_in_turn_answer_as_eager_and_each_tensor_takes_the_slow_path_once(
        monkeypatch):
    calls: list[int] = []
    original = written.keep_written

    def counting(kept, out, *facts):
        calls.append(id(out))
        original(kept, out, *facts)

    for module in ("gemm", "residual", "norms", "conv"):
        monkeypatch.setattr(f"static_runtime.ops.{module}.keep_written", counting)
    # (no interim kernels: one handing over to its choice midway would make the node's
    # calls anew, as it should, wherever the measurement chose a kernel that compiles per
    # shape — on some machines, not others)
    monkeypatch.setattr(Choice, "interim", lambda self, per_shape=(): None)
    torch.manual_seed(0)
    model = Block().eval()
    mod = sr.StaticModule(torch.jit.script(model))
    sizes = [(2, 5, 9), (1, 7, 12), (3, 4, 8)]
    inputs = {s: (torch.randn(s[0], s[1], 32), torch.randn(s[0], 3, s[2], s[2]))
              for s in sizes}

    def run(size):
        x, image = inputs[size]
        before = (x.clone(), image.clone())
        got = mod(x, image)
        want = model(x, image)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        assert torch.equal(x, before[0]) and torch.equal(image, before[1])
        return got

    for _ in range(4):  # (laid out, programs made, the choices measured)
        for size in sizes:
            run(size)
    from static_runtime.runtime.hot import wait_for_builds

    wait_for_builds()
    for size in sizes:
        run(size)
        run(size)
    calls.clear()
    first = [run(size) for size in sizes * 3]  # a change of size on every call
    assert calls == [], "an out variant took the slow path on a layout it had written"
    again = [run(size) for size in sizes * 3]
    for a, b in zip(first, again, strict=True):  # (repeated calls: the same answer)
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)


def test_a_dead_tensors_id_taken_by_a_new_one_is_not_its_entry():
    kept: dict[int, tuple] = {}
    t = torch.ones(4, 4)
    keep_written(kept, t, "for a 4 × 4 tensor")
    address = id(t)
    del t
    gc.collect()
    entry = kept.get(address)
    assert entry is not None and entry[0]() is None  # (whatever now has that id, not it)
    newcomer = torch.ones(4, 4)
    kept[id(newcomer)] = entry  # (as if the new tensor had taken the dead one's id)
    assert find_written(kept, newcomer) is None
