"""Memory planners: hand cases with known optima, the plan verifier, printouts, the PNG, and
random request sets checked against the lower bound."""

import dataclasses
import random
import statistics

import pytest
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from static_runtime.memory.planner import (
    GroupPolicy,
    MemoryPlan,
    MemoryPlanError,
    Placement,
    TensorRequest,
    align,
    format_bytes,
    lower_bound,
    plan_best,
    plan_greedy_by_lifetime,
    plan_greedy_by_size,
    plan_storage_groups,
)

PLANNERS = [plan_greedy_by_size, plan_greedy_by_lifetime, plan_storage_groups,
            lambda reqs, alignment=64: plan_storage_groups(reqs, alignment,
                                                           policy=GroupPolicy.LIFO),
            plan_best]


def reqs(*specs: tuple[str, int, int, int]) -> list[TensorRequest]:
    return [TensorRequest(*spec) for spec in specs]


def random_requests(rng: random.Random, short_lived: bool = False) -> list[TensorRequest]:
    """1-60 tensors of 0..1e6 bytes. Lifetimes are random intervals within steps 0..100, or,
    with ``short_lived``, a few steps long as in a typical feed-forward graph."""
    result = []
    for i in range(rng.randint(1, 60)):
        if short_lived:
            start = rng.randint(0, 100)
            end = min(100, start + int(rng.expovariate(1 / 3)))
        else:
            start, end = sorted((rng.randint(0, 100), rng.randint(0, 100)))
        result.append(TensorRequest(f"t{i}", rng.randint(0, 10**6), start, end))
    return result


# -- basics -----------------------------------------------------------------------------------


def test_align():
    assert [align(n) for n in (0, 1, 63, 64, 65, 128)] == [0, 64, 64, 64, 128, 128]
    assert align(10, 8) == 16 and align(10, 1) == 10
    with pytest.raises(MemoryPlanError):
        align(10, 0)


def test_lower_bound_is_the_peak_of_aligned_live_bytes():
    r = reqs(("a", 100, 0, 2), ("b", 10, 1, 1), ("c", 64, 2, 3), ("d", 1, 5, 5))
    # step 0: a=128; step 1: a+b=192; step 2: a+c=192; step 3: c=64; step 5: d=64
    assert lower_bound(r) == 192
    assert lower_bound(r, alignment=1) == 164
    assert lower_bound([]) == 0


@pytest.mark.parametrize("planner", PLANNERS)
def test_empty_request_list_gives_an_empty_arena(planner):
    plan = planner([])
    plan.verify()
    assert (plan.arena_bytes, plan.lower_bound_bytes, len(plan)) == (0, 0, 0)
    assert plan.summary().startswith("arena 0 B for 0 tensors")


@pytest.mark.parametrize("planner", PLANNERS)
def test_zero_sized_tensors_occupy_nothing_and_stay_aligned(planner):
    r = reqs(("z0", 0, 0, 3), ("a", 100, 1, 2), ("z1", 0, 2, 2), ("b", 64, 2, 4))
    plan = planner(r)
    plan.verify()
    assert all(p.offset % 64 == 0 for p in plan)
    assert plan.aligned_size("z0") == 0
    assert plan.arena_bytes == lower_bound(r) == 192
    assert planner(reqs(("z", 0, 0, 0), ("y", 0, 0, 1))).arena_bytes == 0


def test_bad_requests_are_refused():
    with pytest.raises(MemoryPlanError, match="ends before it starts"):
        TensorRequest("a", 8, 3, 2)
    with pytest.raises(MemoryPlanError, match="negative size"):
        TensorRequest("a", -1, 0, 0)
    with pytest.raises(MemoryPlanError, match="named 'a'"):
        plan_greedy_by_size(reqs(("a", 8, 0, 0), ("a", 8, 1, 1)))
    with pytest.raises(MemoryPlanError, match="alignment"):
        plan_storage_groups(reqs(("a", 8, 0, 0)), alignment=0)


def test_lookups_by_name():
    plan = plan_greedy_by_size(reqs(("a", 64, 0, 1), ("b", 64, 1, 2)))
    assert plan.offset_of("a") == 0 and plan.offset_of("b") == 64
    assert plan["b"].request.end == 2 and plan["b"].group is None
    assert "a" in plan and "zz" not in plan
    assert [p.name for p in plan] == ["a", "b"]  # placements keep the order of the requests
    with pytest.raises(KeyError, match="zz"):
        plan.offset_of("zz")


# -- hand cases with known optima -------------------------------------------------------------


