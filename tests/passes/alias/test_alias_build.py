"""Alias classes, contents, writes and escapes as the analysis builds them from schemas,
prim rules and control flow (asked through ``AliasDb``)."""

import torch
from alias_helpers import analyze

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph
from static_runtime.passes.alias import AliasDb


def test_fresh_output_aliases_nothing_and_inputs_are_external():
    db, v = analyze("""
    graph(%x : Tensor, %y : Tensor):
      %one : int = prim::Constant[value=1]()
      %z : Tensor = aten::add.Tensor(%x, %y, %one)
      %w : Tensor = aten::mul.Tensor(%z, %z)
      return (%w)
    """)
    assert db.is_fresh(v["z"]) and db.is_fresh(v["w"])
    assert not db.may_alias(v["z"], v["x"])
    assert not db.may_alias(v["z"], v["w"])
    assert db.may_alias_graph_input(v["x"]) and not db.may_alias_graph_input(v["z"])
    assert db.may_alias_graph_output(v["w"]) and not db.may_alias_graph_output(v["z"])
    # a caller may pass the same tensor twice
    assert db.may_alias(v["x"], v["y"])
    # immutable values take no part
    assert not db.may_alias(v["one"], v["one"])
    assert not db.may_alias_graph_input(v["one"])
    assert not db.has_writers(v["z"])


def test_views_and_in_place_writes_follow_annotations():
    db, v = analyze("""
    graph(%x : Tensor):
      %zero : int = prim::Constant[value=0]()
      %z : Tensor = aten::relu(%x)
      %s : Tensor = aten::select.int(%z, %zero, %zero)
      %r : Tensor = aten::relu_(%s)
      %d : Tensor = aten::detach(%x)
      %c : Tensor = aten::clone(%z)
      return (%c)
    """)
    assert db.may_alias(v["s"], v["z"]) and not db.is_fresh(v["s"])
    assert db.may_alias(v["r"], v["z"])
    relu_ = v["r"].node
    assert db.writes(relu_) == {v["s"]}
    assert db.writers(v["z"]) == [relu_]
    assert db.is_written_after(v["z"], v["s"].node)
    assert not db.is_written_after(v["z"], relu_)
    assert db.is_written_before(v["z"], v["c"].node)
    assert db.may_alias(v["d"], v["x"]) and db.may_alias_graph_input(v["d"])
    assert not db.may_alias(v["c"], v["z"]) and db.is_fresh(v["c"])


def test_containers_hold_their_elements():
    db, v = analyze("""
    graph(%x : Tensor):
      %zero : int = prim::Constant[value=0]()
      %a : Tensor = aten::relu(%x)
      %b : Tensor = aten::sigmoid(%x)
      %e : Tensor = aten::tanh(%x)
      %l : Tensor[] = prim::ListConstruct(%a)
      %l2 : Tensor[] = aten::append.t(%l, %b)
      %g : Tensor = aten::__getitem__.t(%l, %zero)
      %t : (Tensor, Tensor) = prim::TupleConstruct(%e, %e)
      %ti : Tensor = prim::TupleIndex(%t, %zero)
      %n : int = aten::len.t(%l)
      return (%t)
    """)
    # a list is not its elements, but holds them
    assert not db.may_alias(v["l"], v["a"])
    assert db.may_contain_alias(v["l"], v["a"]) and db.may_contain_alias(v["l"], v["b"])
    assert db.may_be_contained(v["a"]) and not db.may_be_contained(v["l"])
    assert db.may_alias(v["g"], v["b"]) and db.may_alias(v["g"], v["a"])
    assert db.is_fresh(v["l"]) and not db.is_fresh(v["g"])
    assert db.writes(v["l2"].node) == {v["l"]}
    assert db.has_writers(v["l"], same_object=True)
    assert not db.has_writers(v["a"])
    # the returned tuple makes its elements escape; prim::TupleIndex reads out of it
    assert db.may_alias_graph_output(v["e"]) and db.may_alias(v["ti"], v["e"])
    assert not db.may_alias_graph_output(v["a"])


