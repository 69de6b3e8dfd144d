"""Linear algebra and neural-network layers: mm/bmm/matmul over every rank combination,
addmm/baddbmm/linear, einsum, convolutions with stride/padding/groups/dilation, normalisation
in eval mode, pooling, attention, dropout in eval."""

import pytest
import torch
import torch.nn.functional as F
from differential import check
from op_cases import Inputs, case, layout, ts

I = Inputs(4)
randn, rand = I.randn, I.rand

TOL = {"rtol": 1e-4, "atol": 1e-5}

pytestmark = pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")


def linear_bias(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w, b)


def linear_no_bias(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w)


def linear_optional_bias(x: torch.Tensor, w: torch.Tensor,
                         b: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, w, b)


def conv1d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.conv1d(x, w, b, stride=2, padding=1)


def conv1d_dilated(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv1d(x, w, None, 1, 2, 2)


def conv2d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w, b)


def conv2d_stride_pad(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w, None, stride=(2, 1), padding=(1, 2))


def conv2d_groups(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w, b, 1, 1, 1, 2)


def conv2d_depthwise_dilated(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w, None, 1, 2, 2, 4)


def conv2d_same(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w, padding="same")


def conv_transpose2d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)


def conv_transpose2d_groups(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv_transpose2d(x, w, None, 1, 0, 0, 2)


def conv_transpose1d(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv_transpose1d(x, w, stride=3)


def batch_norm_eval(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, w: torch.Tensor,
                    b: torch.Tensor) -> torch.Tensor:
    return F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5)


def batch_norm_no_affine(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    return F.batch_norm(x, mean, var, training=False, eps=1e-3)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, [x.size(-1)], w, b)


def layer_norm_2d_no_affine(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-2:], eps=1e-3)


def group_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.group_norm(x, 2, w, b)


def group_norm_no_affine(x: torch.Tensor) -> torch.Tensor:
    return F.group_norm(x, 1)


def instance_norm(x: torch.Tensor) -> torch.Tensor:
    return F.instance_norm(x)


