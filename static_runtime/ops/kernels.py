"""Kernel choice by measurement: candidates timed on this CPU, the fastest kept and remembered.

Which GEMM kernel is fastest depends on the shape *and* the CPU: on an AMD EPYC (Zen 5) ATen's
default (MKL) runs a 32 × 768 · 768 × 3072 product at 1.6 ms where oneDNN with a prepacked
weight takes 0.65, yet at one row MKL takes 3 µs and oneDNN 13; on Intel CPUs MKL is the
fast one. No fixed threshold is right, so — as FFTW's *wisdom* does — the candidates are
timed on the machine itself, on the node's real shapes and thread count, and the choice is
remembered on disk for the next process.

``KernelChooser.choose(key, make, default)``: ``key`` is what fixes the answer apart from the
machine (operator, shapes, dtype, strides, epilogue, thread count); the CPU (model name,
family, model, ATen's ISA level) and torch's version are added here. A choice found in the
cache (memory, then disk) is taken as is: nothing is timed. Otherwise ``make()`` gives the
candidates, zero-argument callables that compute the same result; each is run once and
compared with the default's result (a candidate that raises or disagrees beyond float
tolerance is dropped, so a wrong kernel never serves), then timed in alternating rounds
inside ``NODE_BUDGET_S``; the fastest best-of time wins, if it beats the default by
``MIN_GAIN`` (else the default stays). A chooser spends at most
``MODEL_BUDGET_S`` in all (one per ``StaticModule``); past that, the default serves, not
remembered.

The disk cache (``ops/kernel_cache.py``): a snapshot and a journal in
``$STATIC_RUNTIME_CACHE_DIR`` (default ``~/.cache/static_runtime/``), read once per process; a
new choice appends one line to the journal.
"""

from __future__ import annotations

import math
import platform
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from static_runtime.ops.kernel_cache import DiskCache, disk_cache

#: Time spent measuring one node at one shape, seconds (more only where three rounds of its
#: candidates take longer: a product of milliseconds per call).
NODE_BUDGET_S = 0.02
#: Time one chooser (one ``StaticModule``) may spend measuring in all, warm-ups included.
MODEL_BUDGET_S = 1.0
#: A timed sample runs a candidate this long at least (a loop of calls for small kernels), so
#: the clock's own cost (~0.1 µs) does not decide between 3 µs kernels.
_MIN_SAMPLE_S = 20e-6
#: Fewest and most timed rounds per candidate.
_MIN_ROUNDS, _MAX_ROUNDS = 3, 15
#: Measuring stops at this many times its budget even before ``_MIN_ROUNDS`` rounds.
_HARD_FACTOR = 3
#: Another kernel replaces the default only if it takes at most (1 - this) of its time.
MIN_GAIN = 0.05
#: Candidates that make something for each shape they meet, timed in their first call there:
#: oneDNN compiles a primitive per shape (0.3–0.7 ms for a product of 50 µs).
PER_SHAPE_SETUP = ("onednn",)
#: ``Choice.interim``'s count where the interim kernel is as fast as the chosen one: it serves
#: a new size for good (the chosen one won by the default's stickiness, ``pick``)
FOR_GOOD = 1 << 62


