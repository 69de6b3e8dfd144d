"""Kernel choice by measurement (``ops/kernels.py``) and the measured GEMMs (``ops/gemm.py``).

Differential against TorchScript on two input shape sets, whichever kernel wins on this
machine, and with each kernel forced; the cache round-trips and merges; a warm cache (another
module, a loaded ``.srm``) measures nothing. Measurements are counted, never timed.
"""

import json
import warnings

import pytest
import torch
from differential import check
from torch import nn

import static_runtime as sr
from static_runtime.ops import ckernels, gemm, kernel_cache, kernels
from static_runtime.ops.kernel_cache import DiskCache
from static_runtime.ops.kernels import Choice, KernelChooser

MEASURE = sr.StaticModuleOptions(kernel_choice="measure", verify_memory_plans=True,
                                 specialize_after=0)
MEASURE_INTERP = sr.StaticModuleOptions(kernel_choice="measure", executor="interpreter")
MEASURE_NO_OUT = sr.StaticModuleOptions(kernel_choice="measure", enable_out_variant=False,
                                        optimize_memory=False)
OPTIONS = {"measure": MEASURE, "interpreter": MEASURE_INTERP, "no out variants": MEASURE_NO_OUT}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own, empty cache."""
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


class Gemms(nn.Module):
    """Every GEMM form the measured tier claims: linear (small, and large enough to be fused
    with its relu into linear_pointwise), addmm, mm, matmul with a rank-3 input."""

    def __init__(self):
        super().__init__()
        self.big = nn.Linear(64, 512 * 8)  # 512 × 512 elements or more: fused with the relu
        self.small = nn.Linear(512 * 8, 48)
        self.nobias = nn.Linear(48, 40, bias=False)
        self.b = nn.Parameter(torch.randn(24) * 0.1)
        self.B = nn.Parameter(torch.randn(40, 24) * 0.2)
        self.C = nn.Parameter(torch.randn(24, 16) * 0.2)

    def forward(self, x):
        h = torch.relu(self.big(x))
        h = self.small(h)
        h = self.nobias(h)
        flat = h.reshape(-1, 40)
        y = torch.addmm(self.b, flat, self.B)
        y = torch.mm(y, self.C)
        z = torch.matmul(y.reshape(h.shape[0], -1, 16), self.C.t())
        return torch.tanh(z)


def _inputs():
    torch.manual_seed(3)
    return [torch.randn(2, 3, 64)], [torch.randn(4, 5, 64)]


def test_differential_two_shape_sets():
    first, second = _inputs()
    mods = check(Gemms().eval(), first, second, options=OPTIONS)
    mod = mods["measure"]
    assert mod.kernels.measured > 0
    kinds = [pn.kind for pn in mod.plan.nodes() if "by measurement" in pn.impl.label]
    assert {"aten::addmm", "aten::linear", "aten::matmul", "aten::mm",
            "static_runtime::linear_pointwise"} <= set(kinds)


@pytest.mark.parametrize("name", gemm.candidate_names())
def test_each_kernel_forced(name, monkeypatch):
    """Whatever wins here, every candidate must compute the model right when chosen."""
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(name, {}, "forced"))
    first, second = _inputs()
    mod = check(Gemms().eval(), first, second, options={"measure": MEASURE})["measure"]
    assert f": {name} (forced)" in mod.describe()


def test_vector_and_rank_four_inputs():
    lin = nn.Linear(32, 24).eval()
    check(lin, [torch.randn(32)], [torch.randn(2, 3, 4, 32)], options=OPTIONS)


@pytest.mark.parametrize("name", gemm.candidate_names())
def test_row_counts_up_to_the_same_power_of_two_share_a_measured_choice(name, monkeypatch):
    """Traffic of every size: a new row count in a bucket measured before is not measured
    again, and runs that bucket's kernel right (MKL's packed for it); the next bucket is
    measured. The choice is asked for by the bucket, so another module (or process) that
    meets the bucket's row counts in another order asks for the same key."""
    asked: list[str] = []

    def forced(self, key, names, make, default):
        asked.append(key)
        return Choice(name, {}, "forced")

    monkeypatch.setattr(KernelChooser, "choose", forced)
    lin = nn.Linear(24, 16).eval()
    mod = sr.StaticModule(torch.jit.script(lin), MEASURE)
    for rows in (5, 8, 6, 7, 9):
        x = torch.randn(rows, 24)
        torch.testing.assert_close(mod(x), lin(x))
    assert [k.split(" K=")[0].split("M<=")[1] for k in asked] == ["8", "16"]
    assert "M<=8 threads=1 (measured at M=5)" in mod.describe().replace(
        f"threads={torch.get_num_threads()}", "threads=1")
    other = sr.StaticModule(torch.jit.script(lin), MEASURE)
    other(torch.randn(7, 24))
    assert asked[-1] == asked[0]  # (row count 7 first: the same key as 5's)


