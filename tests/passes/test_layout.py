"""channels_last: activations kept channels-last from convolution to convolution, converted
to eager's layout once where the layout can be seen — graph outputs (with eager's strides),
views and reshapes — and nowhere else; results equal the interpreter's."""

import pytest
import torch
from differential import check, script
from torch import nn

import static_runtime as sr

CL = torch.channels_last
ON = sr.StaticModuleOptions(channels_last=True, verify_passes=True, verify_memory_plans=True,
                            specialize_after=0)
OPTIONS = {
    "on": ON,
    "on, interpreter": sr.StaticModuleOptions(channels_last=True, executor="interpreter"),
    "on, measured kernels": sr.StaticModuleOptions(channels_last=True, kernel_choice="measure"),
}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))


def kinds(model, options=ON) -> list[str]:
    return [n.kind for n in sr.prepare(script(model), options).walk()
            if n.kind != "prim::Constant"]


def images(batch, size, cin=3, seed=0):
    return [torch.randn(batch, cin, size, size, generator=torch.Generator().manual_seed(seed))]


class UNetish(nn.Module):
    """conv + batch norm + relu, max pooling, a depthwise conv + SiLU, upsampling,
    concatenation with the skip, squeeze-excite (mean with keepdim, sigmoid, mul), residual
    add; the output is the last convolution's."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.se = nn.Conv2d(8, 8, 1)
        self.up = nn.Conv2d(16, 8, 1)
        self.out = nn.Conv2d(8, 4, 3, padding=1)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.2, 0.2)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        e = torch.relu(self.bn(self.a(x)))
        d = nn.functional.silu(self.dw(nn.functional.max_pool2d(e, 2)))
        d = d * torch.sigmoid(self.se(d.mean((2, 3), keepdim=True)))
        u = nn.functional.interpolate(d, scale_factor=2.0, mode="nearest")
        y = self.up(torch.cat([u, e], 1)) + e
        return self.out(y)


def _layout_as_inputs(graph) -> list[str]:
    """The kinds of the nodes whose output each ``layout_as`` converts."""
    return [n.inputs[0].node.kind for n in graph.walk() if n.kind == "static_runtime::layout_as"]


def test_region_kept_and_converted_once_at_the_output():
    net = torch.jit.script(UNetish().eval())
    graph = sr.prepare(net, ON)
    ks = [n.kind for n in graph.walk()]
    assert "aten::conv2d" not in ks and ks.count("static_runtime::conv2d_pointwise") == 4
    assert ks.count("static_runtime::conv2d_residual") == 1  # up(cat) + e
    assert _layout_as_inputs(graph) == ["static_runtime::conv2d_pointwise"]
    ret = graph.block.return_node
    assert ret.inputs[0].node.kind == "static_runtime::layout_as"
    # without the pass the convolutions reaching the output are not fused
    off = sr.StaticModuleOptions(channels_last=False)
    assert "aten::conv2d" in kinds(net, off)
    check(net, images(1, 8), images(2, 6, seed=1), options=OPTIONS)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, CL])
def test_outputs_have_eagers_strides(memory_format):
    model = UNetish().eval()
    net = torch.jit.script(model)
    mod = sr.StaticModule(net, options=ON)
    for batch, size in ((1, 8), (2, 6), (1, 8)):
        x = images(batch, size)[0].contiguous(memory_format=memory_format)
        expected = model(x)
        got = mod(x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        assert got.stride() == expected.stride(), (memory_format, got.stride())


class Flattened(nn.Module):
    """A conv whose 4-D output is viewed (needs NCHW-contiguous data), flattened and reshaped
    before a linear; another output returned as it is."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        h = torch.relu(self.a(x))
        y = self.b(h)
        v = y.view(y.shape[0], -1)
        return self.fc(v), torch.flatten(h, 1), y.reshape(-1, 6)


def test_converted_before_a_view_flatten_and_reshape():
    net = torch.jit.script(Flattened().eval())
    graph = sr.prepare(net, ON)
    users = {}
    for n in graph.walk():
        for v in n.inputs:
            if v.node.kind == "static_runtime::layout_as":
                users.setdefault(n.kind, 0)
                users[n.kind] += 1
    assert {"aten::view", "aten::flatten", "aten::reshape"} <= set(users)
    assert "aten::conv2d" not in [n.kind for n in graph.walk()]
    first = [torch.randn(2, 3, 6, 6)]
    check(net, first, [torch.randn(3, 3, 6, 6)], options=OPTIONS)
    model = Flattened().eval()
    for got, expected in zip(sr.StaticModule(net, options=ON)(*first), model(*first)):
        assert got.stride() == expected.stride()