@pytest.mark.parametrize("planner", PLANNERS)
def test_chain_reuses_the_first_tensor_for_the_third(planner):
    # a -> b -> c: b is live with a (it reads a) and with c (c reads b), a and c never meet.
    plan = planner(reqs(("a", 1000, 0, 1), ("b", 1000, 1, 2), ("c", 1000, 2, 3)))
    plan.verify()
    assert plan.offset_of("a") == plan.offset_of("c")
    assert plan.arena_bytes == plan.lower_bound_bytes == 2 * 1024


@pytest.mark.parametrize("planner", PLANNERS)
def test_two_long_lived_and_many_short_lived(planner):
    r = reqs(("long1", 4000, 0, 20), ("long2", 4000, 0, 20),
             *((f"s{i}", 500, i, i + 1) for i in range(1, 19)))
    plan = planner(r)
    plan.verify()
    assert plan.arena_bytes == plan.lower_bound_bytes == 2 * 4032 + 2 * 512
    assert {plan.offset_of(f"s{i}") for i in range(1, 19)} == {2 * 4032, 2 * 4032 + 512}
    # Equal sizes and lifetimes: greedy places the short ones in execution order, not in
    # name order (s1, s10, s11, ..., s2), which would need a third slot.


# The "ComplexRecords" case from TFLite's GPU delegate (tensorflow/lite/delegates/gpu/common/
# memory_management_test.cc), where the paper's authors implemented greedy by size: sizes in
# bytes, lifetimes [first, last]. Optimal arena 96 = the peak at step 5 (8 + 16 + 8 + 64).
TFLITE_COMPLEX = [(32, 0, 1), (32, 1, 4), (8, 2, 5), (16, 3, 5), (8, 4, 5), (64, 5, 7),
                  (8, 6, 8), (8, 7, 8), (16, 8, 9)]


def test_greedy_by_size_on_tflite_complex_records_is_optimal():
    r = [TensorRequest(f"t{i}", *rec) for i, rec in enumerate(TFLITE_COMPLEX)]
    plan = plan_greedy_by_size(r, alignment=8)
    plan.verify()
    assert plan.arena_bytes == plan.lower_bound_bytes == 96
    # TFLite gets (0, 32, 80, 64, 88, 0, 64, 72, 0): its stable sort places t0 before t1 (both
    # 32 bytes); we place the longer-lived t1 first, which swaps those two and nothing else.
    assert [plan.offset_of(f"t{i}") for i in range(9)] == [32, 0, 80, 64, 88, 0, 64, 72, 0]


def test_storage_groups_on_tflite_complex_records():
    r = [TensorRequest(f"t{i}", *rec) for i, rec in enumerate(TFLITE_COMPLEX)]
    plan = plan_storage_groups(r, alignment=8)
    plan.verify()
    # Groups: {t0, t2, t8} 32, {t1, t5} 64, {t3, t7} 16, {t4, t6} 8 -> 120 > 96.
    assert plan.arena_bytes == 120
    assert [p.group for p in plan] == [0, 1, 0, 2, 3, 1, 3, 2, 0]
    assert plan_best(r, alignment=8).algorithm == "greedy_by_size"


def test_storage_groups_lose_when_sizes_change_over_time():
    # One big tensor, then two small ones live together: the groups keep the big buffer and
    # add a second one, offsets let both small tensors fit inside the big one's bytes.
    r = reqs(("big", 1 << 20, 0, 0), ("small1", 1 << 10, 1, 1), ("small2", 1 << 10, 1, 1))
    groups, greedy = plan_storage_groups(r), plan_greedy_by_size(r)
    assert greedy.arena_bytes == greedy.lower_bound_bytes == 1 << 20
    assert groups.arena_bytes == (1 << 20) + (1 << 10)
    assert plan_best(r) == greedy


def test_lifo_policy_takes_the_most_recently_freed_group_like_pytorch():
    # x (128 B) and y (64 B) end at step 0; z (128 B) starts at step 1. PyTorch's
    # assignStorageToManagedTensors pops the group freed last (y's) and must grow it;
    # best fit takes x's group, which already fits.
    r = reqs(("x", 128, 0, 0), ("y", 64, 0, 0), ("z", 128, 1, 1))
    lifo = plan_storage_groups(r, policy=GroupPolicy.LIFO)
    best = plan_storage_groups(r)
    assert lifo["z"].group == lifo["y"].group and lifo.arena_bytes == 256
    assert best["z"].group == best["x"].group and best.arena_bytes == 192
    assert (lifo.algorithm, best.algorithm) == ("storage_groups_lifo", "storage_groups")


