"""The measured ``conv1d`` (``ops/conv1d.py``): differential against TorchScript on two input
shape sets whichever kernel wins, each kernel forced, contiguous output as eager's, and the
default path untouched without measuring."""

import dataclasses

import pytest
import torch
from differential import check
from torch import nn

import static_runtime as sr
from static_runtime.ops.kernels import Choice, KernelChooser

# (``conv1d_as_2d`` off: these chains would become 2-D convolutions, ``tests/passes/
# test_conv1d_as_2d.py``; here the 1-D operator itself is under test)
MEASURE = sr.StaticModuleOptions(kernel_choice="measure", verify_memory_plans=True,
                                 conv1d_as_2d=False,
                                 specialize_after=0)
OPTIONS = {"measure": MEASURE,
           "interpreter": sr.StaticModuleOptions(kernel_choice="measure", conv1d_as_2d=False,
                                                 executor="interpreter")}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))


class Temporal(nn.Module):
    """Dilated, strided, grouped, 1 × 1 and bias-free 1-D convolutions, causal trimming."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(4, 8, 3, padding=4, dilation=4)
        self.b = nn.Conv1d(8, 8, 3, stride=2, padding=1, groups=2, bias=False)
        self.c = nn.Conv1d(8, 6, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))[:, :, :-4]
        return self.c(self.b(h)), h


def _inputs():
    torch.manual_seed(5)
    return [torch.randn(1, 4, 20)], [torch.randn(3, 4, 11)]


def test_differential_two_shape_sets():
    first, second = _inputs()
    mod = check(Temporal().eval(), first, second, options=OPTIONS)["measure"]
    labels = [pn.impl.label for pn in mod.plan.nodes() if pn.kind == "aten::conv1d"]
    assert len(labels) == 3 and all("by measurement" in label for label in labels)
    assert "positions<=64 contiguous=True threads=" in mod.describe()


def test_as_2d_convolutions_two_shape_sets():
    # The same model with ``conv1d_as_2d``: ``b`` and ``c`` chained (a grouped, strided
    # convolution and a 1 × 1), ``a`` on its own (a slice between it and ``b``); an
    # intermediate that is also an output comes back in eager's layout
    first, second = _inputs()
    on = {name: dataclasses.replace(o, conv1d_as_2d=True) for name, o in OPTIONS.items()}
    mod = check(Temporal().eval(), first, second, options=on)["measure"]
    assert len([pn for pn in mod.plan.nodes() if pn.kind == "aten::conv1d"]) == 1
    model = Temporal().eval()
    for ours, eager in zip(mod(*first), model(*first)):
        assert ours.stride() == eager.stride()


def test_new_lengths_of_a_measured_bucket_measure_nothing():
    # Traffic of every length: batch × length up to the same power of two share a choice
    # (lengths 17…20 stay in one bucket at every layer here).
    model = Temporal().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    torch.manual_seed(4)
    measured = []
    for length in (17, 18, 19, 20, 18):
        x = torch.randn(1, 4, length)
        before = x.clone()
        for got, want in zip(mod(x), model(x)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        assert torch.equal(x, before)
        measured.append(mod.kernels.measured)
    assert measured[0] > 0 and len(set(measured)) == 1, measured


@pytest.mark.parametrize("name", ["aten", "onednn", "native", "pointwise", "im2col"])
def test_each_kernel_forced(name, monkeypatch):
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(
                            name if name in names else default, {}, "forced"))
    first, second = _inputs()
    model = Temporal().eval()
    mod = check(model, first, second, options={"measure": MEASURE})["measure"]
    assert f": {name} (forced)" in mod.describe()
    for x in (first[0], second[0], torch.randn(2, 1, 9)[:, :1].expand(2, 4, 9).contiguous()):
        got, expected = mod(x), model(x)
        for g, e in zip(got, expected):
            assert g.stride() == e.stride()


@pytest.mark.parametrize("cin,cout,k,stride,padding,dilation,bias", [
    (1, 16, 10, 5, 0, 1, False),  # a raw waveform's first convolution
    (4, 6, 3, 1, 4, 4, True), (8, 8, 3, 2, 1, 1, True), (3, 5, 5, 3, 2, 2, False)])
def test_im2col_is_the_convolution(cin, cout, k, stride, padding, dilation, bias):
    from static_runtime.ops.conv1d import _Im2col

    g = torch.Generator().manual_seed(cin * k)
    w = torch.randn(cout, cin, k, generator=g)
    b = torch.randn(cout, generator=g) if bias else None
    kernel = _Im2col(w, b, [stride], [padding], [dilation], 1)
    for shape in ((2, cin, 60), (1, cin, 23)):
        x = torch.randn(*shape, generator=g)
        before = x.clone()
        y = kernel(x)
        assert y.is_contiguous() and torch.equal(x, before)
        torch.testing.assert_close(y, torch.conv1d(x, w, b, stride, padding, dilation),
                                   rtol=1e-5, atol=1e-5)


def test_one_channel_input_comes_back_contiguous():
    from static_runtime.ops.conv1d import _OneDnn

    w, b = torch.randn(3, 1, 2), torch.randn(3)
    kernel = _OneDnn(w, b, [1], [1], [2], 1)
    x = torch.randn(2, 1, 7)
    y = kernel(x)
    assert y.is_contiguous()
    torch.testing.assert_close(y, torch.conv1d(x, w, b, 1, 1, 2), rtol=1e-4, atol=1e-5)


def test_non_contiguous_input_and_default_option():
    first, _ = _inputs()
    model = Temporal().eval()
    mod = sr.StaticModule(torch.jit.script(model), options=MEASURE)
    x = torch.randn(1, 20, 4).transpose(1, 2)
    torch.testing.assert_close(mod(x), model(x))
    plain = sr.StaticModule(torch.jit.script(model), sr.StaticModuleOptions(kernel_choice="default"))
    assert not any("by measurement" in pn.impl.label for pn in plain.plan.nodes())
    torch.testing.assert_close(plain(*first), model(*first))


class Pointwise(nn.Module):
    """SqueezeBERT's layers: (B, L, C) activations permuted to (B, C, L) into grouped and
    ungrouped 1 × 1 convolutions, permuted back."""

    def __init__(self):
        super().__init__()
        self.grouped = nn.Conv1d(16, 24, 1, groups=4)
        self.plain = nn.Conv1d(24, 8, 1, bias=False)

    def forward(self, x):
        h = torch.relu(self.grouped(x.permute(0, 2, 1)))
        return self.plain(h.permute(0, 2, 1).contiguous().permute(0, 2, 1)).permute(0, 2, 1)


@pytest.mark.parametrize("name", ["aten", "pointwise"])
def test_a_strided_input_of_a_pointwise_convolution(name, monkeypatch):
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(
                            name if name in names else default, {}, "forced"))
    model = Pointwise().eval()
    torch.manual_seed(2)
    mod = check(model, [torch.randn(1, 12, 16)], [torch.randn(3, 7, 16)],
                options={"measure": MEASURE})["measure"]
    assert "contiguous=False" in mod.describe() and f": {name} (forced)" in mod.describe()
    for x in (torch.randn(2, 5, 16), torch.randn(1, 12, 16)):
        got, want = mod(x), model(x)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