@dataclass(frozen=True)
class Choice:
    """The kernel chosen for one key, and why."""

    #: the candidate's name ("aten", "onednn", "mkl", ...)
    name: str
    #: best-of times of the candidates that ran, µs (empty when nothing was measured)
    timings_us: dict[str, float] = field(default_factory=dict)
    #: "measured", "cached" or "default (...)" saying why nothing was measured
    how: str = "measured"
    #: per candidate, what its first call at the measured size took beyond its best time,
    #: µs: work a kernel does once per shape (oneDNN makes a primitive for each, ~0.3 ms)
    setup_us: dict[str, float] = field(default_factory=dict)

    def describe(self, per_shape: tuple[str, ...] = ()) -> str:
        """The choice and its timings; with ``per_shape`` (see ``interim``), what serves a
        new size first where that is another kernel."""
        times = ", ".join(f"{n} {t:.1f}" for n, t in sorted(self.timings_us.items(),
                                                            key=lambda kv: kv[1]))
        later = self.interim(per_shape)
        calls = "every call" if later and later[1] == FOR_GOOD else \
            f"its first {later[1]} calls" if later else ""
        then = (f"; a new size: {later[0]} for {calls} "
                f"({self.name}'s first call there {self.setup_us[self.name]:.0f} µs more)"
                if later else "")
        return f"{self.name} ({self.how}{'; µs: ' + times if times else ''}{then})"

    def interim(self, per_shape: tuple[str, ...] = ()) -> tuple[str, int] | None:
        """Where a choice shared by sizes (a bucket) costs setup at each new size, which
        kernel serves a new size first, and after how many calls the chosen one takes over:
        the fastest candidate without such setup serves, if its call costs less than the
        chosen one's first, until the calls made there would have repaid the chosen one's
        setup by what it saves a call. ``per_shape``: the candidates whose setup recurs at
        each new size (the others' first call is timed too, but what it costs beyond the
        next — a library's first use, cold code — is paid once, not per size). A candidate
        in ``per_shape`` never serves in the meantime: at a new size it pays its own setup,
        whatever its first call cost where it was measured (there another candidate may
        have made the very primitive it uses: ATen's convolution runs oneDNN's). None where
        the chosen one has no such setup, or nothing was measured."""
        times = self.timings_us
        setup = {n: t for n, t in self.setup_us.items() if n in per_shape}
        if self.name not in times or self.name not in setup:
            return None
        others = [n for n in times if n not in per_shape]
        if not others:
            return None
        first = min(others, key=times.__getitem__)
        saved = times[first] - times[self.name]
        if times[first] >= times[self.name] + setup[self.name]:
            return None
        if saved <= 0:  # (as fast, and no setup: kept where the default's stickiness chose)
            return first, FOR_GOOD
        return first, math.ceil(setup[self.name] / saved)


def cpu_identity() -> str:
    """What about this machine changes which kernel is fastest: CPU vendor, model, ISA level
    ATen dispatches to, and the torch build."""
    fields_ = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in ("vendor_id", "cpu family", "model", "model name") \
                        and name not in fields_:
                    fields_[name] = value.strip()
                if not line.strip() and fields_:
                    break
    except OSError:
        fields_["machine"] = platform.machine() + " " + platform.processor()
    parts = [fields_.get(k, "?") for k in ("vendor_id", "cpu family", "model", "model name")]
    if "machine" in fields_:
        parts.append(fields_["machine"])
    parts.append(torch.backends.cpu.get_cpu_capability())
    parts.append("torch " + torch.__version__)
    return " | ".join(parts)


def _native_digest() -> str:
    from static_runtime.ops import ckernels  # (it imports this module)

    return ckernels.source_digest()


Candidate = Callable[[], torch.Tensor]


class KernelChooser:
    """Chooses kernels for one ``StaticModule`` (thread-safe), within its time budget.

    ``measured`` counts the keys it timed, ``cached`` those it found remembered; ``spent_s``
    is the time measuring took."""

    def __init__(self, cache: DiskCache | None = None, *, node_budget_s: float = NODE_BUDGET_S,
                 model_budget_s: float = MODEL_BUDGET_S):
        self.cache = cache if cache is not None else disk_cache()
        self.cache.load()
        self.cpu = cpu_identity()
        self.node_budget_s = node_budget_s
        self.model_budget_s = model_budget_s
        self.spent_s = 0.0
        self.measured = 0
        self.cached = 0
        self.skipped = 0
        self._lock = threading.Lock()  # the counters
        self._measuring = threading.Lock()  # one measurement at a time

    def full_key(self, key: str, names: tuple[str, ...]) -> str:
        """The cache key: ``key``, the candidates (a choice made without a kernel that is
        available now is not the choice among all of them; with our own kernels among them,
        the digest of their sources: a choice made with other versions of them neither),
        the thread count and the CPU."""
        ours = f" | native={_native_digest()}" if "native" in names else ""
        return (f"{key} | candidates={','.join(sorted(names))}{ours} | "
                f"threads={torch.get_num_threads()} | cpu={self.cpu}")

    def lookup(self, key: str, names: tuple[str, ...]) -> Choice | None:
        """The remembered choice for ``key`` among ``names``, else None."""
        entry = self.cache.get(self.full_key(key, names))
        if not entry or entry.get("choice") not in names:
            return None
        with self._lock:
            self.cached += 1
        return Choice(entry["choice"], dict(entry.get("us", {})), "cached",
                      dict(entry.get("setup_us", {})))

    def choose(self, key: str, names: tuple[str, ...],
               make: Callable[[], dict[str, Candidate]], default: str) -> Choice:
        """The fastest of the candidates ``make()`` returns (``names`` are the ones it may
        return; ``default`` is among them and is the reference the others are checked
        against). Measures only on a cache miss and while the budget lasts. A call that
        finds another measuring waits for it (then looks again): serving the default
        meanwhile would give that call other bits than the same call gives later."""
        remembered = self.lookup(key, names)
        if remembered is not None:
            return remembered
        # STEPS (``measuring``) first, then this chooser's own: one order for every thread
        with measuring(), self._measuring:
            remembered = self.lookup(key, names)  # (measured by the call waited for)
            if remembered is not None:
                return remembered
            if self.spent_s >= self.model_budget_s:
                with self._lock:
                    self.skipped += 1
                return Choice(default, {}, "default (measuring budget spent)")
            start = time.perf_counter()
            try:
                budget = min(self.node_budget_s, self.model_budget_s - self.spent_s)
                timings, dropped, firsts = _measure(make(), default, budget)
            finally:
                self.spent_s += time.perf_counter() - start
                self.measured += 1
        best = pick(timings, default)
        entry = {"choice": best, "us": {n: round(t, 2) for n, t in timings.items()},
                 "setup_us": {n: round(max(0.0, firsts[n] - t), 1) for n, t in timings.items()}}
        if dropped:
            entry["dropped"] = dropped
        self.cache.put(self.full_key(key, names), entry)
        return Choice(best, entry["us"], "measured", entry["setup_us"])

    def summary(self) -> str:
        return (f"kernel choice: {self.measured} measured, {self.cached} from the cache, "
                f"{self.skipped} past the budget; {self.spent_s * 1e3:.0f} ms measuring "
                f"(cache {self.cache.path})")


