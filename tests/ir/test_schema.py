"""Facts about operator schemas (``ir/schema.py``), read from PyTorch's own parser."""

import torch

from static_runtime.ir import schema as S


def test_alias_annotations_and_writes_are_read_from_the_schema():
    info = S.parse("aten::relu_(Tensor(a!) self) -> Tensor(a!)")
    assert (info.name, info.overload, info.namespace) == ("aten::relu_", "", "aten")
    (self_arg,) = info.arguments
    assert self_arg.is_write and self_arg.alias_sets == frozenset({"a"})
    assert info.writes_any_input() and info.has_alias_annotations()

    view = S.parse("aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)")
    assert view.qualified == "aten::select.int"
    assert not view.writes_any_input() and view.returns[0].alias_sets == frozenset({"a"})


def test_overloads_out_variants_and_tags():
    add = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    assert S.resolve_overload(add) is torch.ops.aten.add.Tensor
    assert S.parse(add).arguments[2].kwarg_only
    out = S.find_out_overload(add)
    assert out is not None and out[0] is torch.ops.aten.add.out
    assert "dynamic_output_shape" in S.tags("aten::nonzero(Tensor self) -> Tensor")
    assert not S.tags(add) & S.DATA_DEPENDENT_TAGS
    assert S.parse("aten::len.t(t[] a) -> int").is_generic()
