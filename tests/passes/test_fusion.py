"""fuse_attention and fuse_convolution: rewritten where they apply, same results, and left
alone where they would change what a caller can see."""

import pytest
import torch
from differential import check, script
from passes_helpers import NO_PASSES, only

import static_runtime as sr

ATTENTION_TAIL = """
    return torch.matmul(torch.softmax(scores, -1), v)
"""


def kinds(model, options=None) -> list[str]:
    return [n.kind for n in sr.prepare(script(model), options).walk()
            if n.kind != "prim::Constant"]


#: The fixed rules the fused operators follow without measured kernels (the measured
#: choice among the same kernels is tests/ops/test_kernels.py's).
UNMEASURED = sr.StaticModuleOptions(kernel_choice="default")
UNMEASURED_CHECKED = sr.StaticModuleOptions(kernel_choice="default", verify_memory_plans=True,
                                            specialize_after=0)


def ran(fn) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages()}


def qkv(batch, heads, length, dim=8, dtype=torch.float32, key_t_contiguous=False):
    """Query, transposed key and value as models make them: views of (batch, length, heads,
    dim) projections, the key transposed as a view (or made contiguous)."""
    g = torch.Generator().manual_seed(batch * 100 + length)
    q, k, v = (torch.randn(batch, length, heads, dim, generator=g, dtype=dtype).transpose(1, 2)
               for _ in range(3))
    k_t = k.transpose(-1, -2)
    return [q, k_t.contiguous() if key_t_contiguous else k_t, v]


SCALINGS = {
    "mul": "scores = torch.matmul(q, k_t) * 0.125",
    "div": "scores = torch.matmul(q, k_t) / 2.5",
    "int": "scores = torch.matmul(q, k_t) * 2",
    "none": "scores = torch.matmul(q, k_t)",
}


@pytest.mark.parametrize("scaling", list(SCALINGS))
def test_attention_is_fused_and_agrees_on_both_paths(scaling):
    src = f"""
def f(q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor):
    {SCALINGS[scaling]}""" + ATTENTION_TAIL
    assert kinds(src) == ["static_runtime::attention"]
    assert "static_runtime::attention" not in kinds(src, only("inline"))
    # key rows contiguous (key_t a transposed view): the fused kernel; a contiguous key_t
    # (the fused kernel would copy it): the written-out operators
    contiguous = qkv(4, 8, 16, key_t_contiguous=True)
    # (the fixed rule: under measured kernels our attention kernel may take either)
    fixed = only("fuse_attention", kernel_choice="default")
    mods = check(src, qkv(1, 2, 4), contiguous, options={"only": fixed, "none": NO_PASSES})
    mod = mods["only"]
    assert any("scaled_dot_product" in k for k in ran(lambda: mod(*qkv(1, 2, 4))))
    assert not any("scaled_dot_product" in k for k in ran(lambda: mod(*contiguous)))


def test_attention_other_ranks_and_dtypes_take_the_written_out_path():
    src = """
def f(q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor):
    scores = torch.matmul(q, k_t) * 0.5""" + ATTENTION_TAIL
    three_d = [t[0] for t in qkv(1, 3, 5)]
    check(src, three_d, qkv(2, 2, 3, dtype=torch.float64))
    ints = [torch.randint(-3, 3, (1, 2, 4, 4)) for _ in range(3)]
    check(src, ints)  # softmax of an int tensor raises in both


def test_attention_mismatched_shapes_raise_as_the_interpreter_does():
    src = """
def f(q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor):
    scores = torch.matmul(q, k_t) * 0.5""" + ATTENTION_TAIL
    q, k_t, v = qkv(1, 2, 4)
    mod = sr.StaticModule(script(src))
    with pytest.raises(RuntimeError, match="size|shape|dimension"):
        mod(q, k_t, torch.randn(1, 2, 5, 8))
    torch.testing.assert_close(mod(q, k_t, v), script(src)(q, k_t, v))