#: Held by a background build of ours while it runs a step (``runtime/hot.py``), and by a
#: measurement while it times: a measurement waits for the step under way to end, and the
#: build waits at its next step for the measurement to end. Reentrant: a build that measures
#: (a verifying call on the builder thread) already holds it.
STEPS = threading.RLock()


@contextmanager
def measuring():
    """Marks a measurement under way: it waits for a step of our background work (shape
    programs and specialised code built on a builder thread, ``runtime/hot.py``) to end, and
    that work waits until the measurement ends. Sharing the GIL with a build, a candidate's
    samples took up to twice their time — and one long step (compiling generated code, ~15
    ms) could cover every sample: a GRU measured 12 × its time and lost to ATen's, a choice
    then remembered on disk."""
    with STEPS:
        yield


class PerShape:
    """The kernel choices of one measured node, keyed by ``(input shape, thread count)``:
    ``chosen`` maps a key to the chosen kernel's name (the call path's lookup),
    ``choose`` makes the choice for a key seen the first time, and ``expose`` gives the
    node's function what ``describe()`` and the benchmarks read."""

    def __init__(self, chooser: KernelChooser, names: tuple[str, ...], default: str = "aten"):
        self.chooser, self.names, self.default = chooser, names, default
        self.chosen: dict[tuple, str] = {}
        self.choices: dict[tuple, Choice] = {}

    def choose(self, key: tuple, problem: str, make: Callable[[], dict[str, Candidate]]
               ) -> str:
        """The kernel for ``key``, measured (or remembered) now, and kept."""
        choice = self.chooser.choose(problem, self.names, make, self.default)
        self.chosen[key] = choice.name
        self.choices[key] = choice
        return choice.name

    def remembered(self, key: tuple, problem: str) -> str | None:
        """The kernel for ``key`` if the chooser remembers ``problem``'s choice (kept), else
        None: nothing is measured."""
        choice = self.chooser.lookup(problem, self.names)
        if choice is None:
            return None
        self.chosen[key] = choice.name
        self.choices[key] = choice
        return choice.name

    def expose(self, fn: Callable, problem: tuple, sizes: tuple[str, ...] | None = None
               ) -> Callable:
        """``fn`` with ``status()`` (each shape's choice and its timings), ``choices`` and
        ``problem`` (what the node computes). ``sizes`` names the numbers of a key's size
        where it is not the input's shape (a bucket: ``("rows<=", "h=")``)."""
        choices = self.choices

        def where(s) -> str:
            if sizes is None:
                return f"x={tuple(s)}"
            return " ".join(f"{name}{value}" for name, value in zip(sizes, s, strict=True))

        def status() -> str:
            if not choices:
                return "no kernel chosen yet"
            return "; ".join(f"{where(s)} threads={t}: {ch.describe()}"
                             for (s, t), ch in choices.items())

        fn.status = status  # type: ignore[attr-defined]
        fn.choices = choices  # type: ignore[attr-defined]
        fn.problem = problem  # type: ignore[attr-defined]
        return fn


