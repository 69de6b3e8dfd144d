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