@pytest.mark.parametrize("src", [
    # the weights are returned too
    """
def f(q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor):
    w = torch.softmax(torch.matmul(q, k_t) * 0.5, -1)
    return torch.matmul(w, v), w
""",
    # the scale is not a constant
    """
def f(q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor, s: float):
    return torch.matmul(torch.softmax(torch.matmul(q, k_t) * s, -1), v)
""",
    # softmax with a dtype
    """
def f(q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor):
    return torch.matmul(torch.softmax(torch.matmul(q, k_t), -1, torch.float64), v.double())
""",
], ids=["weights_used", "scale_not_constant", "softmax_dtype"])
def test_attention_not_fused(src):
    assert "static_runtime::attention" not in kinds(src)


def test_attention_model_uses_it():
    from static_runtime.models import MODELS

    model = MODELS["multi_head_attention"].build()
    assert "static_runtime::attention" in kinds(torch.jit.script(model))


class _TensorScaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(0.25))

    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) * self.scale, -1) @ v


def test_exported_attention_scaled_by_mul_tensor_is_fused():
    """torch.export records ``scores * s`` as ``aten::mul.Tensor`` with the number ``s`` as
    its second operand: fused as ``mul.Scalar`` is. A tensor as the scale is not fused."""
    from static_runtime.models import MODELS

    model = MODELS["multi_head_attention"].build()
    (x,) = MODELS["multi_head_attention"].example_inputs(2)
    mod = sr.StaticModule(torch.export.export(model, (x,)))
    graph_kinds = [n.kind for n in mod.graph.walk()]
    assert "static_runtime::attention" in graph_kinds and "aten::softmax" not in graph_kinds
    with torch.no_grad():
        torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-5)

    qkv = [torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(i))
           for i in range(3)]
    tensor_scaled = _TensorScaled()
    mod = sr.StaticModule(torch.export.export(tensor_scaled, tuple(qkv)))
    assert "static_runtime::attention" not in [n.kind for n in mod.graph.walk()]
    torch.testing.assert_close(mod(*qkv), tensor_scaled(*qkv))


# --------------------------------------------------------------------------- convolution


class ConvNet(torch.nn.Module):
    """conv-relu, conv + residual add, relu, pooled to 1 x 1 and flattened: every conv output
    stays inside the network."""

    def __init__(self, cin=3, c=8):
        super().__init__()
        self.a = torch.nn.Conv2d(cin, c, 3, stride=2, padding=1)
        self.b = torch.nn.Conv2d(c, c, 3, padding=1)
        self.c = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.fc = torch.nn.Linear(c, 4)

    def forward(self, x):
        y = torch.relu(self.a(x))
        z = torch.relu(self.c(torch.relu(self.b(y))) + y)
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(z, 1), 1))


def images(batch, size, cin=3):
    return [torch.randn(batch, cin, size, size, generator=torch.Generator().manual_seed(size))]


def test_convolutions_fused_with_their_relu():
    net = torch.jit.script(ConvNet().eval())
    ks = kinds(net)
    assert ks.count("static_runtime::conv2d_pointwise") == 2 and "aten::conv2d" not in ks
    # the last convolution with the residual added and the relu after the sum
    # (``fuse_conv_residual``)
    assert ks.count("static_runtime::conv2d_residual") == 1
    assert ks.count("aten::relu") + ks.count("aten::relu_") == 0
    check(net, images(1, 12), images(3, 9))


class SmoothActivations(torch.nn.Module):
    """Convolutions followed by GELU (exact and tanh), tanh and sigmoid, and a residual
    block whose activation after the sum is GELU: each activation rides in its
    convolution."""

    def __init__(self, c=6):
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(3 if i == 0 else c, c, 3, padding=1)
                                         for i in range(5))

    def forward(self, x):
        y = torch.nn.functional.gelu(self.convs[0](x))
        y = torch.nn.functional.gelu(self.convs[1](y), approximate="tanh")
        y = torch.tanh(self.convs[2](y))
        y = torch.sigmoid(self.convs[3](y))
        return torch.nn.functional.gelu(self.convs[4](y) + y)


