"""Check a graph's invariants; explain the first one broken with the IR around it.

Invariants checked, in this order:

1. Structure: each node sits in exactly one block, and ``node.owning_block``,
   ``block.owning_node`` and ``graph`` back-pointers agree with where things sit.
2. Single definition: each value is an output of exactly one node (or a block input), at the
   offset it records, and no two values share a name.
3. Node forms: ``prim::If``, ``prim::Loop``, ``prim::fork`` and ``prim::Constant`` have the
   shapes TorchScript gives them (see ``_check_node_form``); a fork's block uses nothing
   from outside but constants.
4. Scope (dominance): each use is of a value defined earlier in the same block or in an
   enclosing block, or of an input of the same or an enclosing block.
5. Use-lists: ``Use(n, i)`` is in ``v.uses`` exactly when ``n.inputs[i] is v`` and ``n`` is in
   the graph.
"""

from __future__ import annotations

from collections import Counter
from typing import NoReturn

from static_runtime.ir import types as T
from static_runtime.ir.graph import PARAM, RETURN, Block, Graph, Node, Use, Value
from static_runtime.ir.printer import render_graph

#: Lines of printed IR shown on each side of the offending node.
CONTEXT_LINES = 3


class IRVerificationError(ValueError):
    """A graph breaks an IR invariant. ``node`` is the node the message points at, if any."""

    def __init__(self, message: str, node: Node | None = None):
        super().__init__(message)
        self.node = node


def verify(graph: Graph) -> None:
    """Raise ``IRVerificationError`` for the first invariant ``graph`` breaks; else return."""
    _Verifier(graph).run()


