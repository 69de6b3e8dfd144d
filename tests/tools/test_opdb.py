"""tools/opdb: a broad subset of PyTorch's operator database through our runtime, and the
harness itself shown to catch each kind of failure (fake runtimes that misbehave on purpose)."""

from __future__ import annotations

import pytest
import torch

from tools.opdb.cases import (
    CallInputs,
    call_inputs,
    full_name,
    generate,
    op_db,
    pick_indices,
    random_reason,
    replicate,
)
from tools.opdb.check import CALLS, Status, check_case
from tools.opdb.runner import (
    ListSink,
    read_lines,
    run_all,
    run_opinfo,
    select,
    static_module,
)

_DB = {full_name(op): op for op in op_db()}

#: A deterministic, broad subset: element-wise, reductions, views, indexing, linalg, fft,
#: nn.functional convolution/pooling/normalisation, sorting, an op with a non-tensor
#: result (scripted, not traced) and integer-only ops (int64).
SUBSET = [
    "abs", "add", "mul", "div.no_rounding_mode", "where", "clamp", "sigmoid", "pow",
    "nn.functional.gelu", "bitwise_and", "logical_not",
    "sum", "mean", "amax", "max.reduction_with_dim", "argmax", "std", "cumsum", "logsumexp",
    "view", "reshape", "transpose", "permute", "expand", "narrow", "split", "cat", "stack",
    "index_select", "gather", "masked_fill", "take_along_dim", "__getitem__",
    "mm", "addmm", "matmul", "linalg.solve", "linalg.vector_norm",
    "fft.fft", "fft.rfft",
    "fft.ihfftn",  # ATen's out variant leaves `out` untouched for one transformed dim
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.layer_norm", "softmax", "nn.functional.embedding",
    "sort", "topk", "equal", "masked.std",
]


@pytest.mark.parametrize("name", SUBSET)
def test_opinfo_subset(name: str) -> None:
    torch.set_num_threads(1)
    sink = ListSink()
    run_opinfo(_DB[name], ["default", "fused"], 3, sink)
    cases = [r for r in sink.records if r["option"] != "*"]
    failures = [f"{r['variant']} sample {r['sample']} [{r['option']}] {r['status']}: "
                f"{r['message']}" for r in cases if r["status"] not in ("pass", "skip")]
    assert not failures, "\n".join(failures)
    for option in ("default", "fused"):
        assert any(r["status"] == "pass" and r["option"] == option for r in cases), cases


#: Element-wise ops followed by element-wise ops: with the fused option Inductor compiles the
#: op itself (a cold compile takes seconds, so these are few, one sample each).
CHAINED = ["add", "sigmoid", "where"]


@pytest.mark.parametrize("name", CHAINED)
def test_opinfo_chained_into_a_fused_region(name: str) -> None:
    torch.set_num_threads(1)
    sink, built = ListSink(), []

    def make_ours(oracle, options):
        built.append(static_module(oracle, options))
        return built[-1]
    run_opinfo(_DB[name], ["default", "fused"], 1, sink, make_ours=make_ours,
               variants=["chained"])
    cases = [r for r in sink.records if r["option"] != "*"]
    assert [r["status"] for r in cases] == ["pass", "pass"], cases
    # default: no region; fused: one of five kernels, the op and the four following it
    regions = ["static_runtime::fused_region[kernels=5]" in str(m.graph) for m in built]
    assert regions == [False, True], [str(m.graph) for m in built]


def test_random_ops_are_skipped_by_their_own_flags() -> None:
    assert random_reason(_DB["bernoulli"]) is not None
    assert random_reason(_DB["nn.functional.dropout"]) is not None
    assert random_reason(_DB["empty_like"]) is not None
    assert random_reason(_DB["add"]) is None


def test_replicate_keeps_layout_and_copies() -> None:
    base = torch.arange(12.0)
    for x in (base.view(3, 4).t(), base[2:].view(2, 5)[:, ::2], base[:4].expand(3, 4)):
        y = replicate(x)
        assert (y.shape, y.stride(), y.storage_offset()) == \
            (x.shape, x.stride(), x.storage_offset())
        assert torch.equal(y, x) and y.untyped_storage().data_ptr() != x.data_ptr()


def test_call_inputs_other_values_same_shapes_and_other_shapes() -> None:
    op = _DB["add"]
    samples, again = generate(op, torch.float32), generate(op, torch.float32, salt=1)
    inputs = call_inputs(samples, again, 0)
    assert inputs.a2_how == "regenerated"
    assert [t.shape for t in inputs.a2] == [t.shape for t in inputs.a]
    assert not all(torch.equal(x, y) for x, y in zip(inputs.a, inputs.a2))
    assert inputs.b is not None
    assert [t.shape for t in inputs.b] != [t.shape for t in inputs.a]
    assert pick_indices(10, 3) == [0, 4, 9] or pick_indices(10, 3) == [0, 5, 9]
    assert pick_indices(2, 3) == [0, 1]