def test_smooth_activations_fused():
    net = torch.jit.script(SmoothActivations().eval())
    ks = kinds(net)
    assert ks.count("static_runtime::conv2d_pointwise") == 4
    assert ks.count("static_runtime::conv2d_residual") == 1
    assert not {"aten::gelu", "aten::gelu_", "aten::tanh", "aten::tanh_", "aten::sigmoid",
                "aten::sigmoid_"} & set(ks)
    check(net, images(1, 12), images(3, 9))


def test_fused_convolution_runs_onednn():
    net = torch.jit.script(ConvNet().eval())
    mod = sr.StaticModule(net, UNMEASURED)
    ops = ran(lambda: mod(*images(2, 10)))
    assert "mkldnn::_convolution_pointwise" in ops and "aten::conv2d" not in ops


class ConvOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        return self.b(y) + 1, y.view(-1).sum()


def test_a_convolution_whose_layout_is_visible_is_not_fused():
    """Both convolutions' outputs reach a graph output or a view: fusing either would hand
    the caller (or view) a channels-last tensor. (With ``channels_last``, the default, both
    are fused and their outputs converted where they are seen: tests/passes/test_layout.py.)"""
    net = torch.jit.script(ConvOut().eval())
    alone = sr.StaticModuleOptions(channels_last=False)
    assert "static_runtime::conv2d_pointwise" not in kinds(net, alone)
    mods = check(net, images(1, 6), images(2, 5))
    out, _ = mods["default"](*images(2, 5))
    assert out.is_contiguous()


def test_convolution_with_non_constant_weight_is_not_fused():
    src = """
def f(x: torch.Tensor, w: torch.Tensor):
    return torch.flatten(torch.nn.functional.adaptive_avg_pool2d(torch.relu(torch.conv2d(x, w)), 1), 1)
"""
    assert "static_runtime::conv2d_pointwise" not in kinds(src)


def test_fused_convolution_other_inputs_take_the_plain_path():
    """float64 or a channels-last input: same values as the interpreter."""
    net = torch.jit.script(ConvNet().eval())
    x = images(2, 8)[0]
    check(net, [x.contiguous(memory_format=torch.channels_last)], [x[:, :, ::2, ::2]])
    mod = sr.StaticModule(net)
    with pytest.raises(RuntimeError):
        mod(x.double())  # float64 input, float32 weights: conv2d refuses, as in the module


def test_options_switch_fusions_off():
    net = torch.jit.script(ConvNet().eval())
    off = sr.StaticModuleOptions(fuse_convolution=False)
    assert "static_runtime::conv2d_pointwise" not in kinds(net, off)


class InvertedResidual(torch.nn.Module):
    """MobileNet-style: 1 x 1 expansion + ReLU6 (hardtanh 0..6), depthwise 3 x 3 +
    BatchNorm + hardswish, squeeze-excite (hardsigmoid, mul), 1 x 1 projection + residual,
    a SiLU, pooled to 1 x 1 and flattened."""

    def __init__(self, c=8, mid=16):
        super().__init__()
        self.expand = torch.nn.Conv2d(c, mid, 1, bias=False)
        self.act1 = torch.nn.ReLU6()
        self.dw = torch.nn.Conv2d(mid, mid, 3, padding=1, groups=mid, bias=False)
        self.bn = torch.nn.BatchNorm2d(mid)
        self.act2 = torch.nn.Hardswish()
        self.reduce = torch.nn.Conv2d(mid, 4, 1)
        self.restore = torch.nn.Conv2d(4, mid, 1)
        self.project = torch.nn.Conv2d(mid, c, 1)
        self.down = torch.nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.2, 0.2)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.act2(self.bn(self.dw(self.act1(self.expand(x)))))
        s = torch.nn.functional.adaptive_avg_pool2d(y, 1)
        y = y * torch.nn.functional.hardsigmoid(self.restore(torch.relu(self.reduce(s))))
        z = torch.nn.functional.silu(self.down(self.project(y) + x))
        return torch.flatten(torch.nn.functional.adaptive_avg_pool2d(z, 1), 1)