def size_bucket(count: int) -> int:
    """The sizes that share a measured choice: those up to the same power of two (5…8,
    9…16, ..., 129…256) — a GEMM's row counts, a convolution's pixels (N × H × W). Traffic of
    every size brings a new one on most calls (a length, a batch size, an image size);
    measuring each on its first call took ~4 ms a GEMM node. Within a bucket the kernels'
    ratio moves little, and a choice must beat the default by ``MIN_GAIN`` where it was
    measured."""
    return 1 << (count - 1).bit_length() if count > 1 else 1


def pick(timings_us: dict[str, float], default: str) -> str:
    """The fastest candidate — but the default unless another beats it by ``MIN_GAIN``: a
    tie within measuring noise is no reason to leave the kernel that runs without measuring
    (in a model, oneDNN's allocation and copy cost more than in a loop over one product)."""
    best = min(timings_us, key=timings_us.get)
    if best != default and default in timings_us \
            and timings_us[best] > timings_us[default] * (1 - MIN_GAIN):
        return default
    return best


def _measure(candidates: dict[str, Candidate], default: str, budget_s: float
             ) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
    """Best-of times in µs of the candidates that agree with ``default``'s result, why
    the others were dropped, and each one's first call in µs."""
    if default not in candidates:
        raise ValueError(f"the default kernel {default!r} is not among the candidates "
                         f"{sorted(candidates)}")
    clock = time.perf_counter
    start = clock()
    deadline = start + budget_s
    # Past this, not even the fewest rounds are waited for (a machine so loaded that calls of
    # microseconds take milliseconds must not hold a request for seconds).
    hard_deadline = start + _HARD_FACTOR * budget_s
    runs: dict[str, Candidate] = {}
    loops: dict[str, int] = {}
    dropped: dict[str, str] = {}
    firsts: dict[str, float] = {}
    reference = None
    for name in (default, *[n for n in candidates if n != default]):
        fn = candidates[name]
        try:
            t0 = clock()
            result = fn()
            firsts[name] = (clock() - t0) * 1e6
        except RuntimeError as e:  # a kernel that refuses these arguments
            if name == default:
                raise
            dropped[name] = f"raised {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            continue
        # Calls per sample, from a second call: a first call that initialised a library
        # (MKL's first product takes milliseconds) left one call per sample, and one cold
        # call timed alone reads ~1 µs slower than a loop's calls — enough to lose a tie of
        # 1–2 µs kernels to one timed in a loop.
        t0 = clock()
        fn()
        loops[name] = max(1, int(_MIN_SAMPLE_S / max(clock() - t0, 1e-9)))
        if name == default:
            reference = result.clone()
        elif not _agrees(result, reference):
            dropped[name] = "disagreed with the default beyond float tolerance"
            continue
        runs[name] = fn
    # Alternating rounds, so that a burst of load elsewhere hits every candidate alike; the
    # best sample of each is its time (load only ever adds). At least _MIN_ROUNDS rounds, or
    # one stalled sample could decide.
    best = {name: float("inf") for name in runs}
    for round_ in range(_MAX_ROUNDS):
        for name, fn in runs.items():
            n = loops[name]
            t0 = clock()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (clock() - t0) / n)
        now = clock()
        if now >= hard_deadline or (round_ + 1 >= _MIN_ROUNDS and now >= deadline):
            break
    return {n: t * 1e6 for n, t in best.items()}, dropped, firsts


def _agrees(result: torch.Tensor, reference: torch.Tensor) -> bool:
    """Equal to float tolerance: a GEMM summed in another order differs by rounding only."""
    if not isinstance(result, torch.Tensor) or result.shape != reference.shape \
            or result.dtype != reference.dtype:
        return False
    scale = max(1.0, float(reference.abs().max())) if reference.numel() else 1.0
    return bool(torch.allclose(result, reference, rtol=1e-3, atol=1e-4 * scale,
                               equal_nan=True))