@pytest.mark.parametrize("name", gemm.candidate_names())
@pytest.mark.parametrize("bias", [True, False])
def test_repeated_shapes_take_the_short_call_and_still_check_their_input(name, bias,
                                                                         monkeypatch):
    """After a shape's first call, its next calls go straight to the kernel (ours without
    its checks); an input of those shapes that the kernel cannot read — strided, on another
    device — still gets the general path, which computes it or raises as eager does."""
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(name, {}, "forced"))
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 24, bias=bias), nn.ReLU(), nn.Linear(24, 8)).eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    for shape in ((2, 3, 32), (5, 32), (2, 3, 32), (32,), (5, 32)):
        for _ in range(3):
            x = torch.randn(shape)
            before = x.clone()
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-5)
            assert torch.equal(x, before)
    strided = torch.randn(2, 3, 64)[..., ::2]
    torch.testing.assert_close(mod(strided), model(strided), rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError):
        mod(torch.randn(2, 3, 32, device="meta"))
    x = torch.randn(2, 3, 32)
    torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-5)


def test_a_row_count_has_one_choice_for_its_first_call_and_the_next(monkeypatch):
    """A node's first call of a size records (its output allocated), the next write into the
    arena: one choice serves both, so the same call gives the same bits on every run (with
    a choice per form, here ours allocating and ATen's writing, they differed)."""
    asked: list[str] = []
    other = "native" if "native" in gemm.candidate_names() else "onednn"

    def per_form(self, key, names, make, default):
        asked.append(key)
        return Choice(other if key.endswith(" allocating") else "aten", {}, "forced")

    monkeypatch.setattr(KernelChooser, "choose", per_form)
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(32, 48), nn.Tanh(), nn.Linear(48, 16)).eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    for shape in ((5, 32), (3, 4, 32)):  # (row counts in two buckets: 8 and 16)
        x = torch.randn(shape)
        runs = [mod(x) for _ in range(3)]
        torch.testing.assert_close(runs[0], model(x), rtol=1e-4, atol=1e-5)
        assert all(torch.equal(r, runs[0]) for r in runs[1:])
    assert len(asked) == 2 * 2, asked  # two linears, two row counts: one choice each


def test_other_dtype_and_non_contiguous_run_the_default():
    lin = nn.Linear(16, 8).eval()
    mod = sr.StaticModule(torch.jit.script(lin), MEASURE)
    x = torch.randn(16, 5).t()  # not contiguous
    torch.testing.assert_close(mod(x), lin(x))
    assert mod.kernels.measured == 0
    with pytest.raises(RuntimeError):  # the default's own error for a wrong width
        mod(torch.randn(3, 7))


def test_warm_cache_measures_nothing_and_describe_shows_the_choice(cache_dir):
    scripted = torch.jit.script(Gemms().eval())
    first, second = _inputs()
    mod = sr.StaticModule(scripted, MEASURE)
    mod.kernels.model_budget_s = 1e9  # (a loaded machine must not make this test skip any)
    mod(*first)
    mod(*second)
    measured = mod.kernels.measured
    assert measured >= 12 and mod.kernels.cached == 0 and mod.kernels.skipped == 0
    text = mod.describe()
    assert "M<=8 threads=" in text and "(measured; µs: " in text and "aten " in text
    assert f"kernel choice: {measured} measured" in text
    entries = _on_disk(cache_dir / "kernels.json")
    assert len(entries) == measured
    assert all(e["choice"] in e["us"] for e in entries.values())

    again = sr.StaticModule(scripted, MEASURE)
    again.kernels.model_budget_s = 1e9
    torch.testing.assert_close(again(*first), mod(*first))
    again(*second)
    assert again.kernels.measured == 0 and again.kernels.cached == measured
    assert "(cached; µs: " in again.describe()