def test_depthwise_and_pointwise_convolutions_fused_with_their_activations():
    net = torch.jit.script(InvertedResidual().eval())
    ks = kinds(net)
    assert ks.count("static_runtime::conv2d_pointwise") == 5 and "aten::conv2d" not in ks
    assert ks.count("static_runtime::conv2d_residual") == 1  # project(y) + x
    for act in ("hardtanh", "hardswish", "silu", "relu"):
        assert f"aten::{act}" not in ks and f"aten::{act}_" not in ks, act
    assert "aten::hardsigmoid" in ks or "aten::hardsigmoid_" in ks  # its input is no conv
    check(net, [images(1, 12, cin=8)[0]], [images(3, 7, cin=8)[0]])
    x = images(2, 9, cin=8)[0]
    check(net, [x.contiguous(memory_format=torch.channels_last)], [x[:, :, 1:, ::2]])


def test_pointwise_convolutions_run_as_matmuls_the_others_on_onednn():
    net = torch.jit.script(InvertedResidual().eval())
    mod = sr.StaticModule(net, UNMEASURED)
    ops = ran(lambda: mod(*images(2, 10, cin=8)))
    assert "mkldnn::_convolution_pointwise" in ops and "aten::conv2d" not in ops
    assert "aten::addmm" in ops


