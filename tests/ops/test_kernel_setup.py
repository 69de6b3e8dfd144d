"""Kernels that cost setup at each new size (oneDNN makes a primitive per shape): the chooser
times each candidate's first call, and a measured GEMM serves a new row count of a bucket with
the candidate whose first call costs least until the chosen one would have repaid its setup
(``Choice.interim``). Results equal eager's whichever kernel serves."""

import pytest
import torch
from torch import nn

import static_runtime as sr
from static_runtime.ops import gemm
from static_runtime.ops.gemm import GemmKernels
from static_runtime.ops.kernels import Choice, DiskCache, KernelChooser

MEASURE = sr.StaticModuleOptions(kernel_choice="measure")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))


def test_interim_is_the_cheapest_first_call_until_the_choice_repays_its_setup():
    # one-call costs: aten 12, onednn 305, native 9 → native; it saves 3 µs a call less than
    # onednn, whose 300 µs of setup take 100 calls to repay
    choice = Choice("onednn", {"aten": 10.0, "onednn": 5.0, "native": 8.0}, "measured",
                    {"aten": 2.0, "onednn": 300.0, "native": 1.0})
    assert choice.interim(("onednn",)) == ("native", 100)
    assert "a new size: native for its first 100 calls" in choice.describe(("onednn",))
    # a first call's cost beyond the next counts only for kernels that make something per
    # shape: ours and ATen's pay theirs once (a library's first use, cold code)
    assert choice.interim() is None and "a new size" not in choice.describe()
    noisy = Choice("native", {"aten": 3.0, "native": 1.5}, "measured",
                   {"aten": 0.0, "native": 23.0})
    assert noisy.interim(("onednn",)) is None
    cheap = Choice("onednn", {"aten": 10.0, "onednn": 5.0}, "measured",
                   {"aten": 0.0, "onednn": 4.0})
    assert cheap.interim(("onednn",)) is None  # (its first call, 9 µs, is the cheapest)
    assert Choice("aten", {}, "cached").interim(("onednn",)) is None  # (an older cache's)


def test_the_chooser_records_each_candidates_first_call(tmp_path):
    chooser = KernelChooser(DiskCache(tmp_path / "k.json"))
    x = torch.randn(64, 64)
    state = {"made": False}

    def with_setup():  # (its first call does work the next ones do not)
        if not state["made"]:
            torch.mm(torch.randn(400, 400), torch.randn(400, 400))
            state["made"] = True
        return x * 2

    choice = chooser.choose("k", ("ref", "setup"), lambda: {"ref": lambda: x * 2,
                                                            "setup": with_setup}, "ref")
    assert set(choice.setup_us) == {"ref", "setup"}
    assert choice.setup_us["setup"] > choice.setup_us["ref"]
    remembered = KernelChooser(DiskCache(tmp_path / "k.json")).lookup("k", ("ref", "setup"))
    assert remembered.setup_us == choice.setup_us


@pytest.mark.parametrize("allocating", [False, True])
def test_a_new_row_count_runs_the_interim_kernel_then_the_choice(allocating, monkeypatch):
    names = gemm.candidate_names()
    if "onednn" not in names:
        pytest.skip("no oneDNN in this build")
    interim = "native" if "native" in names else "aten"
    monkeypatch.setattr(KernelChooser, "choose", lambda self, key, names, make, default: Choice(
        "onednn", {interim: 8.0, "onednn": 5.0}, "forced", {interim: 0.0, "onednn": 9.0}))
    ran: list[tuple[str, int]] = []
    for method in ("kernel", "direct"):
        original = getattr(GemmKernels, method)

        def spy(self, name, rows, _original=original):
            made = _original(self, name, rows)
            if made is None:
                return None

            def call(*args):
                ran.append((name, rows))
                return made(*args)
            return call

        monkeypatch.setattr(GemmKernels, method, spy)
    torch.manual_seed(0)
    lin = nn.Linear(24, 16).eval()
    # (no shape programs: a new size's first call records, whatever a background build did)
    options = sr.StaticModuleOptions(kernel_choice="measure", shape_programs=False) \
        if not allocating else sr.StaticModuleOptions(
            kernel_choice="measure", enable_out_variant=False, optimize_memory=False)
    mod = sr.StaticModule(torch.jit.script(lin), options)
    for rows in (5, *[6] * 7, 5):  # 5 measured; 6 a new row count of its bucket
        x = torch.randn(rows, 24)
        before = x.clone()
        torch.testing.assert_close(mod(x), lin(x), rtol=1e-5, atol=1e-5)
        assert torch.equal(x, before)
    # 9 µs of setup, 3 µs saved a call: three calls of the interim kernel, then oneDNN's
    assert [name for name, rows in ran if rows == 6] == [interim] * 3 + ["onednn"] * 4, ran
    assert [name for name, rows in ran if rows == 5] == ["onednn"] * 2, ran
    assert f"a new size: {interim} for its first 3 calls" in mod.describe()
