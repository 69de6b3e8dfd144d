"""Type families and prim rules: what a value of a type may be or hold, and the prim table."""

from static_runtime.ir import types as T
from static_runtime.passes.alias import (
    ALL_FAMILIES,
    LIST,
    PRIM_RULES,
    TENSOR,
    TUPLE,
    Rule,
    deep_families,
    element_families,
    is_container_type,
    shallow_families,
)


def test_a_list_of_tensors_is_a_list_holding_tensors():
    t = T.ListType(T.Tensor)
    assert shallow_families(t) == {LIST}
    assert element_families(t) == {TENSOR}
    assert deep_families(t) == {LIST, TENSOR}
    assert is_container_type(t)


def test_tuples_of_immutable_values_hold_nothing_mutable():
    assert deep_families(T.TupleType((T.Int, T.Float))) == frozenset()
    assert deep_families(T.TupleType((T.Tensor, T.Int))) == {TUPLE, TENSOR}
    assert not is_container_type(T.Tensor) and not is_container_type(T.Int)


def test_any_may_be_and_hold_anything():
    assert shallow_families(T.Any) == ALL_FAMILIES
    assert element_families(T.Any) == ALL_FAMILIES
    assert shallow_families(T.OptionalType(T.Tensor)) == {TENSOR}


def test_structural_prims_have_rules_decided_by_kind():
    assert PRIM_RULES["prim::ListConstruct"] is Rule.CONSTRUCT
    assert PRIM_RULES["prim::TupleUnpack"] is Rule.EXTRACT
    assert PRIM_RULES["prim::If"] is Rule.CONTROL and PRIM_RULES["prim::fork"] is Rule.FORK
    assert "aten::relu" not in PRIM_RULES