def test_long_lived_tensors_placed_first_reach_the_bound_where_largest_first_does_not():
    """DCN-v2's shape at batch 322: ``x0`` and a packed product live across a chain of cross
    layers (equal tensors, three live at once) that the larger, short-lived tensors of the
    deep tower follow. Largest first puts a short-lived tensor low and a long-lived one above
    it: 1.10 × the bound. Longest-lived first leaves the chain the room above them."""
    r = reqs(("x0", 99176, 2, 12), ("packed", 264040, 3, 14), ("c1", 99176, 6, 7),
             ("x5", 99176, 7, 10), ("c2", 99176, 8, 9), ("c3", 99176, 9, 10),
             ("x11", 99176, 10, 13), ("c4", 99176, 11, 12), ("c5", 99176, 12, 13),
             ("x17", 99176, 13, 17), ("deep1", 164864, 14, 15), ("deep2", 82432, 15, 17),
             ("cat", 181608, 17, 18))
    by_size, by_lifetime = plan_greedy_by_size(r), plan_greedy_by_lifetime(r)
    by_lifetime.verify()
    assert by_size.arena_bytes > 1.09 * by_size.lower_bound_bytes
    assert by_lifetime.arena_bytes == by_lifetime.lower_bound_bytes
    assert plan_best(r) == by_lifetime and plan_best(r).algorithm == "greedy_by_lifetime"


def test_plan_best_prefers_greedy_on_a_tie():
    r = reqs(("a", 64, 0, 1), ("b", 64, 1, 2), ("c", 64, 2, 3))
    assert plan_best(r).algorithm == "greedy_by_size"


# -- the verifier -----------------------------------------------------------------------------


def _plan(placements, arena, alignment=64):
    placements = tuple(placements)
    return MemoryPlan(placements, arena, lower_bound([p.request for p in placements], alignment),
                      "hand", alignment)


def test_verifier_catches_tensors_sharing_bytes_while_both_live():
    a, b = TensorRequest("a", 100, 0, 2), TensorRequest("b", 100, 2, 3)
    bad = _plan([Placement(a, 0), Placement(b, 64)], 192)
    with pytest.raises(MemoryPlanError, match=r"'a'.*'b'.*step 2.*\[64, 128\)"):
        bad.verify()
    _plan([Placement(a, 0), Placement(b, 128)], 256).verify()
    # Same bytes, disjoint lifetimes: fine.
    c = TensorRequest("c", 100, 3, 4)
    _plan([Placement(a, 0), Placement(c, 0)], 128).verify()


def test_verifier_catches_misaligned_offsets_arena_overflow_and_a_wrong_lower_bound():
    a = TensorRequest("a", 100, 0, 2)
    with pytest.raises(MemoryPlanError, match="multiple of the alignment 64"):
        _plan([Placement(a, 32)], 256).verify()
    with pytest.raises(MemoryPlanError, match="exceed the arena"):
        _plan([Placement(a, 64)], 128).verify()
    with pytest.raises(MemoryPlanError, match="lower_bound_bytes"):
        MemoryPlan((Placement(a, 0),), 128, 64, "hand", 64).verify()
    with pytest.raises(MemoryPlanError, match="named 'a'"):
        _plan([Placement(a, 0), Placement(a, 128)], 256)


# -- printouts --------------------------------------------------------------------------------


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 1023, 1024, 3_250_586, 25_900_000, 3 << 30)] == \
        ["0 B", "1023 B", "1.0 KiB", "3.1 MiB", "24.7 MiB", "3.0 GiB"]


def test_summary_line():
    r = [TensorRequest(f"t{i}", 1 << 20, i, i + 1) for i in range(3)]
    plan = plan_greedy_by_size(r)
    assert plan.summary() == ("arena 2.0 MiB for 3 tensors (greedy_by_size), "
                              "lower bound 2.0 MiB (1.00x)")
    plan = dataclasses.replace(plan, unplanned_bytes=25_900_000)
    assert plan.summary().endswith("(1.00x), 24.7 MiB unplanned")
    assert plan.offset_of("t2") == 0  # replace keeps the lookups working

    groups = plan_storage_groups(reqs(("big", 1 << 20, 0, 0), ("s1", 1024, 1, 1),
                                      ("s2", 1024, 1, 1)))
    assert groups.summary() == ("arena 1.0 MiB for 3 tensors (storage_groups), "
                                "lower bound 1.0 MiB (1.00x)")


