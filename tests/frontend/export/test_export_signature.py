"""The exported signature: pytree arguments and results in the user's structure; input
guards on sizes, symbols and specialised values."""

import pytest
import torch
from export_helpers import exported
from frontend.eager_check import check_eager
from torch.export import Dim

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.models.export import export_case


class Nested(torch.nn.Module):
    def forward(self, pair, feats, *, scale):
        a, b = pair
        out = {"sum": a + b * scale, "parts": [feats["u"].relu(), feats["v"] - a]}
        return out, (a * b,)


def test_pytree_inputs_and_outputs_keep_the_users_structure():
    model = Nested()
    mk = lambda s: ((torch.randn(2, 3, generator=torch.Generator().manual_seed(s)),
                     torch.randn(2, 3, generator=torch.Generator().manual_seed(s + 1))),
                    {"u": torch.randn(2, 3), "v": torch.randn(2, 3)})
    ep = torch.export.export(model, mk(0), {"scale": torch.tensor(2.0)})
    check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, [mk(0), mk(5)],
                [{"scale": torch.tensor(2.0)}, {"scale": torch.tensor(-1.0)}])
    mod = sr.StaticModule(ep)
    pair, feats = mk(1)
    # dict keys in another order are the same structure
    swapped = {"v": feats["v"], "u": feats["u"]}
    torch.testing.assert_close(mod(pair, swapped, scale=torch.tensor(2.0)),
                               model(pair, feats, scale=torch.tensor(2.0)))
    with pytest.raises(sr.ArgumentError, match="structured as"):
        mod(list(pair), feats, scale=torch.tensor(2.0))
    with pytest.raises(sr.ArgumentError, match="structured as"):
        mod(pair, feats)


# --------------------------------------------------------------------------- guards


def test_static_export_refuses_other_sizes_naming_the_argument():
    (x,) = MODELS["multi_head_attention"].example_inputs(2)
    ep = torch.export.export(MODELS["multi_head_attention"].build(), (x,))
    mod = sr.StaticModule(ep)
    seq = x.shape[1]
    with pytest.raises(sr.ArgumentError, match=rf"args\[0\].*shape \(2, {seq}, 256\).*got shape "
                                               rf"\(3, 16, 256\)"):
        mod(torch.randn(3, 16, 256))
    with pytest.raises(sr.ArgumentError, match="3 dimensions"):
        mod(torch.randn(2, 16))


def test_symbolic_sizes_checked_for_range_and_equality():
    model = lambda x, y: x + y
    batch = Dim("batch", min=2, max=8)

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return model(x, y)

    ep = torch.export.export(Add(), (torch.randn(3, 4), torch.randn(3, 4)),
                             dynamic_shapes=({0: batch}, {0: batch}))
    mod = sr.StaticModule(ep)
    torch.testing.assert_close(mod(torch.ones(5, 4), torch.ones(5, 4)), torch.full((5, 4), 2.0))
    with pytest.raises(sr.ArgumentError, match=r"2 <= s\d+ <= 8, got shape \(9, 4\)"):
        mod(torch.ones(9, 4), torch.ones(9, 4))
    with pytest.raises(sr.ArgumentError, match=r"args\[1\].*s\d+ = 5 from args\[0\]"):
        mod(torch.ones(5, 4), torch.ones(6, 4))


def test_symbolic_int_input_and_specialised_int():
    ep = exported("control_flow")
    mod = sr.StaticModule(ep)
    x = torch.randn(3, 32)
    torch.testing.assert_close(mod(x, 3), MODELS["control_flow"].build()(x, 3),
                               rtol=1e-4, atol=1e-5)
    model, example, _ = export_case("control_flow")
    static = sr.StaticModule(torch.export.export(model, example))
    with pytest.raises(sr.ArgumentError, match="8 .specialised when exported.*got 3"):
        static(torch.randn(2, 32), 3)


# --------------------------------------------------------------------------- refusals


def test_a_size_export_specialised_under_dim_auto_is_checked():
    # Dim.AUTO on a size the model's code fixes (Funnel's pooling fixed its length): export
    # keeps a symbolic int there whose value is a number; a call of another size is refused
    # as torch.export's own module refuses it, not left to fail inside the model.
    class Fixed(torch.nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0], 3, 4) * 2

    x = torch.randn(2, 12)
    ep = torch.export.export(Fixed(), (x,), dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO},))
    mod = sr.StaticModule(ep)
    torch.testing.assert_close(mod(torch.ones(5, 12)), torch.full((5, 3, 4), 2.0))
    with pytest.raises(sr.ArgumentError, match=r"shape \(s\d+, 12\), got shape \(5, 20\)"):
        mod(torch.ones(5, 20))