def instance_norm_affine(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.instance_norm(x, weight=w, bias=b, eps=1e-3)


def max_pool2d(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(x, 2)


def max_pool2d_stride_pad(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)


def max_pool2d_indices(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return F.max_pool2d_with_indices(x, 2, return_indices=True)


def max_pool1d(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool1d(x, 2, 1)


def avg_pool2d(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(x, 2)


def avg_pool2d_pad(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)


def avg_pool1d(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool1d(x, 3, 2, 1)


def adaptive_avg_pool2d(x: torch.Tensor) -> torch.Tensor:
    return F.adaptive_avg_pool2d(x, (2, 3))


def adaptive_avg_pool2d_global(x: torch.Tensor) -> torch.Tensor:
    return F.adaptive_avg_pool2d(x, 1).flatten(1)


def adaptive_max_pool2d(x: torch.Tensor) -> torch.Tensor:
    return F.adaptive_max_pool2d(x, 2)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              m: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.5)


def dropout_eval(x: torch.Tensor) -> torch.Tensor:
    return F.dropout(x, 0.5, training=False) * 2


def dropout_variants_eval(x: torch.Tensor) -> torch.Tensor:
    return F.dropout2d(F.alpha_dropout(x, 0.3, False), 0.2, False) + torch.dropout(x, 0.1, False)


def attention_block(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                    wo: torch.Tensor, heads: int) -> torch.Tensor:
    b, t, d = x.shape
    q = F.linear(x, wq).view(b, t, heads, d // heads).transpose(1, 2)
    k = F.linear(x, wk).view(b, t, heads, d // heads).transpose(1, 2)
    v = F.linear(x, wv).view(b, t, heads, d // heads).transpose(1, 2)
    att = torch.softmax(q @ k.transpose(-2, -1) / (d // heads) ** 0.5, dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
    return F.layer_norm(F.linear(y, wo) + x, [d])


def conv_bn_relu_pool(x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
                      g: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = F.conv2d(x, w, None, 1, 1)
    y = F.batch_norm(y, mean, var, g, b, False, 0.1, 1e-5)
    return F.max_pool2d(F.relu(y), 2).flatten(1)


MATMUL = [
    ("mm", ts("a, b", "torch.mm(a, b)"), [randn(3, 4), randn(4, 5)], [randn(6, 2), randn(2, 7)]),
    ("mm_transposed_input", ts("a, b", "torch.mm(a, b.t())"),
     [randn(3, 4), randn(5, 4)], [randn(2, 6), randn(3, 6)]),
    ("mv", ts("a, v", "torch.mv(a, v)"), [randn(3, 4), randn(4)], [randn(5, 2), randn(2)]),
    ("dot", ts("a, b", "torch.dot(a, b)"), [randn(4), randn(4)], [randn(7), randn(7)]),
    ("bmm", ts("a, b", "torch.bmm(a, b)"), [randn(2, 3, 4), randn(2, 4, 5)],
     [randn(3, 1, 2), randn(3, 2, 6)]),
    ("matmul_1d_1d", ts("a, b", "a @ b"), [randn(4), randn(4)], [randn(6), randn(6)]),
    ("matmul_1d_2d", ts("a, b", "torch.matmul(a, b)"), [randn(4), randn(4, 3)],
     [randn(2), randn(2, 5)]),
    ("matmul_2d_1d", ts("a, b", "torch.matmul(a, b)"), [randn(3, 4), randn(4)],
     [randn(5, 2), randn(2)]),
    ("matmul_2d_2d", ts("a, b", "a @ b"), [randn(3, 4), randn(4, 5)], [randn(1, 2), randn(2, 3)]),
    ("matmul_3d_2d", ts("a, b", "torch.matmul(a, b)"), [randn(2, 3, 4), randn(4, 5)],
     [randn(3, 2, 2), randn(2, 6)]),
    ("matmul_2d_3d", ts("a, b", "torch.matmul(a, b)"), [randn(3, 4), randn(2, 4, 5)],
     [randn(2, 3), randn(4, 3, 1)]),
    ("matmul_3d_3d", ts("a, b", "torch.matmul(a, b)"), [randn(2, 3, 4), randn(2, 4, 5)],
     [randn(1, 5, 2), randn(3, 2, 4)]),
    ("matmul_1d_3d", ts("a, b", "torch.matmul(a, b)"), [randn(4), randn(2, 4, 5)],
     [randn(3), randn(3, 3, 2)]),
    ("matmul_3d_1d", ts("a, b", "torch.matmul(a, b)"), [randn(2, 3, 4), randn(4)],
     [randn(4, 2, 6), randn(6)]),
    ("matmul_4d_4d_broadcast", ts("a, b", "torch.matmul(a, b)"),
     [randn(2, 1, 3, 4), randn(1, 3, 4, 2)], [randn(1, 2, 2, 3), randn(3, 1, 3, 5)]),
    ("matmul_int", ts("a, b", "torch.matmul(a, b)"),
     [I.randint(-3, 3, 3, 4), I.randint(-3, 3, 4, 2)],
     [I.randint(-3, 3, 2, 5), I.randint(-3, 3, 5, 3)]),
    ("addmm", ts("c, a, b", "torch.addmm(c, a, b)"), [randn(5), randn(3, 4), randn(4, 5)],
     [randn(2, 3), randn(2, 6), randn(6, 3)]),
    ("addmm_alpha_beta", ts("c, a, b", "torch.addmm(c, a, b, beta=0.5, alpha=2.0)"),
     [randn(3, 5), randn(3, 4), randn(4, 5)], [randn(1, 3), randn(2, 6), randn(6, 3)]),
    ("addmv", ts("c, a, v", "torch.addmv(c, a, v)"), [randn(3), randn(3, 4), randn(4)],
     [randn(5), randn(5, 2), randn(2)]),
    ("baddbmm", ts("c, a, b", "torch.baddbmm(c, a, b)"),
     [randn(2, 3, 5), randn(2, 3, 4), randn(2, 4, 5)],
     [randn(1, 2, 3), randn(3, 2, 6), randn(3, 6, 3)]),
    ("baddbmm_alpha_beta", ts("c, a, b", "torch.baddbmm(c, a, b, beta=2, alpha=0.5)"),
     [randn(5), randn(2, 3, 4), randn(2, 4, 5)], [randn(3), randn(1, 2, 6), randn(1, 6, 3)]),
    ("addbmm", ts("c, a, b", "torch.addbmm(c, a, b)"),
     [randn(3, 5), randn(2, 3, 4), randn(2, 4, 5)], [randn(2, 3), randn(4, 2, 6), randn(4, 6, 3)]),
    ("linear_bias", linear_bias, [randn(2, 4), randn(3, 4), randn(3)],
     [randn(5, 2, 4), randn(3, 4), randn(3)]),
    ("linear_no_bias", linear_no_bias, [randn(2, 4), randn(3, 4)], [randn(6), randn(2, 6)]),
    ("linear_optional_bias_given", linear_optional_bias, [randn(2, 4), randn(3, 4), randn(3)],
     [randn(5, 4), randn(6, 4), randn(6)]),
    ("linear_optional_bias_none", linear_optional_bias, [randn(2, 4), randn(3, 4), None],
     [randn(1, 5, 4), randn(2, 4), None]),
    ("linear_optional_bias_none_then_given", linear_optional_bias,
     [randn(2, 4), randn(3, 4), None], [randn(5, 4), randn(6, 4), randn(6)]),
    ("einsum_matmul", ts("a, b", "torch.einsum('ij,jk->ik', a, b)"),
     [randn(3, 4), randn(4, 5)], [randn(2, 6), randn(6, 1)]),
    ("einsum_batch_attention", ts("q, k", "torch.einsum('bhqd,bhkd->bhqk', q, k)"),
     [randn(1, 2, 3, 4), randn(1, 2, 5, 4)], [randn(2, 1, 4, 2), randn(2, 1, 3, 2)]),
    ("einsum_outer_trace",
     ts("a, b", "torch.einsum('i,j->ij', a, b) + torch.einsum('ii', a[:, None] * a)"),
     [randn(3), randn(4)], [randn(5), randn(2)]),
    ("einsum_reduce", ts("a", "torch.einsum('bij->bj', a)"), [randn(2, 3, 4)], [randn(3, 1, 2)]),
    ("outer", ts("a, b", "torch.outer(a, b)"), [randn(3), randn(4)], [randn(5), randn(1)]),
    ("tensordot", ts("a, b", "torch.tensordot(a, b, [[1], [0]])"),
     [randn(2, 3), randn(3, 4)], [randn(4, 5), randn(5, 2)]),
]

CONV = [
    ("conv1d_stride_pad", conv1d, [randn(2, 3, 10), randn(4, 3, 3), randn(4)],
     [randn(1, 3, 7), randn(4, 3, 3), randn(4)]),
    ("conv1d_dilated", conv1d_dilated, [randn(2, 3, 10), randn(4, 3, 3)],
     [randn(1, 3, 13), randn(2, 3, 3)]),
    ("conv2d", conv2d, [randn(2, 3, 8, 8), randn(4, 3, 3, 3), randn(4)],
     [randn(1, 3, 5, 7), randn(4, 3, 3, 3), randn(4)]),
    ("conv2d_stride_pad", conv2d_stride_pad, [randn(2, 3, 8, 8), randn(4, 3, 3, 3)],
     [randn(3, 3, 6, 9), randn(2, 3, 2, 2)]),
    ("conv2d_groups", conv2d_groups, [randn(2, 4, 6, 6), randn(6, 2, 3, 3), randn(6)],
     [randn(1, 4, 5, 8), randn(6, 2, 3, 3), randn(6)]),
    ("conv2d_depthwise_dilated", conv2d_depthwise_dilated, [randn(1, 4, 9, 9), randn(4, 1, 3, 3)],
     [randn(2, 4, 7, 6), randn(8, 1, 3, 3)]),
    ("conv2d_padding_same", conv2d_same, [randn(1, 2, 6, 6), randn(3, 2, 3, 3)],
     [randn(2, 2, 5, 4), randn(3, 2, 3, 3)]),
    ("conv2d_unbatched", conv2d, [randn(3, 6, 6), randn(2, 3, 3, 3), randn(2)],
     [randn(3, 5, 7), randn(2, 3, 3, 3), randn(2)]),
    ("conv2d_channels_last", conv2d,
     [randn(2, 3, 6, 6).to(memory_format=torch.channels_last), randn(4, 3, 3, 3), randn(4)],
     [randn(1, 3, 7, 5).to(memory_format=torch.channels_last), randn(4, 3, 3, 3), randn(4)]),
    ("conv_transpose2d", conv_transpose2d, [randn(2, 4, 5, 5), randn(4, 3, 3, 3), randn(3)],
     [randn(1, 4, 3, 6), randn(4, 3, 3, 3), randn(3)]),
    ("conv_transpose2d_groups", conv_transpose2d_groups, [randn(1, 4, 4, 4), randn(4, 1, 2, 2)],
     [randn(2, 4, 3, 5), randn(4, 3, 3, 3)]),
    ("conv_transpose1d", conv_transpose1d, [randn(2, 3, 5), randn(3, 2, 3)],
     [randn(1, 3, 8), randn(3, 4, 2)]),
    ("conv_bn_relu_pool", conv_bn_relu_pool,
     [randn(2, 3, 8, 8), randn(4, 3, 3, 3), randn(4), rand(4, low=0.5), randn(4), randn(4)],
     [randn(1, 3, 6, 10), randn(4, 3, 3, 3), randn(4), rand(4, low=0.5), randn(4), randn(4)]),
]

NORM = [
    ("batch_norm_eval", batch_norm_eval,
     [randn(2, 3, 4, 4), randn(3), rand(3, low=0.5), randn(3), randn(3)],
     [randn(4, 3, 2, 5), randn(3), rand(3, low=0.5), randn(3), randn(3)]),
    ("batch_norm_eval_2d", batch_norm_eval,
     [randn(2, 3), randn(3), rand(3, low=0.5), randn(3), randn(3)],
     [randn(5, 4), randn(4), rand(4, low=0.5), randn(4), randn(4)]),
    ("batch_norm_no_affine", batch_norm_no_affine, [randn(2, 3, 5), randn(3), rand(3, low=0.5)],
     [randn(3, 3, 2), randn(3), rand(3, low=0.5)]),
    ("layer_norm", layer_norm, [randn(2, 3, 4), randn(4), randn(4)],
     [randn(5, 6), randn(6), randn(6)]),
    ("layer_norm_2d_no_affine", layer_norm_2d_no_affine, [randn(2, 3, 4)], [randn(3, 5, 2)]),
    ("group_norm", group_norm, [randn(2, 4, 3, 3), randn(4), randn(4)],
     [randn(1, 6, 5), randn(6), randn(6)]),
    ("group_norm_no_affine", group_norm_no_affine, [randn(2, 4, 3)], [randn(3, 2, 2, 2)]),
    ("instance_norm", instance_norm, [randn(2, 3, 4, 4)], [randn(1, 2, 5, 3)]),
    ("instance_norm_affine", instance_norm_affine, [randn(2, 3, 6), randn(3), randn(3)],
     [randn(3, 4, 5), randn(4), randn(4)]),
    ("normalize_l2", ts("x", "torch.nn.functional.normalize(x, dim=-1)"),
     [randn(3, 4)], [randn(2, 2, 5)]),
    ("rms_norm", ts("x, w", "torch.rms_norm(x, [x.size(-1)], w, 1e-6)"),
     [randn(2, 3, 4), randn(4)], [randn(5, 6), randn(6)]),
]

POOL = [
    ("max_pool2d", max_pool2d, [randn(2, 3, 6, 6)], [randn(1, 2, 5, 9)]),
    ("max_pool2d_stride_pad_ceil", max_pool2d_stride_pad, [randn(2, 3, 7, 7)],
     [randn(1, 2, 6, 10)]),
    ("max_pool2d_with_indices", max_pool2d_indices, [randn(1, 2, 4, 4)], [randn(2, 3, 6, 3)]),
    ("max_pool1d", max_pool1d, [randn(2, 3, 6)], [randn(1, 2, 9)]),
    ("avg_pool2d", avg_pool2d, [randn(2, 3, 6, 6)], [randn(1, 2, 5, 9)]),
    ("avg_pool2d_pad", avg_pool2d_pad, [randn(2, 3, 7, 7)], [randn(1, 2, 4, 10)]),
    ("avg_pool1d", avg_pool1d, [randn(2, 3, 7)], [randn(1, 4, 10)]),
    ("adaptive_avg_pool2d", adaptive_avg_pool2d, [randn(2, 3, 6, 6)], [randn(1, 2, 5, 7)]),
    ("adaptive_avg_pool2d_global", adaptive_avg_pool2d_global, [randn(2, 3, 6, 6)],
     [randn(4, 5, 3, 3)]),
    ("adaptive_avg_pool2d_noncontiguous", adaptive_avg_pool2d,
     [randn(2, 6, 6, 3).permute(0, 3, 1, 2)], [randn(1, 5, 7, 2).permute(0, 3, 1, 2)]),
    ("adaptive_max_pool2d", adaptive_max_pool2d, [randn(2, 3, 6, 6)], [randn(1, 2, 5, 7)]),
]

ATTN = [
    ("sdpa", sdpa, [randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 6)],
     [randn(1, 2, 3, 8), randn(1, 2, 7, 8), randn(1, 2, 7, 8)]),
    ("sdpa_causal", sdpa_causal, [randn(2, 2, 4, 8), randn(2, 2, 4, 8), randn(2, 2, 4, 8)],
     [randn(1, 3, 6, 4), randn(1, 3, 6, 4), randn(1, 3, 6, 4)]),
    ("sdpa_mask", sdpa_mask, [randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 6), I.bools(3, 5)],
     [randn(1, 2, 8), randn(1, 3, 8), randn(1, 3, 2), randn(2, 3)]),
    ("attention_block", attention_block,
     [randn(2, 5, 8), randn(8, 8), randn(8, 8), randn(8, 8), randn(8, 8), 2],
     [randn(1, 3, 8), randn(8, 8), randn(8, 8), randn(8, 8), randn(8, 8), 4]),
    ("dropout_eval", dropout_eval, [randn(3, 4)], [randn(2, 5)]),
    ("dropout_variants_eval", dropout_variants_eval, [randn(2, 3, 4)], [randn(1, 2, 5)]),
]

# Results keep the channels-last layout of their input, on every call.
CHANNELS_LAST = "x.contiguous(memory_format=torch.channels_last)"
NF = "torch.nn.functional"
LAYOUT = [(f"layout_channels_last_{name}", layout(expr, CHANNELS_LAST),
           [randn(2, 3, 4, 4)], [randn(1, 3, 6, 5)]) for name, expr in [
    ("conv2d", f"{NF}.conv2d(y, torch.ones(2, 3, 1, 1))"),
    ("conv_transpose2d", f"{NF}.conv_transpose2d(y, torch.ones(3, 2, 2, 2), stride=2)"),
    ("batch_norm", f"{NF}.batch_norm(y, torch.zeros(3), torch.ones(3), None, None, False, 0.1)"),
    ("max_pool2d", f"{NF}.max_pool2d(y, 2)"),
    ("avg_pool2d", f"{NF}.avg_pool2d(y, 2)"),
    ("adaptive_avg_pool2d", f"{NF}.adaptive_avg_pool2d(y, 2)"),
    ("interpolate_nearest", f"{NF}.interpolate(y, scale_factor=2.0)"),
    ("interpolate_bilinear", f"{NF}.interpolate(y, scale_factor=2.0, mode='bilinear')"),
    ("relu", "torch.relu(y)"), ("add", "y + y"), ("cat", "torch.cat([y, y], 1)"),
    ("mean_keepdim", "y.mean([2, 3], keepdim=True)"),
]]


def spd(n: int) -> torch.Tensor:
    a = randn(n, n)
    return a @ a.t() + n * torch.eye(n)


# Column-major (LAPACK) results: cholesky's out kernel would write row-major ones.
DECOMPOSITIONS = [
    ("linalg_inv", layout("torch.linalg.inv(y)", "x"), [spd(4)], [spd(6)]),
    ("linalg_solve", ts("a, b", "torch.linalg.solve(a, b)"), [spd(4), randn(4, 2)],
     [spd(6), randn(6, 3)]),
    ("linalg_det", ts("a", "torch.linalg.det(a) * 2"), [spd(4)], [spd(6)]),
    ("cholesky_layout", layout("torch.cholesky(y)", "x"), [spd(4)], [spd(6)]),
]

CASES = [case(*c, **TOL) for c in MATMUL + CONV + NORM + POOL + ATTN + LAYOUT + DECOMPOSITIONS]


@pytest.mark.parametrize("model, first, second, tol", CASES)
def test_linalg(model, first, second, tol):
    check(model, first, second, **tol)