class ConvNeXtish(nn.Module):
    """dwconv → permute to NHWC → layer norm → linear → permute back → residual add; mean."""

    def __init__(self, c=8):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 2, stride=2)
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc = nn.Linear(c, c)

    def forward(self, x):
        x = self.stem(x)
        y = self.fc(self.norm(self.dw(x).permute(0, 2, 3, 1)))
        x = x + y.permute(0, 3, 1, 2)
        return x.mean((-2, -1)), x


def test_permute_into_layer_norm_needs_no_conversion():
    net = torch.jit.script(ConvNeXtish().eval())
    graph = sr.prepare(net, ON)
    permuted = next(n for n in graph.walk() if n.kind == "aten::permute")
    assert permuted.inputs[0].node.kind == "static_runtime::conv2d_pointwise"
    assert _layout_as_inputs(graph) == ["static_runtime::add"]  # the second output only
    check(net, images(1, 12), images(2, 8, seed=2), options=OPTIONS)


def test_a_write_after_an_exit_keeps_the_convolution_out():
    """``flatten`` views ``y`` in eager; the in-place write after it must reach that view,
    which a converted copy would not: the region is not formed."""
    net = torch.jit.script(_WriteAfterView().eval())
    assert "static_runtime::layout_as" not in kinds(net)
    check(net, images(1, 6), images(2, 5, seed=3), options=OPTIONS)


class _WriteAfterView(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.a(x)
        flat = torch.flatten(y, 1)
        y.add_(1.0)
        return flat


def test_in_place_activation_inside_the_region():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 1)
            self.act = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.b(self.act(self.a(x)) * 2.0)

    net = torch.jit.script(M().eval())
    assert kinds(net).count("static_runtime::layout_as") == 1
    check(net, images(1, 7), images(3, 5, seed=4), options=OPTIONS)


def test_conv_inside_a_branch_and_unbatched_inputs():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

        def forward(self, x, flag: bool):
            y = torch.relu(self.a(x))
            if flag:
                y = self.b(y)
            return y + 1.0

    net = torch.jit.script(M().eval())
    check(net, [torch.randn(1, 3, 5, 5), True], [torch.randn(2, 3, 4, 4), False],
          options=OPTIONS)
    check(net, [torch.randn(3, 5, 5), True], [torch.randn(3, 4, 6), False], options=OPTIONS)


def test_switched_off_leaves_the_graph_as_it_was():
    net = torch.jit.script(UNetish().eval())
    assert "static_runtime::layout_as" not in kinds(
        net, sr.StaticModuleOptions(channels_last=False))
    # it extends fuse_convolution, and is off with it
    ks = kinds(net, sr.StaticModuleOptions(channels_last=True, fuse_convolution=False))
    assert "static_runtime::layout_as" not in ks and "static_runtime::conv2d_pointwise" not in ks


def test_exported_program_and_saved_module(tmp_path):
    model = UNetish().eval()
    x = images(1, 8)[0]
    exported = torch.export.export(model, (x,))
    mod = sr.StaticModule(exported, options=ON)
    assert "static_runtime::layout_as" in [n.kind for n in mod.graph.walk()]
    for inp in (x, images(1, 8, seed=5)[0]):
        got, expected = mod(inp), model(inp)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        assert got.stride() == expected.stride()
    path = tmp_path / "unetish.srm"
    mod.save(path)
    loaded = sr.load(path)
    torch.testing.assert_close(loaded(x), model(x), rtol=1e-4, atol=1e-5)
    assert loaded(x).stride() == model(x).stride()


def test_rank_broadcast_inside_the_region():
    """``where`` with a 5-D condition makes a 5-D value out of a channels-last one; at the
    output it comes back contiguous, as eager gives it, even for a channels-last input."""

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x, cond):
            return torch.where(cond, torch.relu(self.a(x)), 0.5)

    model = M().eval()
    net = torch.jit.script(model)
    x = images(2, 5)[0].contiguous(memory_format=CL)
    cond = torch.rand(3, 2, 4, 5, 5) > 0.5
    check(net, [x, cond], [images(1, 6)[0], torch.rand(2, 1, 4, 6, 6) > 0.5], options=OPTIONS)
    got = sr.StaticModule(net, options=ON)(x, cond)
    assert got.stride() == model(x, cond).stride()