def test_saved_module_measures_nothing(tmp_path):
    scripted = torch.jit.script(Gemms().eval())
    first, _ = _inputs()
    mod = sr.StaticModule(scripted, MEASURE)
    mod.kernels.model_budget_s = 1e9
    expected = mod(*first)
    path = tmp_path / "gemms.srm"
    mod.save(path)
    loaded = sr.load(path)
    assert loaded.options.kernel_choice == "measure"
    loaded.kernels.model_budget_s = 1e9
    torch.testing.assert_close(loaded(*first), expected)
    assert loaded.kernels.measured == 0 and loaded.kernels.cached == mod.kernels.measured


def test_cache_in_another_process_measures_nothing(tmp_path, cache_dir):
    import subprocess
    import sys
    from pathlib import Path

    scripted = torch.jit.script(nn.Linear(64, 32).eval())
    path = tmp_path / "lin.pt"
    scripted.save(str(path))
    code = ("import sys, torch, static_runtime as sr\n"
            "mod = sr.StaticModule(sys.argv[1], sr.StaticModuleOptions(kernel_choice='measure'))\n"
            "mod(torch.randn(4, 64))\n"
            "print(mod.kernels.measured, mod.kernels.cached)\n")
    root = str(Path(__file__).resolve().parents[2])
    runs = [subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                           text=True, check=True, env={**__import__("os").environ,
                                                       "PYTHONPATH": root}).stdout.split()
            for _ in range(2)]
    assert runs == [["1", "0"], ["0", "1"]]


def test_budget_spent_serves_the_default():
    lin = nn.Linear(32, 16).eval()
    mod = sr.StaticModule(torch.jit.script(lin), MEASURE)
    mod.kernels.model_budget_s = 0.0
    x = torch.randn(8, 32)
    torch.testing.assert_close(mod(x), lin(x))
    mod(x)
    assert mod.kernels.measured == 0 and mod.kernels.skipped == 1  # asked once, remembered
    assert "aten (default (measuring budget spent))" in mod.describe()


def test_default_option_has_no_chooser():
    for choice in (None, "default"):
        mod = sr.StaticModule(torch.jit.script(nn.Linear(4, 4).eval()),
                              sr.StaticModuleOptions(kernel_choice=choice))
        assert mod.kernels is None
        assert "by measurement" not in mod.describe()
    with pytest.raises(ValueError, match="kernel_choice must be one of"):
        sr.StaticModuleOptions(kernel_choice="fastest")


# -- the chooser and its cache


def test_measure_drops_wrong_and_failing_candidates(tmp_path):
    chooser = KernelChooser(DiskCache(tmp_path / "k.json"))
    x = torch.randn(8, 8)
    good = lambda: x * 2

    def fails():
        raise RuntimeError("not for these arguments")

    choice = chooser.choose("k", ("ref", "wrong", "fails"),
                            lambda: {"ref": good, "wrong": lambda: x * 3, "fails": fails}, "ref")
    assert choice.name == "ref" and set(choice.timings_us) == {"ref"}
    entry = chooser.cache.get(chooser.full_key("k", ("ref", "wrong", "fails")))
    assert set(entry["dropped"]) == {"wrong", "fails"}
    with pytest.raises(ValueError, match="default kernel"):
        chooser.choose("other", ("a",), lambda: {"a": good}, "b")


def test_pick_keeps_the_default_within_the_margin():
    assert kernels.pick({"aten": 10.0, "onednn": 9.9}, "aten") == "aten"
    assert kernels.pick({"aten": 10.0, "onednn": 9.0, "mkl": 9.4}, "aten") == "onednn"
    assert kernels.pick({"aten": 10.0, "onednn": 11.0}, "aten") == "aten"
    assert kernels.pick({"onednn": 5.0}, "aten") == "onednn"  # the default was dropped


def _on_disk(path):
    """What a new process reads: the snapshot and the journal."""
    return DiskCache(path)._read()