def test_same_object_writers_ignore_writes_to_elements():
    db, v = analyze("""
    graph(%x : Tensor):
      %one : int = prim::Constant[value=1]()
      %a : Tensor = aten::relu(%x)
      %l : Tensor[] = prim::ListConstruct(%a, %x)
      %w : Tensor = aten::add_.Scalar(%a, %one, %one)
      %c : Tensor = aten::cat(%l, %one)
      return (%c)
    """)
    assert db.has_writers(v["l"])
    assert not db.has_writers(v["l"], same_object=True)


def test_control_flow_joins_branches_and_carried_values():
    db, v = analyze("""
    graph(%x : Tensor, %c : bool, %n : int):
      %true : bool = prim::Constant[value=True]()
      %two : int = prim::Constant[value=2]()
      %a : Tensor = aten::relu(%x)
      %b : Tensor = aten::sigmoid(%x)
      %i : Tensor = prim::If(%c)
        block0():
          -> (%a)
        block1():
          -> (%b)
      %u : Tensor = prim::Loop(%n, %true, %i)
        block0(%k : int, %u1 : Tensor):
          %u2 : Tensor = aten::mul.Scalar(%u1, %two)
          %u3 : Tensor = aten::mul_.Scalar(%u2, %two)
          -> (%true, %u2)
      %z : Tensor = aten::tanh(%x)
      return (%z)
    """)
    assert db.may_alias(v["i"], v["a"]) and db.may_alias(v["i"], v["b"])
    assert db.may_alias(v["u"], v["u1"]) and db.may_alias(v["u"], v["u2"])
    assert db.may_alias(v["u"], v["a"]) and not db.may_alias(v["z"], v["a"])
    # a write inside a loop may run after a node that precedes it in the body
    mul = v["u2"].node
    writer = v["u3"].node
    assert db.is_written_after(v["u2"], writer)  # the next iteration
    assert db.is_written_after(v["u1"], mul)


def test_objects_and_unknown_nodes_are_conservative():
    db, v = analyze("""
    graph(%self : __torch__.M, %x : Tensor):
      %a : Tensor = aten::relu(%x)
       = prim::SetAttr[name="w"](%self, %a)
      %g : Tensor = prim::GetAttr[name="w"](%self)
      %b : Tensor = aten::sigmoid(%x)
      %u : Tensor = myns::mystery(%b)
      %k : Tensor = aten::tanh(%x)
      return (%k)
    """)
    set_attr = v["a"].uses[0].user
    assert db.writes(set_attr) == {v["self"]}
    assert db.may_alias(v["a"], v["self"]) and db.may_alias_graph_input(v["a"])
    assert db.may_alias_graph_input(v["g"])
    mystery = v["u"].node
    assert db.writes(mystery) == {v["b"]}
    assert db.may_alias_graph_input(v["u"]) and db.may_alias_graph_input(v["b"])
    assert not db.may_alias_graph_input(v["k"])


def test_constants_count_as_inputs():
    g = Graph()
    x = g.add_input(T.Tensor, "x")
    c = g.constant(torch.ones(2), T.Tensor)
    node = g.create("aten::mul", [x, c], 1)
    node.schema = "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"
    g.block.append(node)
    g.add_output(node.output)
    db = AliasDb(g)
    assert db.may_alias_graph_input(c) and db.may_alias(c, x)
    assert not db.may_alias_graph_input(node.output)