class _Verifier:
    def __init__(self, graph: Graph):
        self.graph = graph
        #: Every node placed in the graph, including each live block's param and return node
        #: (a dict used as an ordered set, so that the first problem reported is deterministic).
        self.nodes: dict[Node, None] = {}
        #: Every defined value and the node that defines it.
        self.defined_by: dict[Value, Node] = {}

    def run(self) -> None:
        if self.graph.block.owning_node is not None:
            self.fail("the graph's top-level block has an owning node", None)
        self._check_placed_once()
        self._check_block_structure(self.graph.block, None)
        self._check_definitions()
        for node in self.graph.walk():
            self._check_node_form(node)
        self._check_scopes(self.graph.block, [])
        self._check_use_lists()

    # ------------------------------------------------------------------ 1. structure

    def _check_placed_once(self) -> None:
        where: dict[Node, Block] = {}

        def visit(block: Block) -> None:
            for node in block.nodes:
                first = where.get(node)
                if first is not None:
                    self.fail(f"{node.kind} appears twice in the graph (in {_describe(first)} "
                              f"and in {_describe(block)})", node)
                where[node] = block
                for sub in node.blocks:
                    visit(sub)

        visit(self.graph.block)

    def _check_block_structure(self, block: Block, owner: Node | None) -> None:
        where = "the top-level block" if owner is None else f"a block of {owner.kind}"
        if block.graph is not self.graph:
            self.fail(f"{where} belongs to another graph", owner)
        if block.owning_node is not owner:
            self.fail(f"{where}: block.owning_node is not the node that holds the block", owner)
        for special, kind in ((block.param_node, PARAM), (block.return_node, RETURN)):
            if special.kind != kind or special.owning_block is not block:
                self.fail(f"{where}: its {kind} node is not owned by the block", owner)
            self.nodes[special] = None
        for node in block.nodes:
            if node.kind in (PARAM, RETURN):
                self.fail(f"{node.kind} sits in a block's node list", node)
            if node in self.nodes:
                self.fail(f"{node.kind} appears twice in the graph", node)
            self.nodes[node] = None
            if node.owning_block is not block:
                self.fail(f"{node.kind}: node.owning_block is not the block the node sits in",
                          node)
            if node.graph is not self.graph:
                self.fail(f"{node.kind} belongs to another graph", node)
            for sub in node.blocks:
                self._check_block_structure(sub, node)

    # ------------------------------------------------------------------ 2. definitions

    def _defining_nodes(self) -> list[Node]:
        """Param nodes and ordinary nodes, in program order."""
        found: list[Node] = []

        def visit(block: Block) -> None:
            found.append(block.param_node)
            for node in block.nodes:
                found.append(node)
                for sub in node.blocks:
                    visit(sub)

        visit(self.graph.block)
        return found

    def _check_definitions(self) -> None:
        names: dict[str, Value] = {}
        for node in self._defining_nodes():
            what = _describe_def(node)
            for offset, value in enumerate(node.outputs):
                first = self.defined_by.get(value)
                if first is not None:
                    self.fail(f"value %{value.name} is defined twice: as {_describe_def(first)} "
                              f"and as {what}", node)
                if value.node is not node or value.offset != offset:
                    self.fail(f"value %{value.name} is {what} at offset {offset}, but records "
                              f"{_describe_def(value.node)} at offset {value.offset}", node)
                if value.graph is not self.graph:
                    self.fail(f"value %{value.name} belongs to another graph", node)
                other = names.get(value.name)
                if other is not None:
                    self.fail(f"two values are named %{value.name} ({_describe_def(other.node)} "
                              f"and {what})", node)
                names[value.name] = value
                self.defined_by[value] = node

    # ------------------------------------------------------------------ 3. scopes

    def _check_scopes(self, block: Block, visible: list[set[Value]]) -> None:
        scope = set(block.inputs)
        visible.append(scope)
        for node in block.nodes:
            self._check_inputs_visible(node, visible)
            for sub in node.blocks:
                self._check_scopes(sub, visible)
            scope.update(node.outputs)
        self._check_inputs_visible(block.return_node, visible)
        visible.pop()

    def _check_inputs_visible(self, user: Node, visible: list[set[Value]]) -> None:
        for index, value in enumerate(user.inputs):
            if any(value in scope for scope in visible):
                continue
            who = _describe_user(user, index)
            definer = self.defined_by.get(value)
            if definer is None:
                self.fail(f"%{value.name} is used by {who} but is not defined in this graph "
                          "(its defining node was removed, or it belongs to another graph)",
                          user)
            if definer.kind != PARAM and _is_nested_in(user, definer):
                self.fail(f"%{value.name} is used by {who} inside a block of the node that "
                          f"defines it ({definer.kind})", user)
            if definer.kind != PARAM and not definer.is_before(user):
                self.fail(f"%{value.name} is used by {who} before it is defined "
                          f"(by {definer.kind})", user)
            self.fail(f"%{value.name} is used by {who} outside the block that defines it "
                      f"(it is {_describe_def(definer)}, inside a block that does not enclose "
                      "this use)", user)

    # ------------------------------------------------------------------ 4. use-lists

    def _check_use_lists(self) -> None:
        counted: dict[Value, Counter[Use]] = {}
        for user in self.nodes:
            for index, value in enumerate(user.inputs):
                if value not in counted:
                    counted[value] = Counter(value.uses)
                count = counted[value][Use(user, index)]
                if count != 1:
                    problem = "lacks" if count == 0 else f"lists {count} times"
                    self.fail(f"the use-list of %{value.name} {problem} its use by "
                              f"{_describe_user(user, index)}", user)
        for value, definer in self.defined_by.items():
            for use in value.uses:
                if use.user not in self.nodes:
                    self.fail(f"the use-list of %{value.name} names a {use.user.kind} node that "
                              "is not in the graph", definer)
                inputs = use.user.inputs
                if not 0 <= use.index < len(inputs) or inputs[use.index] is not value:
                    actual = (f"%{inputs[use.index].name}" if 0 <= use.index < len(inputs)
                              else "no such input")
                    self.fail(f"the use-list of %{value.name} says it is input {use.index} of "
                              f"{use.user.kind}, but that input is {actual}", use.user)

    # ------------------------------------------------------------------ 5. node forms

    def _check_node_form(self, node: Node) -> None:
        kind = node.kind
        if kind == "prim::If":
            if len(node.inputs) != 1 or node.inputs[0].type != T.Bool:
                found = ", ".join(str(v.type) for v in node.inputs) or "none"
                self.fail(f"prim::If needs exactly one bool input (the condition), "
                          f"found: {found}", node)
            if len(node.blocks) != 2:
                self.fail(f"prim::If needs 2 blocks, found {len(node.blocks)}", node)
            for i, block in enumerate(node.blocks):
                if block.inputs:
                    self.fail(f"block{i} of prim::If has {len(block.inputs)} inputs, "
                              "expected none", node)
                if len(block.outputs) != len(node.outputs):
                    self.fail(f"block{i} of prim::If returns {len(block.outputs)} values, but "
                              f"the node has {len(node.outputs)} outputs", node)
        elif kind == "prim::Loop":
            if len(node.inputs) < 2:
                self.fail("prim::Loop needs inputs (max_trip_count, initial_condition, "
                          f"*carried), found {len(node.inputs)} inputs", node)
            carried = len(node.inputs) - 2
            if len(node.blocks) != 1:
                self.fail(f"prim::Loop needs 1 block, found {len(node.blocks)}", node)
            body = node.blocks[0]
            if len(body.inputs) != 1 + carried:
                self.fail(f"the prim::Loop body has {len(body.inputs)} inputs, expected "
                          f"{1 + carried} (the iteration number and {carried} carried)", node)
            if len(body.outputs) != 1 + carried:
                self.fail(f"the prim::Loop body returns {len(body.outputs)} values, expected "
                          f"{1 + carried} (the condition and {carried} carried)", node)
            if len(node.outputs) != carried:
                self.fail(f"prim::Loop has {len(node.outputs)} outputs, expected {carried} "
                          "(one per carried value)", node)
        elif kind == "prim::fork":
            self._check_fork(node)
        elif kind == "prim::Constant":
            if node.inputs:
                self.fail(f"prim::Constant has {len(node.inputs)} inputs, expected none", node)
            if node.blocks:
                self.fail("prim::Constant has blocks", node)
            if len(node.outputs) != 1:
                self.fail(f"prim::Constant has {len(node.outputs)} outputs, expected one", node)

    def _check_fork(self, node: Node) -> None:
        """A fork owns one block, the forked function: its inputs are bound to the node's
        inputs, it returns one value, and the node's one output is the ``Future`` of it. The
        block runs on another thread with its own values: it may use only what is defined
        inside it, its inputs, and constants."""
        if len(node.blocks) != 1:
            self.fail(f"prim::fork needs 1 block (the forked function), found "
                      f"{len(node.blocks)}", node)
        body = node.blocks[0]
        if len(body.inputs) != len(node.inputs):
            self.fail(f"the prim::fork block has {len(body.inputs)} inputs, but the node passes "
                      f"{len(node.inputs)}", node)
        if len(body.outputs) != 1:
            self.fail(f"the prim::fork block returns {len(body.outputs)} values, expected one",
                      node)
        if len(node.outputs) != 1 or not isinstance(node.outputs[0].type, T.FutureType):
            found = ", ".join(str(v.type) for v in node.outputs) or "none"
            self.fail(f"prim::fork needs one Future output, found: {found}", node)
        for inner in [*body.walk(), body.return_node]:
            users = [inner, *(b.return_node for b in inner.blocks)]
            for user in users:
                for index, value in enumerate(user.inputs):
                    definer = value.node
                    if definer.kind == "prim::Constant" or _defined_within(value, node):
                        continue
                    self.fail(f"%{value.name} is used by {_describe_user(user, index)} inside "
                              "a prim::fork block but defined outside it (a forked block may "
                              "only use its inputs, what it defines, and constants)", user)

    # ------------------------------------------------------------------ reporting

    def fail(self, problem: str, node: Node | None) -> NoReturn:
        raise IRVerificationError(f"{problem}\n{_context(self.graph, node)}", node)