def test_disk_cache_round_trip_and_merge(tmp_path):
    path = tmp_path / "sub" / "kernels.json"
    one, two = DiskCache(path), DiskCache(path)  # as two processes would hold it
    assert one.get("a") is None and two.get("b") is None
    one.put("a", {"choice": "onednn", "us": {"onednn": 1.0, "aten": 2.0}})
    two.put("b", {"choice": "aten", "us": {"aten": 1.0}})
    one.put("c", {"choice": "aten", "us": {}})
    assert set(_on_disk(path)) == {"a", "b", "c"}  # neither process lost the other's
    assert DiskCache(path).get("a") == {"choice": "onednn", "us": {"onednn": 1.0, "aten": 2.0}}
    assert not list(path.parent.glob("*.tmp"))


def test_a_choice_appends_a_line_and_the_journal_is_folded_into_the_snapshot(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setattr(kernel_cache, "COMPACT_BYTES", 100)  # (past two lines of these)
    path = tmp_path / "kernels.json"
    one, two = DiskCache(path), DiskCache(path)
    one.put("a", {"choice": "aten", "us": {}})
    assert not path.exists()  # (a line in the journal: the snapshot is not rewritten)
    two.put("b", {"choice": "native", "us": {}})
    one.put("c", {"choice": "aten", "us": {}})
    assert len(one.journal.read_text().splitlines()) == 3
    one.put("d", {"choice": "aten", "us": {}})  # past the size: folded, another's lines too
    data = json.loads(path.read_text())
    assert data["format"] == kernel_cache.CACHE_FORMAT
    assert set(data["entries"]) == {"a", "b", "c", "d"}
    assert one.journal.read_text() == ""
    two.put("e", {"choice": "aten", "us": {}})
    assert set(_on_disk(path)) == {"a", "b", "c", "d", "e"}


def test_a_fold_parses_the_file_again_only_if_another_process_replaced_it(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(kernel_cache, "COMPACT_BYTES", 0)  # (every write folds)
    path = tmp_path / "kernels.json"
    one, two = DiskCache(path), DiskCache(path)
    one.put("a", {"choice": "aten", "us": {}})
    two.get("x")  # (read now: the file as `one` left it)
    parsed = []
    read = DiskCache._read_snapshot
    monkeypatch.setattr(DiskCache, "_read_snapshot",
                        lambda self: parsed.append(self) or read(self))
    one.put("b", {"choice": "aten", "us": {}})  # its own file: not parsed again
    assert parsed == []
    two.put("c", {"choice": "aten", "us": {}})  # `one` replaced it since: parsed
    assert parsed == [two]
    assert set(_on_disk(path)) == {"a", "b", "c"}


def test_a_line_cut_short_is_skipped(tmp_path):
    path = tmp_path / "kernels.json"
    DiskCache(path).put("a", {"choice": "aten", "us": {}})
    with open(path.with_name("kernels.json.journal"), "a") as f:
        f.write('[3, "b", {"choi')  # (a process killed mid-write)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set(_on_disk(path)) == {"a"}
        DiskCache(path).put("c", {"choice": "aten", "us": {}})
    assert set(_on_disk(path)) == {"a", "c"}


def test_corrupt_cache_warns_and_is_rewritten(tmp_path):
    path = tmp_path / "kernels.json"
    path.write_text("{not json")
    cache = DiskCache(path)
    with pytest.warns(RuntimeWarning, match="unreadable"):
        assert cache.get("a") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.put("a", {"choice": "aten", "us": {}})
        assert DiskCache(path).get("a") == {"choice": "aten", "us": {}}  # (rewritten)


def test_an_older_releases_cache_is_measured_again_without_a_warning(tmp_path):
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps({"format": kernel_cache.CACHE_FORMAT - 1,
                                "entries": {"a": {"choice": "aten", "us": {}}}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache = DiskCache(path)
        assert cache.get("a") is None
        cache.put("b", {"choice": "native", "us": {}})
    data = json.loads(path.read_text())
    assert data["format"] == kernel_cache.CACHE_FORMAT and set(data["entries"]) == {"b"}


def test_key_names_threads_and_cpu(tmp_path):
    chooser = KernelChooser(DiskCache(tmp_path / "k.json"))
    key = chooser.full_key("linear M=1", ("onednn", "aten"))
    assert f"threads={torch.get_num_threads()}" in key and "candidates=aten,onednn" in key
    assert torch.backends.cpu.get_cpu_capability() in key and torch.__version__ in key


def test_remembered_choice_of_an_unknown_kernel_is_not_taken(tmp_path):
    chooser = KernelChooser(DiskCache(tmp_path / "k.json"))
    chooser.cache.put(chooser.full_key("k", ("aten", "onednn")), {"choice": "gone", "us": {}})
    assert chooser.lookup("k", ("aten", "onednn")) is None


def test_a_choice_made_without_a_candidate_available_now_is_measured_again(tmp_path):
    chooser = KernelChooser(DiskCache(tmp_path / "k.json"))
    x = torch.randn(4)
    first = chooser.choose("k", ("aten",), lambda: {"aten": lambda: x + 1}, "aten")
    assert first.how == "measured"
    assert chooser.lookup("k", ("aten",)).name == "aten"
    assert chooser.lookup("k", ("aten", "native")) is None  # a new kernel: not yet compared


def test_a_choice_made_with_other_versions_of_our_kernels_is_measured_again(tmp_path,
                                                                            monkeypatch):
    """Our kernels change between releases (a faster attention kernel lost to PyTorch's as
    its first version did, and that choice stayed on disk): the key names their sources."""
    chooser = KernelChooser(DiskCache(tmp_path / "k.json"))
    x = torch.randn(4)
    names = ("aten", "native")
    chooser.choose("k", names, lambda: {"aten": lambda: x + 1, "native": lambda: x + 1},
                   "aten")
    assert chooser.lookup("k", names) is not None
    assert f"native={ckernels.source_digest()}" in chooser.full_key("k", names)
    assert "native=" not in chooser.full_key("k", ("aten", "onednn"))
    monkeypatch.setattr(ckernels, "source_digest", lambda: "another-version")
    assert chooser.lookup("k", names) is None


def test_mkl_keeps_one_packed_weight_a_row_count_bucket():
    """Traffic of every size: MKL's packed weight is made per bucket (for its largest row
    count), not per row count — a copy of the weight for every size would grow without
    bound; every row count is still right."""
    if "mkl" not in gemm.candidate_names():
        pytest.skip("this build of PyTorch has no MKL packed GEMM")
    torch.manual_seed(8)
    weight, bias = torch.randn(16, 24), torch.randn(16)
    ks = gemm.GemmKernels(weight.t(), bias, "none")
    for rows in range(1, 41):
        x = torch.randn(rows, 24)
        torch.testing.assert_close(ks.kernel("mkl", rows)(x, None), torch.addmm(bias, x, weight.t()),
                                   rtol=1e-4, atol=1e-5)
    assert sorted(ks.mkl_packs) == [1, 2, 4, 8, 16, 32, 64]


def test_gemm_kernels_agree_with_addmm():
    torch.manual_seed(0)
    weight, bias = torch.randn(24, 40), torch.randn(24)
    for attr in ("none", "relu", "gelu_tanh", "silu"):
        ks = gemm.GemmKernels(weight.t(), bias, attr)
        act = {"none": lambda t: t, "relu": torch.relu,
               "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
               "silu": torch.nn.functional.silu}[attr]
        for rows in (1, 7):
            x = torch.randn(rows, 40)
            expected = act(torch.addmm(bias, x, weight.t()))
            for name in gemm.candidate_names():
                kernel = ks.kernel(name, rows)
                torch.testing.assert_close(kernel(x, None), expected, rtol=1e-4, atol=1e-5)
                out = torch.empty(rows, 24)
                assert kernel(x, out) is out
                torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="no GEMM kernel named"):
        ks.kernel("cublas", 1)


def test_concurrent_first_calls_are_right_and_the_same_as_later_calls():
    """Runtimes of the pool on their first calls at once: one measures, the others wait for
    its choice (serving the default meanwhile would give them other bits than the same call
    gives later); every result is right, and equal to the same call made again."""
    from concurrent.futures import ThreadPoolExecutor

    model = Gemms().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    torch.manual_seed(5)
    xs = [torch.randn(b, s, 64) for b, s in ((1, 2), (2, 3), (3, 1), (1, 7))] * 3
    with torch.inference_mode():
        expected = [model(x) for x in xs]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(mod, xs))
        # again on the pool's threads: a kernel's bits depend on the intra-op thread count
        # (a choice is per thread count), which a new thread takes from the process default
        again = list(pool.map(mod, xs))
    for got, later, want in zip(results, again, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        assert torch.equal(later, got)
    assert mod.kernels.measured > 0


# -- convolutions (ops/conv.py)


class Convs(nn.Module):
    """Fused convolutions of each kind: 3 × 3 + relu, 1 × 1 (the matmul candidate), depthwise
    + hardswish, and a residual add; the pool makes the layout invisible at the output."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.point = nn.Conv2d(16, 24, 1)
        self.depth = nn.Conv2d(24, 24, 3, padding=1, groups=24, bias=False)
        self.back = nn.Conv2d(24, 16, 1)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        y = nn.functional.hardswish(self.depth(self.point(h)))
        return nn.functional.adaptive_avg_pool2d(self.back(y) + h, 1)


def _conv_inputs():
    torch.manual_seed(4)
    return [torch.randn(1, 3, 12, 12)], [torch.randn(2, 3, 9, 7)]


def test_conv_differential_two_shape_sets():
    first, second = _conv_inputs()
    mod = check(Convs().eval(), first, second, options=OPTIONS)["measure"]
    labels = [pn.impl.label for pn in mod.plan.nodes() if pn.kind in (
        "static_runtime::conv2d_pointwise", "static_runtime::conv2d_residual")]
    assert len(labels) == 4 and all("by measurement" in label for label in labels)
    assert "(measured at x=(2, 3, 9, 7)): " in mod.describe()


@pytest.mark.parametrize("name", ["onednn", "aten", "matmul", "native"])
def test_each_conv_kernel_forced(name, monkeypatch):
    def forced(self, key, names, make, default):
        return Choice(name if name in names else default, {}, "forced")

    monkeypatch.setattr(KernelChooser, "choose", forced)
    first, second = _conv_inputs()
    mod = check(Convs().eval(), first, second, options={"measure": MEASURE})["measure"]
    assert f": {name} (forced)" in mod.describe()


@pytest.mark.parametrize("name", ["onednn", "aten", "native"])
def test_image_sizes_up_to_the_same_power_of_two_pixels_share_a_measured_choice(name,
                                                                              monkeypatch):
    """A conv net serving images of several sizes: a new shape whose N × H × W falls in a
    bucket measured before is not measured again and runs that bucket's kernel right; a
    shape measured before keeps its own choice; the next bucket is measured."""
    asked: list[str] = []

    def forced(self, key, names, make, default):
        asked.append(key)
        return Choice(name if name in names else default, {}, "forced")

    monkeypatch.setattr(KernelChooser, "choose", forced)
    model = Convs().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    torch.manual_seed(2)
    # 1 × 9 × 9 = 81 pixels (bucket 128); 1 × 10 × 12 = 120 (128: not measured); 2 × 9 × 9 =
    # 162 (256: measured); 81 again
    for shape in ((1, 3, 9, 9), (1, 3, 10, 12), (2, 3, 9, 9), (1, 3, 9, 9)):
        x = torch.randn(shape)
        before = x.clone()
        torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)
        assert torch.equal(x, before)
    measured = [k for k in asked if k.startswith("conv2d")]  # (every layer keeps N, H, W)
    assert not any(", 10, 12)" in k for k in measured), measured
    assert {k.split(" pixels<=")[1].split(" ")[0] for k in measured} == {"128", "256"}
    assert len(measured) == 2 * 4  # four convolutions, two buckets; the 81 again: remembered
    assert "pixels<=128 channels-last" in mod.describe()


class Excite(nn.Module):
    """A squeeze-and-excitation block: 1 × 1 convolutions on a 1 × 1-pixel tensor (both
    contiguous and channels-last), and a depthwise and a 3 × 3 convolution before them."""

    def __init__(self):
        super().__init__()
        self.depth = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.full = nn.Conv2d(8, 8, 3, padding=1)
        self.reduce = nn.Conv2d(8, 2, 1)
        self.expand = nn.Conv2d(2, 8, 1)

    def forward(self, x):
        h = self.full(torch.relu(self.depth(x)))
        s = torch.sigmoid(self.expand(torch.relu(self.reduce(
            nn.functional.adaptive_avg_pool2d(h, 1)))))
        return nn.functional.adaptive_avg_pool2d(h * s, 1)


def test_our_convolutions_unchecked_calls_per_shape(monkeypatch):
    """Ours chosen everywhere: later calls of a channels-last shape take its unchecked call,
    bucket-served shapes too; every result equals eager's, inputs unchanged."""
    if not ckernels.available():
        pytest.skip("no C compiler: our kernels are absent")
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(
                            "native" if "native" in names else default, {}, "forced"))
    model = Excite().eval()
    check(model, [torch.randn(1, 8, 6, 6)], [torch.randn(3, 8, 5, 7)],
          options={"measure": MEASURE})
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    for shape in ((1, 8, 6, 6), (1, 8, 7, 5), (2, 8, 6, 6), (1, 8, 6, 6)):
        x = torch.randn(shape)
        for _ in range(2):
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)


def test_conv_kernels_return_channels_last():
    from static_runtime.ops.conv import ConvKernels

    weight, bias = torch.randn(8, 4, 1, 1), torch.randn(8)
    ks = ConvKernels(weight, bias, [1, 1], [0, 0], [1, 1], 1, "relu")
    x = torch.randn(2, 4, 5, 6)
    expected = torch.relu(torch.conv2d(x, weight, bias))
    for name in ks.names():
        y = ks.kernel(name)(x)
        assert y.is_contiguous(memory_format=torch.channels_last), name
        torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-5)
    grouped = ConvKernels(torch.randn(8, 1, 3, 3), None, [1, 1], [1, 1], [1, 1], 8, "none")
    assert grouped.names()[:2] == ("onednn", "aten") and "matmul" not in grouped.names()
    with pytest.raises(ValueError, match="no convolution kernel named 'matmul'"):
        grouped.kernel("matmul")


