"""Background builds give way to calls (``runtime/hot.py``): a build waits at its pause
points while a call of any module runs, a hot signature's code is built before a shape
program, and the process-wide settings a build changes come back as they were."""

from __future__ import annotations

import gc
import sys
import threading
import time

import pytest
import torch
from differential import script

import static_runtime as sr
from static_runtime.runtime import hot
from static_runtime.runtime.hot import BackgroundBuilder, yield_to_requests

SRC = """
def f(x: torch.Tensor, w: torch.Tensor):
    return torch.relu(torch.matmul(x, w)) + 1
"""


def _stepping_build(steps: list, started: threading.Event, n: int = 50):
    def build():
        pause = yield_to_requests()
        for i in range(n):
            steps.append(i)
            started.set()
            pause()

    return build


@pytest.fixture(autouse=True)
def no_builds_of_other_tests():
    """Builds an earlier test of this process left running finish first (they would take
    the urgent turn, or give way to this test's marked calls)."""
    hot.wait_for_builds()


@pytest.fixture
def slow_giving_way(monkeypatch):
    """A build that meets a running call gives way for as long as it runs (up to 60 s)."""
    monkeypatch.setattr(hot, "SLICE_S", 0.0)
    monkeypatch.setattr(hot, "GIVE_WAY_S", 60.0)
    monkeypatch.setattr(hot, "URGENT_GIVE_WAY_S", 60.0)
    monkeypatch.setattr(hot, "URGENT_WAIT_S", 60.0)


def test_a_call_marks_itself_running_for_the_builds():
    mod = sr.StaticModule(script(SRC))
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    seen = []
    rt = sr.StaticRuntime(mod)
    inner = rt._run

    def spying(inputs):
        seen.append(len(hot.CALLS))
        return inner(inputs)

    rt._run = spying
    before = len(hot.CALLS)
    torch.testing.assert_close(rt(x, w), torch.relu(x @ w) + 1)
    assert seen == [before + 1] and len(hot.CALLS) == before
    rt._run = lambda inputs: (_ for _ in ()).throw(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        rt(x, w)
    assert len(hot.CALLS) == before  # (a call that raised is not running any more)
    with rt.guard():  # (the profiler's calls)
        assert len(hot.CALLS) == before + 1
    assert len(hot.CALLS) == before


def test_a_build_waits_while_a_call_runs_and_goes_on_after(slow_giving_way):
    steps: list[int] = []
    started = threading.Event()
    hot.CALLS.append(None)  # a call running on another thread
    try:
        builder = BackgroundBuilder("test-give-way")
        builder.submit("k", _stepping_build(steps, started))
        assert started.wait(10)
        time.sleep(0.1)
        assert len(steps) == 1  # at its first pause point, waiting
    finally:
        hot.CALLS.pop()
    builder.wait()
    assert steps == list(range(50))


def test_a_build_gives_way_for_a_bounded_time_only(monkeypatch):
    """A call that never ends (a client holding a runtime) delays builds, never stops them."""
    monkeypatch.setattr(hot, "SLICE_S", 0.0)
    monkeypatch.setattr(hot, "GIVE_WAY_S", 0.001)
    steps: list[int] = []
    hot.CALLS.append(None)
    try:
        builder = BackgroundBuilder("test-bounded")
        builder.submit("k", _stepping_build(steps, threading.Event(), n=20))
        builder.wait()
    finally:
        hot.CALLS.pop()
    assert steps == list(range(20))


def test_an_urgent_build_goes_before_the_others(slow_giving_way):
    order: list[str] = []
    started = threading.Event()
    release = threading.Event()

    def slow():
        pause = yield_to_requests()
        started.set()
        release.wait(10)
        pause()  # (without the urgent build's turn, this takes its step back at once)
        order.append("shapes")

    def urgent():
        yield_to_requests()()
        order.append("specialised code")

    shapes = BackgroundBuilder("test-shapes")
    code = BackgroundBuilder("test-code", urgent=True)
    shapes.submit("s", slow)
    assert started.wait(10)
    code.submit("c", urgent)  # queued while the other build holds its step
    release.set()
    code.wait()
    shapes.wait()
    assert order == ["specialised code", "shapes"]
    assert not hot._URGENT  # (each urgent build taken off when done)


def test_settings_a_build_changes_come_back(monkeypatch):
    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    during = []

    def build():
        during.append((gc.get_threshold(), sys.getswitchinterval()))

    builder = BackgroundBuilder("test-settings")
    builder.submit("k", build)
    builder.wait()
    assert during[0][0][2] > threshold[2] and during[0][1] < interval
    assert gc.get_threshold() == threshold and sys.getswitchinterval() == interval


def test_a_setting_the_process_changed_during_a_build_is_kept():
    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    try:
        def build():
            gc.set_threshold(threshold[0], threshold[1], 7)
            sys.setswitchinterval(0.002)

        builder = BackgroundBuilder("test-kept")
        builder.submit("k", build)
        builder.wait()
        assert gc.get_threshold()[2] == 7 and sys.getswitchinterval() == 0.002
    finally:
        gc.set_threshold(*threshold)
        sys.setswitchinterval(interval)


def test_a_module_called_back_to_back_still_gets_its_builds():
    """Calls keep running while the hot signature's code and the shape program are built
    (each gives way, then goes on): both arrive, and every answer is right."""
    mod = sr.StaticModule(script(SRC), options=sr.StaticModuleOptions(specialize_after=3))
    w = torch.randn(4, 5)
    x = torch.randn(3, 4)
    for _ in range(200):
        torch.testing.assert_close(mod(x, w), torch.relu(x @ w) + 1)
    hot.wait_for_builds()
    assert "Specialised on its input signature" in mod.code
    assert any(mod._memory.programs.get(s) for s in mod._memory.programs._items)
    for n in (5, 9):
        x = torch.randn(n, 4)
        torch.testing.assert_close(mod(x, w), torch.relu(x @ w) + 1)