# -- the harness catches what it is for: fakes of our runtime, each wrong in one way --------

def _inputs() -> CallInputs:
    a = [torch.randn(4, 3)]
    return CallInputs(a, [a[0] + 1], "test", [torch.randn(3, 3)], 1)


def _oracle(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2


def _faked(fault):
    """Ours = the oracle, with ``fault(call_index, args, result)`` applied."""
    def build():
        count = [0]

        def run(*xs):
            out = _oracle(*xs)
            count[0] += 1
            return fault(count[0] - 1, xs, out)
        return run
    return build


def test_honest_fake_passes() -> None:
    assert check_case(_oracle, _faked(lambda k, xs, out: out), _inputs()).status == Status.PASS


def test_wrong_result_is_caught() -> None:
    outcome = check_case(_oracle, _faked(lambda k, xs, out: out + (k == 2)), _inputs())
    assert (outcome.status, outcome.call) == (Status.WRONG, 2)


def test_changed_input_is_caught() -> None:
    def fault(k, xs, out):
        if k == 1:
            xs[0].mul_(0)
        return out
    outcome = check_case(_oracle, _faked(fault), _inputs())
    assert (outcome.status, outcome.call) == (Status.INPUT_CHANGED, 1)


def test_overwritten_earlier_output_is_caught() -> None:
    held: list[torch.Tensor] = []

    def fault(k, xs, out):  # one buffer reused for every result, as a bad arena would
        if not held:
            held.append(out.clone())
        held[0].resize_(out.shape).copy_(out)
        return held[0]
    outcome = check_case(_oracle, _faked(fault), _inputs())
    assert outcome.status == Status.OUTPUT_OVERWRITTEN and outcome.call == 2, outcome


def test_raising_where_the_oracle_does_not_is_caught() -> None:
    def fault(k, xs, out):
        if k == 3:
            raise RuntimeError("replanning failed")
        return out
    outcome = check_case(_oracle, _faked(fault), _inputs())
    assert (outcome.status, outcome.call) == (Status.ERROR, 3)

    def broken_build():
        raise RuntimeError("unsupported")
    assert check_case(_oracle, broken_build, _inputs()).status == Status.ERROR


def test_returning_where_the_oracle_raises_is_wrong_and_both_raising_passes() -> None:
    def strict(x):
        if x.shape[0] != 4:
            raise RuntimeError("shape")
        return _oracle(x)
    outcome = check_case(strict, _faked(lambda k, xs, out: out), _inputs())
    assert (outcome.status, outcome.call) == (Status.WRONG, 3)
    outcome = check_case(strict, lambda: strict, _inputs())
    assert outcome.status == Status.PASS and outcome.both_raise == 1


def test_nondeterministic_oracle_is_skipped_not_passed() -> None:
    outcome = check_case(lambda x: torch.rand_like(x), lambda: _oracle, _inputs())
    assert outcome.status == Status.SKIP


def test_run_opinfo_records_a_faulty_runtime_per_unit() -> None:
    def make_ours(oracle, options):
        def run(*xs):
            out = oracle(*xs)
            return out + 1 if isinstance(out, torch.Tensor) else out
        return run
    sink = ListSink()
    run_opinfo(_DB["mul"], ["default"], 1, sink, make_ours=make_ours)
    statuses = {r["variant"]: r["status"] for r in sink.records if r["option"] == "default"}
    assert statuses == {"returned": "wrong", "consumed": "wrong"}
    assert len(CALLS) == 5


def test_a_segfault_and_a_hang_are_recorded_crashes_and_the_run_goes_on(tmp_path,
                                                                          monkeypatch) -> None:
    monkeypatch.setenv("OPDB_SEGFAULT_AT", "abs|0|returned|default")
    monkeypatch.setenv("OPDB_HANG_AT", "abs|0|consumed|default")
    records = run_all(["abs", "neg"], ["default"], 1, jobs=1, chunk=2, timeout=5,
                      workdir=tmp_path)
    by_key = {r["key"]: r for r in records}
    assert by_key["abs|0|returned|default"]["status"] == "crash"
    assert "signal 11" in by_key["abs|0|returned|default"]["message"]
    assert by_key["abs|0|consumed|default"]["status"] == "crash"
    assert "timeout" in by_key["abs|0|consumed|default"]["message"]
    assert by_key["neg|0|returned|default"]["status"] == "pass"
    assert by_key["neg|0|consumed|default"]["status"] == "pass"
    assert len(read_lines(tmp_path / "chunk000.jsonl")) > len(records)  # begin lines too


def test_select_by_full_name_takes_that_opinfo_only() -> None:
    # a worker is given full names: "normal" must not also pick normal.in_place
    db = list(_DB.values())
    assert [full_name(op) for op in select(db, ["normal"])] == ["normal"]
    assert len(select(db, ["max"])) > 1  # a base name no OpInfo has as its full name
    with pytest.raises(ValueError):
        select(db, ["no_such_op"])