def test_a_fold_drops_the_choices_of_kernel_versions_unwritten_for_a_month(tmp_path,
                                                                            monkeypatch):
    # Every version of our kernels measures under its own digest (``native=`` in the key):
    # the choices of one no process wrote for ``STALE_AFTER_S`` go at the next fold; those
    # of PyTorch's kernels alone (no digest), and of versions in use, stay.
    import json
    import time

    monkeypatch.setattr(kernel_cache, "COMPACT_BYTES", 0)  # (every write folds)
    path = tmp_path / "k.json"
    old, recent = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
    tail = " | threads=1 | cpu=x | torch 2.13.0+cpu"
    entry = {"choice": "aten", "us": {}}
    path.write_text(json.dumps({
        "format": kernel_cache.CACHE_FORMAT,
        "entries": {f"mm M<=8 | native={old}{tail}": entry,
                    f"mm M<=16 | native={recent}{tail}": entry,
                    f"mm M<=32 | candidates=aten,onednn{tail}": entry},
        "versions": {old: time.time() - kernel_cache.STALE_AFTER_S - 60,
                     recent: time.time() - 86400}}))
    cache = DiskCache(path)
    cache.put(f"mm M<=64 | native={recent}{tail}", entry)
    data = json.loads(path.read_text())
    assert sorted(data["entries"]) == sorted([f"mm M<=16 | native={recent}{tail}",
                                              f"mm M<=32 | candidates=aten,onednn{tail}",
                                              f"mm M<=64 | native={recent}{tail}"])
    assert list(data["versions"]) == [recent]
    assert time.time() - data["versions"][recent] < 60  # (written now)
    assert DiskCache(path).get(f"mm M<=8 | native={old}{tail}") is None
    # a snapshot of before the record: its versions start their clock at the fold
    path.write_text(json.dumps({"format": kernel_cache.CACHE_FORMAT,
                                "entries": {f"mm M<=8 | native={old}{tail}": entry}}))
    DiskCache(path).put(f"mm M<=128 | native={recent}{tail}", entry)
    assert f"mm M<=8 | native={old}{tail}" in json.loads(path.read_text())["entries"]


def test_the_version_of_a_key_is_its_native_digest():
    assert kernel_cache.version_of("mm | native=3ff0e10b9576 | threads=1") == "3ff0e10b9576"
    assert kernel_cache.version_of("mm | candidates=aten | threads=1") is None
