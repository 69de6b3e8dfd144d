"""AliasDb's query API: what it answers for values it knows and for values it never saw."""

from alias_helpers import analyze


def test_values_created_later_are_treated_conservatively():
    db, v = analyze("""
    graph(%x : Tensor):
      %a : Tensor = aten::relu(%x)
      return (%a)
    """)
    g = v["a"].graph
    new = g.create("aten::relu", [v["a"]], 1)
    new.schema = "aten::relu(Tensor self) -> Tensor"
    g.block.append(new)
    assert not db.knows(new.output)
    assert db.may_alias(new.output, v["a"])
    assert db.may_alias_graph_input(new.output)
    assert not db.is_fresh(new.output)
