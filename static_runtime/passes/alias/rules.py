"""The alias rules of structural prim nodes, decided by kind (their schemas, where PyTorch
has one, carry no alias annotations)."""

from __future__ import annotations

import enum


class Rule(enum.Enum):
    """How a structural prim node relates its outputs to its inputs."""

    CONSTANT = "constant"        # output is external (the world)
    CONSTRUCT = "construct"      # fresh container holding the inputs
    EXTRACT = "extract"          # outputs are held by the (container) inputs
    IDENTITY = "identity"        # output i is input i (casts, checks)
    SLICE = "slice"              # fresh container holding part of the input's contents
    FRESH = "fresh"              # fresh outputs, inputs only read
    READ = "read"                # outputs are not mutable; inputs only read
    GET_ATTR = "get_attr"        # reads the object's contents
    SET_ATTR = "set_attr"        # writes the object, stores the value in its contents
    CONTROL = "control"          # prim::If / prim::Loop, handled with their blocks
    FORK = "fork"                # prim::fork: everything it touches escapes to another thread


#: Structural prim kinds and their rule, decided by kind (their schemas, where PyTorch has one,
#: do not carry alias annotations: ``prim::TupleIndex(Any tup, int i) -> Any``).
PRIM_RULES: dict[str, Rule] = {
    "prim::Constant": Rule.CONSTANT,
    "prim::ListConstruct": Rule.CONSTRUCT,
    "prim::TupleConstruct": Rule.CONSTRUCT,
    "prim::DictConstruct": Rule.CONSTRUCT,
    "prim::ListUnpack": Rule.EXTRACT,
    "prim::TupleUnpack": Rule.EXTRACT,
    "prim::VarTupleUnpack": Rule.EXTRACT,
    "prim::TupleIndex": Rule.EXTRACT,
    "prim::TupleSlice": Rule.SLICE,
    "prim::unchecked_cast": Rule.IDENTITY,
    "prim::TypeCheck": Rule.IDENTITY,
    "prim::VarConcat": Rule.FRESH,
    "prim::VarStack": Rule.FRESH,
    "prim::CreateObject": Rule.FRESH,
    "prim::Uninitialized": Rule.FRESH,
    "prim::isinstance": Rule.READ,
    "prim::Print": Rule.READ,
    "prim::GetAttr": Rule.GET_ATTR,
    "prim::SetAttr": Rule.SET_ATTR,
    "prim::If": Rule.CONTROL,
    "prim::Loop": Rule.CONTROL,
    "prim::fork": Rule.FORK,
    # reads its inputs, returns tensors its compiled kernels wrote (passes/regions.py keeps
    # views out of its results)
    "static_runtime::fused_region": Rule.FRESH,
}



#: Operators whose schema declares a fresh tensor result, yet which return an input (or a view
#: of one) in some cases: ``type_as`` of a tensor already of that type, ``dropout`` with
#: ``train=False``, ``atleast_2d`` of a matrix,
#: ``einsum("ij->ji", [x])``, ``cartesian_prod`` of one tensor, ``_unsafe_view``... Each was
#: found returning its input's storage by calling it (``tests/passes/test_alias_facts.py``
#: calls every one). Their result is taken to be any of their tensor inputs, or anything in
#: their list inputs — as a schema ``Tensor(a) self -> Tensor(a)`` would say. Trusting the
#: schema, the memory planner let a value's region be reused while its alias was still read
#: (a Gemma-style RMSNorm ends with ``type_as``: the next GEMM wrote over its own input).
#: (Results that are lists already may hold any input list's tensors: the schema rule.)
RETURNS_INPUT: frozenset[str] = frozenset({
    "aten::type_as", "aten::to_dense", "aten::dequantize.self",
    "aten::lift", "aten::data", "aten::_unsafe_view", "aten::sum_to_size",
    "aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
    "aten::feature_alpha_dropout", "aten::atleast_1d", "aten::atleast_2d", "aten::atleast_3d",
    "aten::conj_physical", "aten::cartesian_prod", "aten::flatten_dense_tensors",
    "aten::einsum",
    "aten::_cast_Byte", "aten::_cast_Char", "aten::_cast_Double", "aten::_cast_Float",
    "aten::_cast_Int", "aten::_cast_Long", "aten::_cast_Short", "aten::_cast_Half",
})