def _context(graph: Graph, node: Node | None) -> str:
    """A few printed lines around ``node``, the node's line marked with ``>>``."""
    try:
        rendered = render_graph(graph)
    except Exception as e:  # noqa: BLE001 - a diagnostic must not hide the real problem
        return f"(the graph could not be printed: {type(e).__name__}: {e})"
    lines = rendered.lines
    at = rendered.node_line.get(node) if node is not None else None
    if at is None:
        head = "\n".join(f"   {line}" for line in lines[: 2 * CONTEXT_LINES + 1])
        more = "\n   ..." if len(lines) > 2 * CONTEXT_LINES + 1 else ""
        return f"in:\n{head}{more}"
    start, end = max(0, at - CONTEXT_LINES), min(len(lines), at + CONTEXT_LINES + 1)
    shown = [f"{'>> ' if i == at else '   '}{lines[i]}" for i in range(start, end)]
    before = ["   ..."] if start > 0 else []
    after = ["   ..."] if end < len(lines) else []
    return f"at line {at + 1} of the printed graph:\n" + "\n".join(before + shown + after)


def _describe(block: Block) -> str:
    owner = block.owning_node
    if owner is None:
        return "the top-level block"
    index = owner.blocks.index(block) if block in owner.blocks else "?"
    return f"block{index} of {owner.kind}"


def _describe_def(node: Node) -> str:
    if node.kind == PARAM:
        owner = node.owning_block.owning_node if node.owning_block is not None else None
        return "a graph input" if owner is None else f"an input of a block of {owner.kind}"
    return f"an output of {node.kind}"


def _describe_user(user: Node, index: int) -> str:
    if user.kind == RETURN:
        block = user.owning_block
        owner = block.owning_node if block is not None else None
        return "the graph's return" if owner is None else f"a block return of {owner.kind}"
    return f"{user.kind} (input {index})"


def _defined_within(value: Value, ancestor: Node) -> bool:
    """Whether ``value`` is defined inside ``ancestor``'s blocks (as a node output or as the
    input of a block at any depth)."""
    definer = value.node
    if definer.kind == PARAM:
        block = definer.owning_block
        owner = block.owning_node if block is not None else None
        return owner is not None and (owner is ancestor or _is_nested_in(owner, ancestor))
    return _is_nested_in(definer, ancestor)


def _is_nested_in(node: Node, ancestor: Node) -> bool:
    """Whether ``node`` sits (at any depth) inside one of ``ancestor``'s blocks."""
    block = node.owning_block
    while block is not None and block.owning_node is not None:
        if block.owning_node is ancestor:
            return True
        block = block.owning_node.owning_block
    return False