def test_split_outputs_alias_their_input_from_torchscript():
    from static_runtime.frontend.torchscript import import_torchscript

    def f(x: torch.Tensor) -> list[torch.Tensor]:
        y = torch.relu(x)
        parts = torch.split(y, 2)
        z = parts[0]
        return [z * 2]

    g = import_torchscript(torch.jit.script(f))
    db = AliasDb(g)
    relu = next(n for n in g.walk() if n.kind == "aten::relu")
    getitem = next(n for n in g.walk() if n.kind == "aten::__getitem__")
    assert db.may_alias(getitem.output, relu.output)
    assert not db.may_alias_graph_input(relu.output)
    assert not db.may_alias_graph_output(relu.output)


def test_list_copies_share_contents_not_identity():
    db, v = analyze("""
    graph(%x : Tensor):
      %a : Tensor = aten::relu(%x)
      %l : Tensor[] = prim::ListConstruct(%a)
      %c : Tensor[] = aten::list.t(%l)
      %c2 : Tensor[] = aten::append.t(%c, %x)
      %one : int = prim::Constant[value=1]()
      %w : Tensor = aten::add_.Scalar(%a, %one, %one)
      return (%l)
    """)
    assert not db.may_alias(v["c"], v["l"]) and db.is_fresh(v["c"])
    assert db.may_contain_alias(v["c"], v["l"])
    # appending to the copy changes the copy only
    assert db.has_writers(v["c"], same_object=True)
    assert not db.has_writers(v["l"], same_object=True)
    # writing an element is a write to what both lists hold
    assert db.writers(v["l"]) == [v["w"].node]
    # the appended input makes what the copy holds external, and so the original's too
    assert db.may_alias_graph_input(v["a"])
    # %a is held by the returned list: it escapes
    assert db.may_alias_graph_output(v["a"])


def test_returned_tuple_makes_elements_escape_and_input_contents_are_external():
    db, v = analyze("""
    graph(%xs : Tensor[], %y : Tensor):
      %zero : int = prim::Constant[value=0]()
      %e : Tensor = aten::__getitem__.t(%xs, %zero)
      %a : Tensor = aten::relu(%y)
      %b : Tensor = aten::sigmoid(%y)
      %t : (Tensor, Tensor) = prim::TupleConstruct(%a, %e)
      %u : (Tensor, Tensor) = prim::TupleConstruct(%b, %b)
      return (%t)
    """)
    assert db.may_alias_graph_input(v["e"]) and db.may_alias(v["e"], v["y"])
    assert db.may_alias_graph_output(v["a"])
    assert not db.may_alias_graph_output(v["b"]) and not db.may_alias_graph_input(v["b"])
    assert db.may_be_contained(v["b"])


def test_object_attributes_are_its_contents():
    db, v = analyze("""
    graph(%x : Tensor):
      %o : __torch__.Box = prim::CreateObject()
      %a : Tensor = aten::relu(%x)
       = prim::SetAttr[name="v"](%o, %a)
      %g : Tensor = prim::GetAttr[name="v"](%o)
      %k : Tensor = aten::tanh(%g)
      return (%k)
    """)
    assert db.may_alias(v["g"], v["a"])
    assert not db.may_alias_graph_input(v["a"]) and db.may_be_contained(v["a"])
    assert db.has_writers(v["o"], same_object=True)


def test_unannotated_result_of_a_list_write_is_the_list():
    # aten::add_.t returns its (written) self, though its schema does not say so
    db, v = analyze("""
    graph(%x : Tensor):
      %a : Tensor = aten::relu(%x)
      %l : Tensor[] = prim::ListConstruct(%a)
      %m : Tensor[] = prim::ListConstruct(%a)
      %r : Tensor[] = aten::add_.t(%l, %m)
      %r2 : Tensor[] = aten::append.t(%r, %x)
      %zero : int = prim::Constant[value=0]()
      %c : Tensor = aten::cat(%l, %zero)
      return (%c)
    """)
    assert db.may_alias(v["r"], v["l"])
    assert v["r2"].node in db.writers(v["l"], same_object=True)
    assert not db.may_alias(v["m"], v["l"]) and db.may_contain_alias(v["m"], v["l"])
