"""Effects other than writes: which nodes must run even if nobody reads their outputs, and
which nodes give a different answer each time (so must not be folded or reordered).

Writes to inputs are the alias analysis' business (``passes.alias``); this module covers
what schemas do not say. PyTorch does not expose ``nondeterministic_seeded`` through
``FunctionSchema``, so random operators are recognised by a ``Generator`` argument or by an
explicit list of kinds.
"""

from __future__ import annotations

from static_runtime.ir import schema as S
from static_runtime.ir.graph import Node
from static_runtime.passes.alias import PRIM_RULES, Rule

#: Nodes that act on the world (raise, print, call out, record) whatever their outputs.
SIDE_EFFECT_KINDS = frozenset({
    "prim::RaiseException", "prim::Print", "aten::warn", "prim::SetAttr",
    "prim::CallFunction", "prim::CallMethod", "prim::Enter", "prim::Exit",
    "prim::AddStatValue", "prim::TimePoint", "prim::RecordFunction", "prim::Guard",
    "prim::BailOut", "prim::rpc_async", "prim::rpc_sync", "prim::rpc_remote", "aten::wait",
    "prim::fork", "aten::_assert_async", "aten::_assert_scalar", "aten::sym_constrain_range",
    "aten::sym_constrain_range_for_size", "aten::manual_seed", "aten::seed",
    "prim::PythonOp",
})

#: Operators that draw from the random number generator (removing or repeating one changes
#: every later random result).
RANDOM_KINDS = frozenset({
    "aten::rand", "aten::rand_like", "aten::randn", "aten::randn_like", "aten::randint",
    "aten::randint_like", "aten::randperm", "aten::bernoulli", "aten::bernoulli_",
    "aten::multinomial", "aten::normal", "aten::normal_", "aten::poisson", "aten::dropout",
    "aten::dropout_", "aten::feature_dropout", "aten::feature_dropout_", "aten::alpha_dropout",
    "aten::alpha_dropout_", "aten::feature_alpha_dropout", "aten::feature_alpha_dropout_",
    "aten::native_dropout", "aten::rrelu", "aten::rrelu_", "aten::rrelu_with_noise",
    "aten::rrelu_with_noise_", "aten::uniform_", "aten::exponential_", "aten::cauchy_",
    "aten::log_normal_", "aten::geometric_", "aten::random_", "aten::_standard_gamma",
    "aten::_sample_dirichlet", "aten::binomial", "aten::_fused_dropout",
})

#: Operators whose result is unspecified (uninitialised memory): deterministic enough to
#: delete when unused, never to fold into a constant.
UNSPECIFIED_KINDS = frozenset({
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
    "aten::new_empty_strided", "aten::empty_permuted",
})


def takes_generator(node: Node) -> bool:
    if node.schema is None:
        return False
    return any(a.type in ("Generator", "Generator?") for a in S.parse(node.schema).arguments)


def is_random(node: Node) -> bool:
    """Whether ``node`` draws from a random number generator."""
    return node.kind in RANDOM_KINDS or takes_generator(node)


def is_nondeterministic(node: Node) -> bool:
    """Whether two runs of ``node`` on the same inputs may give different results."""
    return is_random(node) or node.kind in UNSPECIFIED_KINDS


def has_side_effects(node: Node) -> bool:
    """Whether ``node`` must run even when its outputs are unused, writes aside.

    True for the kinds above, for random operators (the generator state they advance is
    read by later random operators), for schema-less nodes the alias analysis does not model,
    and for schema'd operators that return nothing and write nothing (they exist for their
    effect, e.g. ``aten::warn``)."""
    if node.kind in SIDE_EFFECT_KINDS or is_random(node):
        return True
    rule = PRIM_RULES.get(node.kind)
    if rule is not None:
        return rule is Rule.SET_ATTR
    if node.schema is None:
        return True
    info = S.parse(node.schema)
    return not info.returns and not info.writes_any_input()