def test_timeline_shows_one_row_per_tensor_by_offset():
    plan = plan_storage_groups(reqs(("a", 1000, 0, 1), ("bb", 1000, 1, 2), ("c", 1000, 2, 3)))
    lines = plan.timeline().splitlines()
    assert lines[0] == plan.summary()
    rows = [line for line in lines if line.rstrip().endswith("|") and "#" in line]
    assert [row.split()[3] for row in rows] == ["a", "c", "bb"]  # offsets 0, 0, 1024
    assert rows[0].split()[:3] == ["0", "1024", "0"]  # offset, aligned size, group
    assert rows[0].endswith("|##..|") and rows[1].endswith("|..##|")
    assert rows[2].split()[:3] == ["1024", "1024", "1"] and rows[2].endswith("|.##.|")
    assert "peak 2.0 KiB live at step 1" in lines[-1]


def test_timeline_fits_the_width_and_compresses_many_steps():
    r = [TensorRequest(f"a_rather_long_value_name_{i}", 64 * (i + 1), 3 * i, 3 * i + 4)
         for i in range(60)]
    text = plan_greedy_by_size(r).timeline(width=80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines[1:])
    assert "group" not in lines[2]  # greedy plans have no groups
    assert len([line for line in lines if "#" in line]) == 60
    assert "steps; peak" in lines[-1]
    assert plan_greedy_by_size([]).timeline().splitlines()[-1] == "(no tensors)"


# -- the PNG ----------------------------------------------------------------------------------


@pytest.mark.parametrize("planner", [plan_greedy_by_size, plan_storage_groups])
def test_plot_writes_a_png(tmp_path, planner):
    from matplotlib.image import imread

    plan = planner(random_requests(random.Random(3)))
    path = tmp_path / "plan.png"
    plan.plot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = imread(path).shape[:2]
    assert width > 800 and height > 500

    empty = tmp_path / "empty.png"
    planner([]).plot(empty)
    assert empty.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- random request sets ----------------------------------------------------------------------


request_sets = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 100), st.integers(0, 100)),
    min_size=1, max_size=60,
).map(lambda specs: [TensorRequest(f"t{i}", size, min(a, b), max(a, b))
                     for i, (size, a, b) in enumerate(specs)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request_sets, st.sampled_from([1, 8, 64]))
def test_random_plans_verify_and_respect_the_lower_bound(requests, alignment):
    greedy = plan_greedy_by_size(requests, alignment)
    lifetime = plan_greedy_by_lifetime(requests, alignment)
    groups = plan_storage_groups(requests, alignment)
    lifo = plan_storage_groups(requests, alignment, policy=GroupPolicy.LIFO)
    for plan in (greedy, lifetime, groups, lifo):
        plan.verify()
        assert plan.arena_bytes >= plan.lower_bound_bytes == lower_bound(requests, alignment)
        assert len(plan) == len(requests)
    best = plan_best(requests, alignment)
    assert best.arena_bytes == min(greedy.arena_bytes, lifetime.arena_bytes, groups.arena_bytes)
    # Steer the search towards the sets greedy packs worst (shown by
    # --hypothesis-show-statistics); nothing is asserted beyond the bound.
    target(greedy.ratio, label="greedy arena / lower bound")
    target(groups.ratio, label="storage groups arena / lower bound")


def test_mean_arena_over_lower_bound_on_random_sets():
    """Measured, not asserted (run with -s to see the numbers)."""
    report = []
    for short_lived in (False, True):
        rng = random.Random(2024)
        ratios: dict[str, list[float]] = {"greedy_by_size": [], "storage_groups": [],
                                          "storage_groups_lifo": [], "best": []}
        for _ in range(200):
            r = random_requests(rng, short_lived)
            ratios["greedy_by_size"].append(plan_greedy_by_size(r).ratio)
            ratios["storage_groups"].append(plan_storage_groups(r).ratio)
            ratios["storage_groups_lifo"].append(
                plan_storage_groups(r, policy=GroupPolicy.LIFO).ratio)
            ratios["best"].append(plan_best(r).ratio)
        kind = "short lifetimes" if short_lived else "uniform intervals"
        for name, values in ratios.items():
            assert min(values) >= 1.0
            report.append(f"{kind:>17} {name:>20}: mean {statistics.mean(values):.3f}  "
                          f"median {statistics.median(values):.3f}  max {max(values):.3f}  "
                          f"optimal in {sum(v == 1.0 for v in values)}/200")
    print("\narena / lower bound over 200 random request sets (1-60 tensors, 0..1e6 B):")
    print("\n".join(report))
