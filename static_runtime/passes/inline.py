"""``inline``: replace calls of known IR functions by the callee's body.

A call is ``prim::CallFunction(%fn, %arg0, ...)`` whose first input is a ``prim::Constant``
holding an IR ``Graph`` in ``attrs["graph"]``. The callee's nodes (with their blocks) are
copied in place of the call, callee inputs standing for the call's remaining inputs, and the
call's outputs are replaced by the copies of the callee's outputs. Inlined bodies are inlined
again until no such call is left; a function that calls itself is refused.

TorchScript imports never contain such calls (the frontend runs TorchScript's own inliner);
this serves IR from other frontends. Calls of anything else are left alone.
"""

from __future__ import annotations

from static_runtime.ir.graph import Graph, Node, Value

CALL = "prim::CallFunction"

#: How deep inlined calls may nest before we call it recursion.
MAX_DEPTH = 64


class InlineError(ValueError):
    """A call cannot be inlined (recursion, or the call does not match the callee)."""


def callee_of(node: Node) -> Graph | None:
    """The IR graph a ``prim::CallFunction`` node calls, if it is a known constant."""
    if node.kind != CALL or not node.inputs:
        return None
    fn = node.inputs[0].node
    if fn.kind != "prim::Constant":
        return None
    g = fn.attrs.get("graph")
    return g if isinstance(g, Graph) else None


def inline(graph: Graph) -> bool:
    """Inline every call of a known IR function; return whether any was inlined."""
    changed = False
    #: For copied nodes: the chain of callees they were copied out of (to catch recursion).
    origin: dict[Node, tuple[Graph, ...]] = {}
    while True:
        calls = [n for n in graph.walk() if callee_of(n) is not None]
        if not calls:
            return changed
        for call in calls:
            callee = callee_of(call)
            assert callee is not None
            stack = origin.get(call, ())
            if callee is graph or callee in stack:
                raise InlineError(f"cannot inline a recursive call ({call.source or call.kind})")
            if len(stack) >= MAX_DEPTH:
                raise InlineError(
                    f"calls nest deeper than {MAX_DEPTH} levels ({call.source or call.kind})")
            for new in _inline_call(call, callee):
                origin[new] = stack + (callee,)
                for b in new.blocks:
                    for inner in b.walk():
                        origin[inner] = stack + (callee,)
            changed = True


def _inline_call(call: Node, callee: Graph) -> list[Node]:
    """Copy ``callee`` before ``call``, rewire the call's outputs, remove the call; return the
    copied top-level nodes."""
    args = call.inputs[1:]
    if len(args) != len(callee.inputs):
        raise InlineError(
            f"call at {call.source} passes {len(args)} arguments to a function of "
            f"{len(callee.inputs)}")
    if len(call.outputs) != len(callee.outputs):
        raise InlineError(
            f"call at {call.source} expects {len(call.outputs)} results from a function "
            f"returning {len(callee.outputs)}")
    env: dict[Value, Value] = dict(zip(callee.inputs, args, strict=True))
    copied = []
    for n in callee.nodes:
        new = clone_node(n, call.graph, env)
        new.insert_before(call)
        copied.append(new)
    fn_value = call.inputs[0]
    for out, res in zip(call.outputs, callee.outputs, strict=True):
        out.replace_all_uses_with(env[res])
    call.destroy()
    if not fn_value.uses:
        fn_value.node.destroy()
    return copied


def clone_node(node: Node, graph: Graph, env: dict[Value, Value]) -> Node:
    """A copy of ``node`` (and its blocks) in ``graph``, unplaced; inputs are looked up in
    ``env``, which receives the copies' outputs and block inputs."""
    new = graph.create(node.kind, [env[v] for v in node.inputs])
    new.attrs = dict(node.attrs)
    new.schema = node.schema
    new.source = node.source
    new.meta = dict(node.meta)
    for o in node.outputs:
        env[o] = new.add_output(o.type, o.name)
    for b in node.blocks:
        nb = new.add_block()
        for v in b.inputs:
            env[v] = nb.add_input(v.type, v.name)
        for inner in b.nodes:
            nb.append(clone_node(inner, graph, env))
        for v in b.outputs:
            nb.add_output(env[v])
    return new
