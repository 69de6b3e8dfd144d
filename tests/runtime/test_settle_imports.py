"""The full collection the first preparation of a process makes due runs while the module is
prepared, not on a later call (``hot.settle_imports``)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from static_runtime.runtime import hot

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def full_collections():
    """A list that gets an entry at the start of every full collection while the test runs."""
    seen: list[int] = []

    def watch(phase, info):
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(watch)
    try:
        yield seen
    finally:
        gc.callbacks.remove(watch)


def test_a_preparation_that_imported_many_modules_collects(full_collections):
    before = len(sys.modules) - hot.IMPORTS_WORTH_COLLECTING
    assert hot.settle_imports(before)
    assert full_collections


def test_a_preparation_that_imported_few_modules_does_not(full_collections):
    before = len(sys.modules) - hot.IMPORTS_WORTH_COLLECTING + 1
    assert not hot.settle_imports(before)
    assert not full_collections


def test_a_process_that_disabled_the_collector_is_left_so(full_collections):
    gc.disable()
    try:
        assert not hot.settle_imports(0)
    finally:
        gc.enable()
    assert not full_collections


_CHILD = textwrap.dedent("""
    import gc, json, random, sys, warnings
    import torch
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    import static_runtime as sr
    from static_runtime.runtime.hot import wait_for_builds
    from benchmarks.zoo import ZOO

    model = ZOO["dcn_v2"]
    scripted = torch.jit.script(model.eager().eval())
    full = []
    gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2
                        and full.append(phase))
    modules = len(sys.modules)
    mod = sr.StaticModule(scripted)
    imported, during_preparation = len(sys.modules) - modules, len(full)
    del full[:]
    g = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    with torch.inference_mode():
        for batch in (1, 512, 256):
            for _ in range(5):
                mod(*model.make_inputs(batch, g))
        wait_for_builds()
        for _ in range(3000):
            mod(*model.make_inputs(rng.randint(1, 512), g))
    print(json.dumps([imported, during_preparation, len(full)]))
""")


def test_a_fresh_process_collects_while_preparing_and_not_while_calling():
    out = subprocess.run([sys.executable, "-c", _CHILD], check=False, capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    imported, during_preparation, during_calls = json.loads(out.stdout.strip().splitlines()[-1])
    assert imported >= hot.IMPORTS_WORTH_COLLECTING
    assert during_preparation >= 1
    assert during_calls == 0
