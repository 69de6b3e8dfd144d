"""Code specialised per signature only for hot signatures, built off the request path
(``runtime/hot.py``); every other size is served by one generic function."""

from __future__ import annotations

import warnings

import pytest
import torch
from differential import _snapshot, script

import static_runtime as sr
from static_runtime.runtime.hot import BackgroundBuilder, HotSignatures

SRC = """
def f(x: torch.Tensor, w: torch.Tensor):
    h = torch.relu(torch.matmul(x, w))
    n = h.size(0)
    return (h.view(n, -1) * 2 + 1).sum(1)
"""


def eager(x, w):
    h = torch.relu(x @ w)
    return (h.view(h.size(0), -1) * 2 + 1).sum(1)


def test_hot_after_threshold_calls_in_the_window():
    hot = HotSignatures(threshold=3, window=5)
    assert [hot.note("a") for _ in range(3)] == [False, False, True]
    for k in "bcde":  # "a" falls out of the last five calls
        hot.note(k)
    assert not hot.note("a")
    with pytest.raises(ValueError):
        HotSignatures(0)


def test_one_shape_gets_its_own_code_off_the_request_path():
    mod = sr.StaticModule(script(SRC), options=sr.StaticModuleOptions(specialize_after=3))
    x, w = torch.randn(4, 6), torch.randn(6, 5)
    outs = []
    for _ in range(4):
        outs.append(mod(x, w))
    mod._codes.builder.wait()
    for _ in range(3):
        outs.append(mod(x, w))
    assert "Specialised on its input signature" in mod.code
    for out in outs:
        torch.testing.assert_close(out, eager(x, w))


def test_many_sizes_share_one_generic_function():
    """Forty sizes, each called twice: one recording call per size (the arena is planned
    per size; from the second size on through generated code), then the generic code; no
    size becomes hot, so nothing is specialised and no code is generated per size: two
    functions in all, the generic one and its recording variant. (Shape programs off: with
    them, sizes are laid out without recording calls, ``test_symbolic.py``.)"""
    mod = sr.StaticModule(script(SRC), options=sr.StaticModuleOptions(
        plan_cache_size=64, shape_programs=False))
    w = torch.randn(6, 5)
    held = []
    for rows in range(1, 41):
        x = torch.randn(rows, 6)
        before = _snapshot(x)
        for _ in range(2):
            out = mod(x, w)
            torch.testing.assert_close(out, eager(x, w))
            held.append((out, _snapshot(out)))
        torch.testing.assert_close(x, before)
    mod._codes.builder.wait()
    assert mod._codes.generated == 2
    assert "Specialised" not in mod.code
    for out, snap in held:
        torch.testing.assert_close(out, snap)


def test_at_once_specialises_every_signature_on_its_first_arena_call():
    mod = sr.StaticModule(script(SRC), options=sr.StaticModuleOptions(specialize_after=0))
    w = torch.randn(6, 5)
    for rows in (2, 3):
        x = torch.randn(rows, 6)
        mod(x, w)
        torch.testing.assert_close(mod(x, w), eager(x, w))
        assert "Specialised on its input signature" in mod.code
    assert mod._codes.generated == 3  # two specialised, and the recording variant


def test_a_build_that_fails_is_reported_and_the_caller_goes_on():
    import threading

    builder = BackgroundBuilder("test")
    go = threading.Event()

    def broken():
        go.wait(10)
        raise RuntimeError("no luck")

    builder.submit("k", broken)
    with pytest.warns(RuntimeWarning, match="no luck"):  # noqa: PT031  (process-wide filter)
        go.set()
        builder.wait()
    assert builder.failures == {"k": "RuntimeError: no luck"}
    builder.submit("k", broken)  # not tried again
    builder.wait()


def test_specialize_after_must_not_be_negative():
    with pytest.raises(ValueError, match="specialize_after"):
        sr.StaticModuleOptions(specialize_after=-1)


def test_threads_share_the_generic_and_the_specialised_code():
    import threading

    mod = sr.StaticModule(script(SRC), options=sr.StaticModuleOptions(specialize_after=2))
    w = torch.randn(6, 5)
    errors = []

    def worker(seed):
        g = torch.Generator().manual_seed(seed)
        try:
            for k in range(30):
                x = torch.randn(1 + (k * seed) % 5, 6, generator=g)
                torch.testing.assert_close(mod(x, w), eager(x, w))
        except Exception as e:  # noqa: BLE001  (collected, asserted below)
            errors.append(e)

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2, 3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors


def test_memory_and_code_stay_bounded_over_many_sizes():
    """Five hundred distinct sizes: layouts bounded by ``plan_cache_size``, functions
    generated bounded by what does not depend on sizes (the generic one, its recording
    variant, two per shape program — its layouts' and its sizes' first calls' —, at most
    four programs), the arena that of the largest size (planned again only when a size
    outgrew the regions), every result eager's."""
    mod = sr.StaticModule(script(SRC), options=sr.StaticModuleOptions(plan_cache_size=16))
    rt = mod.runtime()
    w = torch.randn(6, 5)
    g = torch.Generator().manual_seed(5)
    for n in (torch.randperm(500, generator=g) + 1).tolist():
        x = torch.randn(n, 6, generator=g)
        torch.testing.assert_close(rt(x, w), eager(x, w))
    assert len(mod.layouts) <= 16
    programs = sum(len(p) for p in mod._memory.programs._items.values())
    assert 1 <= programs <= 4
    assert mod._codes.generated <= 2 + 2 * programs  # not one per size
    largest = torch.randn(500, 6, generator=g)
    for _ in range(2):
        torch.testing.assert_close(rt(largest, w), eager(largest, w))
    assert rt._interp.arena.numel() <= mod.memory_plan().arena_bytes + 4096


def test_wait_for_builds_waits_for_every_module():
    from static_runtime.runtime.hot import wait_for_builds

    mods = [sr.StaticModule(script(SRC), options=sr.StaticModuleOptions(specialize_after=2))
            for _ in range(2)]
    x, w = torch.randn(3, 6), torch.randn(6, 5)
    for mod in mods:
        for _ in range(3):
            mod(x, w)
    wait_for_builds()
    for mod in mods:
        torch.testing.assert_close(mod(x, w), eager(x, w))
        assert "Specialised on its input signature" in mod.code


def test_a_measurement_holds_background_builds_between_their_steps():
    """Kernels timed on a request thread while a build of ours runs: the measurement waits for
    the step under way, and no step runs until it is done (a GRU measured under a build read
    12 × its time, lost to ATen's kernel, and that choice was remembered on disk)."""
    import threading
    import time

    from static_runtime.ops import kernels
    from static_runtime.runtime.hot import yield_to_requests

    steps: list[int] = []
    started = threading.Event()

    def build():
        pause = yield_to_requests()
        for i in range(100):
            steps.append(i)
            started.set()
            time.sleep(0.001)  # inside a step
            pause()

    builder = BackgroundBuilder("test-steps")
    builder.submit("k", build)
    assert started.wait(10)
    with kernels.measuring():
        seen = len(steps)
        time.sleep(0.05)
        assert len(steps) == seen  # no step while measuring
    builder.wait()
    assert steps == list(range(100))