class CallsConvPointwise(torch.nn.Module):
    def __init__(self, kernel, stride, groups, bias, attr, c=6):
        super().__init__()
        g = torch.Generator().manual_seed(kernel * 10 + stride)
        self.weight = torch.nn.Parameter(torch.randn(c, c // groups, kernel, kernel, generator=g))
        self.bias = torch.nn.Parameter(torch.randn(c, generator=g)) if bias else None
        self.stride, self.padding, self.groups, self.attr = stride, kernel // 2, groups, attr

    def forward(self, x):
        return torch.ops.static_runtime.conv2d_pointwise(
            x, self.weight, self.bias, [self.stride, self.stride], [self.padding, self.padding],
            [1, 1], self.groups, self.attr)


@pytest.mark.parametrize("attr", ["none", "relu", "relu6", "hardswish", "silu", "gelu",
                                  "gelu_tanh", "tanh", "sigmoid"])
@pytest.mark.parametrize("kernel,stride,groups,bias", [
    (1, 1, 1, True), (1, 1, 1, False), (1, 2, 1, True), (3, 1, 6, False), (3, 2, 1, True)])
def test_fused_convolution_agrees_with_conv2d_and_its_activation(attr, kernel, stride, groups,
                                                                  bias):
    """Each activation the node carries, on each of its paths (1 x 1 as a matmul, oneDNN
    otherwise), against the interpreter running the operator's reference composition; the
    output is channels-last, as the pass's layout rule assumes."""
    net = torch.jit.script(CallsConvPointwise(kernel, stride, groups, bias, attr).eval())
    x = torch.randn(3, 6, 5, 9, generator=torch.Generator().manual_seed(1))
    mods = check(net, [torch.randn(1, 6, 7, 7)], [x.contiguous(memory_format=torch.channels_last)])
    for mod in mods.values():
        assert mod(x).is_contiguous(memory_format=torch.channels_last)


def test_large_pointwise_convolution_stays_on_onednn():
    """From 2**24 multiply-adds a 1 x 1 convolution runs oneDNN's kernel, below as addmm;
    the same values and layout either way."""
    from static_runtime.ops.native.fused import CONV1X1_MATMUL_MAX_MACS

    net = torch.jit.script(CallsConvPointwise(1, 1, 1, True, "relu6", c=64).eval())
    big = torch.randn(1, 64, 64, 64)
    assert big.numel() * 64 >= CONV1X1_MATMUL_MAX_MACS
    mods = check(net, [big], [torch.randn(2, 64, 5, 3)], options={"default": UNMEASURED_CHECKED})
    mod = mods["default"]
    assert "mkldnn::_convolution_pointwise" in ran(lambda: mod(big))
    small = ran(lambda: mod(big[:, :, :8, :8]))
    assert "aten::addmm" in small and "mkldnn::_convolution_pointwise" not in small
    assert mod(big).is_contiguous(memory_format=torch.channels_last)


def test_conv2d_pointwise_refuses_an_unknown_activation():
    x, w = torch.randn(1, 2, 3, 3), torch.randn(2, 2, 1, 1)
    with pytest.raises(ValueError, match="attr must be one of"):
        torch.ops.static_runtime.conv2d_pointwise(x, w, None, [1, 1], [0, 0], [1, 1], 1, "mish")


class ActivationNotTaken(torch.nn.Module):
    """hardtanh to other bounds than ReLU6's, and a hardswish whose input has another user:
    both stay separate nodes (the convolutions are still fused, without a post-op)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4)

    def forward(self, x):
        y = torch.nn.functional.hardtanh(self.a(x), -1.0, 1.0)
        z = self.b(y)
        w = torch.nn.functional.hardswish(z) + z
        return torch.flatten(torch.nn.functional.adaptive_avg_pool2d(w, 1), 1)


def test_activation_not_fused_with_other_bounds_or_another_user():
    net = torch.jit.script(ActivationNotTaken().eval())
    ks = kinds(net)
    assert ks.count("static_runtime::conv2d_pointwise") == 2
    assert "aten::hardtanh" in ks or "aten::hardtanh_" in ks
    assert "aten::hardswish" in ks or "aten::hardswish_" in ks
    check(net, images(1, 6), images(2, 5))


def test_double_convolution_is_not_fused():
    net = torch.jit.script(InvertedResidual().double().eval())
    ks = kinds(net)
    assert "static_runtime::conv2d_pointwise" not in ks and "aten::conv2d" in ks
    check(net, [images(1, 6, cin=8)[0].double()], [images(2, 5, cin=8)[0].double()])


# --------------------------------------------------------------------------- linear

ACTIVATIONS = {
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "hardswish": torch.nn.functional.hardswish,
    "relu6": torch.nn.functional.relu6,
    "hardtanh": lambda t: torch.nn.functional.hardtanh(t, 0.0, 6.0),
    "silu": torch.nn.functional.silu,
}


class WideTower(torch.nn.Module):
    """512-wide linear layers, one per activation, and a last one with none."""

    def __init__(self, width=512):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [torch.nn.Linear(width, width) for _ in range(len(ACTIVATIONS) + 1)])
        self.layers[-1].bias = None

    def forward(self, x):
        x = self.layers[0](x).relu()
        x = torch.nn.functional.gelu(self.layers[1](x))
        x = torch.nn.functional.gelu(self.layers[2](x), approximate="tanh")
        x = torch.tanh(self.layers[3](x))
        x = torch.sigmoid(self.layers[4](x))
        x = torch.nn.functional.hardswish(self.layers[5](x))
        x = torch.nn.functional.relu6(self.layers[6](x))
        x = torch.nn.functional.hardtanh(self.layers[7](x), 0.0, 6.0)
        x = torch.nn.functional.silu(self.layers[8](x))
        return self.layers[9](x)


def rows(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def test_large_linears_fused_with_their_activations():
    net = torch.jit.script(WideTower().eval())
    ks = kinds(net)
    assert ks.count("static_runtime::linear_pointwise") == 10 and "aten::linear" not in ks
    assert not set(ks) - {"static_runtime::linear_pointwise"}, ks
    # below and above the row count where oneDNN takes over; a 3-D input folded to 2-D
    check(net, [rows(2, 512)], [rows(16, 512)])
    check(net, [rows(3, 4, 512)], [rows(1, 512)])
    check(net, [rows(512)], [rows(2, 4, 512)[:, 1]])  # a vector; a strided input


def test_fused_linear_runs_onednn_only_from_8_rows():
    mod = sr.StaticModule(torch.jit.script(WideTower().eval()), UNMEASURED)
    assert "mkldnn::_linear_pointwise" in ran(lambda: mod(rows(8, 512)))
    few = ran(lambda: mod(rows(7, 512)))
    assert "mkldnn::_linear_pointwise" not in few and "aten::addmm" in few
    assert "mkldnn::_linear_pointwise" in ran(lambda: mod(rows(2, 5, 512)))


class LinearNotFused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.small = torch.nn.Linear(64, 64)
        self.big = torch.nn.Linear(64, 4096)
        self.back = torch.nn.Linear(4096, 64)

    def forward(self, x):
        y = self.small(x).relu()  # a small weight: keeps linear
        z = self.big(y)  # its output has two users: fused without the activation
        return self.back(torch.tanh(z) + z)


def test_linear_not_fused_when_small_or_its_output_has_other_users():
    net = torch.jit.script(LinearNotFused().eval())
    graph = sr.prepare(script(net), UNMEASURED)
    fused = [n for n in graph.walk() if n.kind == "static_runtime::linear_pointwise"]
    assert len(fused) == 2 and [n.kind for n in graph.walk()].count("aten::linear") == 1
    assert all(n.inputs[3].node.attrs["value"] == "none" for n in fused)
    check(net, [rows(2, 64)], [rows(9, 64)])


class SmallTower(WideTower):
    """WideTower at a width where ``fuse_linear_pointwise`` leaves the linears alone."""

    def __init__(self):
        super().__init__(width=48)


MEASURE = sr.StaticModuleOptions(kernel_choice="measure", verify_memory_plans=True)


def test_measured_small_linears_take_their_activation_along(tmp_path, monkeypatch):
    """Under measured kernels a small linear and its activation are one node (the kernel
    applies it in its epilogue); not without them, nor where the output has another user."""
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path))
    net = torch.jit.script(SmallTower().eval())
    assert "static_runtime::linear_pointwise" not in kinds(net, UNMEASURED)
    ks = kinds(net, MEASURE)
    assert ks.count("static_runtime::linear_pointwise") == 9 and ks.count("aten::linear") == 1
    check(net, [rows(2, 48)], [rows(3, 9, 48)], options={"measure": MEASURE})
    check(net, [rows(48)], [rows(2, 4, 48)[:, 1]], options={"measure": MEASURE})
    graph = sr.prepare(script(torch.jit.script(LinearNotFused().eval())), MEASURE)
    acts = [n.inputs[3].node.attrs["value"] for n in graph.walk()
            if n.kind == "static_runtime::linear_pointwise"]
    assert sorted(acts) == ["none", "none", "relu"]  # `big`'s output has two users
    off = sr.StaticModuleOptions(kernel_choice="measure", fuse_linear_activation=False)
    assert "static_runtime::linear_pointwise" not in kinds(net, off)


class Conv1DStyle(torch.nn.Module):
    """GPT-2's ``Conv1D`` (``addmm`` of a (in, out) weight on the input seen as 2-D, the
    result viewed back) before GELU's tanh form and ReLU; and near misses: β = 2, an input
    that is not a two-size view, a product with a second user."""

    def __init__(self, d: int = 24):
        super().__init__()
        g = torch.Generator().manual_seed(4)
        def w(*shape):
            return torch.randn(*shape, generator=g) / shape[0] ** 0.5

        self.w1, self.b1, self.w2, self.b2 = w(d, 2 * d), w(2 * d), w(2 * d, d), w(d)
        self.w3, self.b3 = w(d, d), w(d)

    def forward(self, x):
        size = x.size()
        h = torch.addmm(self.b1, x.view(-1, size[-1]), self.w1)
        h = torch.nn.functional.gelu(h.view(size[0], size[1], -1), approximate="tanh")
        y = torch.relu(torch.addmm(self.b2, h.view(-1, h.size(-1)), self.w2))
        near = torch.relu(torch.addmm(self.b3, y, self.w3, beta=2))  # β = 2
        flat = y.reshape(-1, y.size(-1))
        z = torch.addmm(self.b3, flat, self.w3)
        return torch.tanh(z.view(size)), near, z  # (z has a second user)


def test_measured_conv1d_style_addmm_takes_its_activation_along(tmp_path, monkeypatch):
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path))
    net = torch.jit.script(Conv1DStyle().eval())
    graph = sr.prepare(script(net), MEASURE)
    acts = [n.inputs[3].node.attrs["value"] for n in graph.walk()
            if n.kind == "static_runtime::linear_pointwise"]
    assert sorted(acts) == ["gelu_tanh", "relu"]
    assert [n.kind for n in graph.walk()].count("aten::addmm") == 2
    assert "static_runtime::linear_pointwise" not in kinds(net, UNMEASURED)
    check(net, [rows(2, 3, 24)], [rows(5, 7, 24)], options={"measure": MEASURE})


def test_a_small_fused_linear_never_runs_onednn_unmeasured(tmp_path, monkeypatch):
    """Where the measured kernels do not run (here a strided input), a small fused linear
    runs addmm + its activation, as the two nodes did: oneDNN's fixed cost pays back only on
    large weights."""
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path))
    model = SmallTower().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    strided = rows(16, 2, 48)[:, 1]
    mod(strided)  # (measures the later layers' kernels, oneDNN's among them)
    ops = ran(lambda: mod(strided))
    assert "mkldnn::_linear_pointwise" not in ops and "aten::addmm" in ops
    torch.testing.assert_close(mod(strided), model(strided))


def test_linear_with_non_constant_or_double_weight_is_not_fused():
    src = """
def f(x: torch.Tensor, w: torch.Tensor):
    return torch.relu(torch.nn.functional.linear(x, w))
"""
    assert "static_runtime::linear_pointwise" not in kinds(src)
    net = torch.jit.script(WideTower().double().eval())
    assert "static_runtime::linear_pointwise" not in kinds(net)
    check(net, [rows(9, 512).double()], [rows(2, 512).double()])


def test_linear_pointwise_refuses_an_unknown_activation():
    with pytest.raises(ValueError, match="attr must be one of"):
        torch.ops.static_runtime.linear_pointwise(rows(2, 3), rows(4, 3), None, "elu")


def test_linear_option_switches_it_off():
    net = torch.jit.script(WideTower().eval())
    off = sr.StaticModuleOptions(fuse_linear_pointwise=False, fuse_linear_activation=False)
    assert "static_runtime::linear_pointwise" not in kinds(net, off)


def test_exported_programs_fuse_both():
    """torch.export graphs (activations recorded as ``hardswish``/``hardtanh``, a bias-less
    linear): the same rewrites, the same values as eager at two batch sizes."""
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Hardswish(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.ReLU6(),
        torch.nn.Conv2d(8, 8, 1), torch.nn.SiLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    linear = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(),
                                 torch.nn.Linear(512, 512, bias=False)).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    for model, shape, kind, count in (
            (conv, (2, 3, 8, 8), "static_runtime::conv2d_pointwise", 3),
            (linear, (9, 512), "static_runtime::linear_pointwise", 2)):
        x = rows(*shape)
        program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
        mod = sr.StaticModule(program)
        ks = [n.kind for n in mod.graph.walk() if n.kind != "prim::Constant"]
        assert ks.count(kind) == count, ks
        for inp in (x, rows(1, *shape[1:])):
            before = inp.clone()
            with torch.no_grad():
                expected = model(inp)
            for _ in range(2):
                torch.testing.assert_close(mod(inp), expected, rtol=1e-4, atol=1e-4)
            assert torch.equal(inp, before)
