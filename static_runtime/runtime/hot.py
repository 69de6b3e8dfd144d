"""Which input signatures are hot: specialised code is built only for those, off the
request path.

Code specialised on an input signature folds what the signature fixes (sizes, the branches
they decide, shape lists), which pays on every call of that signature — but making it costs
a run over the graph on meta tensors and a code generation, tens of milliseconds on a small
transformer. Traffic of every size (a text service sees a new length almost every call)
would pay that on most calls and gain little. So a signature gets its own code only once it
is *hot* — it made at least ``threshold`` of the last ``window`` calls — and that code is
built on a background thread while the shared, size-generic code keeps serving; the next
call of the signature after it is ready takes it. A model called at one shape is hot after
``threshold`` calls; a stream of many sizes never makes any of them hot.

Builds share the GIL with the calls, so they give way to them: every call marks itself
running (``CALLS``), and a build meeting a running call at a pause point (``_pause``: between
nodes, fake-tensor operators, values) waits, working in short slices until calls stop.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
import warnings
import weakref
from collections import Counter, deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor

from static_runtime.ops.kernels import STEPS
from static_runtime.runtime.torch_threads import separate_pre_dispatch_modes

#: How many recent calls the counts are over.
WINDOW = 64

#: How many calls in all a signature served by a shape program's code makes before it may get
#: code of its own. That code keeps per layout what the signature decides (``_memo``), and is
#: within 2–6 % of code specialised on the signature (dcn_v2, BERT; BENCHMARKS.md), while a
#: build costs the request thread ~15 ms (the builder shares the GIL): it pays after some
#: thousands of calls, not after a few in a stream of many sizes.
PROGRAM_CALLS = 2048


#: the most keys whose calls in all are counted
_MAX_TOTALS = 4096


class HotSignatures:
    """Counts of signatures over the last ``window`` calls (thread-safe)."""

    def __init__(self, threshold: int, window: int = WINDOW):
        if threshold < 1:
            raise ValueError("a signature is hot after at least one call")
        self.threshold = threshold
        self.window = window
        self._recent: deque[Hashable] = deque()
        self._counts: Counter[Hashable] = Counter()
        #: calls in all, of the keys counted with ``after``
        self._totals: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def note(self, key: Hashable, after: int = 0) -> bool:
        """Count one call with signature ``key``; whether ``key`` is now hot (and, with
        ``after``, has made at least that many calls in all: until then its calls are only
        counted, not entered in the window)."""
        if after:
            # (unlocked: two threads may lose a count, which only delays a build)
            totals = self._totals
            if len(totals) >= _MAX_TOTALS and key not in totals:
                totals.clear()  # (ids of layouts long gone: counting starts over)
            total = totals[key] = totals.get(key, 0) + 1
            if total < after:
                return False
        with self._lock:
            self._recent.append(key)
            self._counts[key] += 1
            if len(self._recent) > self.window:
                old = self._recent.popleft()
                self._counts[old] -= 1
                if not self._counts[old]:
                    del self._counts[old]
            return self._counts[key] >= self.threshold


class BackgroundBuilder:
    """Runs builds one at a time on a thread of its own; a build asked for while the same one
    is queued or running is not queued again. A build that raises is reported once as a
    ``RuntimeWarning`` (the caller goes on with what it has). An ``urgent`` builder's builds
    go first: other builders wait at their pause points while one is queued or running (a
    hot signature's code makes every call faster; a shape program serves sizes not yet
    seen)."""

    def __init__(self, name: str, urgent: bool = False):
        self._name = name
        self.urgent = urgent
        self._pool: ThreadPoolExecutor | None = None
        self._pending: set[Hashable] = set()
        self._lock = threading.Lock()
        self.failures: dict[Hashable, str] = {}
        _BUILDERS.add(self)

    def submit(self, key: Hashable, build: Callable[[], object]) -> None:
        with self._lock:
            if key in self._pending or key in self.failures:
                return
            self._pending.add(key)
            if self.urgent:
                _URGENT.append(None)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix=self._name)
        try:
            self._pool.submit(self._run, key, build)
        except RuntimeError:  # the interpreter is shutting down: nothing left to build for
            with self._lock:
                self._pending.discard(key)
                if self.urgent:
                    _URGENT.pop()

    def _run(self, key: Hashable, build: Callable[[], object]) -> None:
        _ON_BUILDER.active = True  # (the pool's one thread: it only ever runs builds)
        _ON_BUILDER.urgent = self.urgent
        _quiet_torch_logs_on_builders()
        separate_pre_dispatch_modes()  # (done at import unless a trace was running then)
        try:
            with STEPS, _WHILE_BUILDING:  # (STEPS: released between steps)
                build()
        except Exception as e:  # noqa: BLE001  (reported; the generic code goes on serving)
            self.failures[key] = f"{type(e).__name__}: {e}"
            warnings.warn(f"static_runtime: building specialised code failed ({e}); the "
                          "generic code goes on serving that signature", RuntimeWarning,
                          stacklevel=1)
        finally:
            with self._lock:
                self._pending.discard(key)
                if self.urgent:
                    _URGENT.pop()

    def wait(self) -> None:
        """Block until every build asked for so far has finished, and any build those asked
        for in turn (tests, benchmarks)."""
        while True:
            with self._lock:
                pool = self._pool
            if pool is None:
                return
            pool.submit(lambda: None).result()
            with self._lock:
                if not self._pending:
                    return


class _WhileBuilding:
    """Process-wide settings while any build runs, restored (unless the process changed them
    meanwhile) once none does:

    * the cyclic garbage collector's oldest generation waits: a build makes objects by the
      hundred thousand (expressions over symbolic sizes, fake tensors), which had the
      collector scan every object of the process every few hundred milliseconds — 80–140 ms
      each, holding the GIL, in the first second of a module called back to back. The young
      generations are still collected (a build's garbage dies young);
    * the interpreter's switch interval is ``SWITCH_S``, not 5 ms: where a build runs between
      two pause points, a call whose kernel released the GIL gets it back that much sooner
      (a slice of the build is spread over several calls' kernels, not one call's)."""

    DEFERRED = 1_000_000
    SWITCH_S = 0.0005

    def __init__(self):
        self._lock = threading.Lock()
        self._running = 0
        self._threshold: int | None = None
        self._interval: float | None = None

    def __enter__(self) -> None:
        with self._lock:
            self._running += 1
            if self._running == 1:
                first, second, third = gc.get_threshold()
                if third and third < self.DEFERRED:
                    self._threshold = third
                    gc.set_threshold(first, second, self.DEFERRED)
                interval = sys.getswitchinterval()
                if interval > self.SWITCH_S:
                    self._interval = interval
                    sys.setswitchinterval(self.SWITCH_S)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._running -= 1
            if self._running:
                return
            if self._threshold is not None:
                first, second, third = gc.get_threshold()
                if third == self.DEFERRED:
                    gc.set_threshold(first, second, self._threshold)
                self._threshold = None
            if self._interval is not None:
                if sys.getswitchinterval() == self.SWITCH_S:
                    sys.setswitchinterval(self._interval)
                self._interval = None


_WHILE_BUILDING = _WhileBuilding()

#: modules a preparation must have imported for ``settle_imports`` to collect after it
IMPORTS_WORTH_COLLECTING = 50


def settle_imports(modules_before: int) -> bool:
    """After preparing a module: if the preparation imported at least
    ``IMPORTS_WORTH_COLLECTING`` modules (``len(sys.modules)`` was ``modules_before``), run
    the cyclic collector's full collection now, on the thread preparing, and say so.

    The first module a process prepares imports much of PyTorch that a plain ``import
    torch`` does not (``torch._dynamo``, FX's symbolic shapes, sympy: ~780 modules, ~130 k
    objects). Surviving the young collections, they make a full collection due — one that
    scans every object of the process (~340 k: 180 ms, GIL held) — which Python then starts
    at some later allocation: on a request, once the background builds end
    (``benchmarks/gc_pauses.py``: one 190 ms call in 3,000). Collected here, it costs the
    preparation that time once and the calls none; later modules import nothing and
    collect nothing. Not if the process disabled the collector."""
    if len(sys.modules) - modules_before < IMPORTS_WORTH_COLLECTING or not gc.isenabled():
        return False
    gc.collect()
    return True


def yield_to_requests() -> Callable[[], None]:
    """What a long build calls between steps: on a builder's thread, a pause that lets a
    thread waiting for the GIL (a request) run now, and waits while calls run once the
    build's slice is spent (``SLICE_S``, ``GIVE_WAY_S``), so a build costs a call at most
    the rest of a slice; on any other thread (a build a request waits for) nothing."""
    return _pause if getattr(_ON_BUILDER, "active", False) else _nothing


def _pause() -> None:
    # Between two steps of a build: a kernel being timed on another thread runs now, not
    # under a step (``ops/kernels.measuring``); calls running in the process have the GIL
    # to themselves but for a slice of the build's every ``GIVE_WAY_S + SLICE_S``.
    STEPS.release()
    try:
        if _URGENT and not _ON_BUILDER.urgent:
            # (bounded: an urgent build needs STEPS, which a step that measured holds twice)
            deadline = time.perf_counter() + URGENT_WAIT_S
            while _URGENT and time.perf_counter() < deadline:
                time.sleep(POLL_S)
        if CALLS and time.perf_counter() - _slice[0] >= SLICE_S:
            deadline = time.perf_counter() + (
                URGENT_GIVE_WAY_S if _ON_BUILDER.urgent else GIVE_WAY_S)
            while CALLS and time.perf_counter() < deadline:
                time.sleep(POLL_S)
            _slice[0] = time.perf_counter()
        else:
            time.sleep(0)
    finally:
        STEPS.acquire()


#: One element per call running in the process (``StaticRuntime.__call__`` appends one and
#: pops one, each atomic under the GIL): builds give way while it is not empty.
CALLS: list[None] = []

#: While calls keep running, builds work in slices of ``SLICE_S`` (ended at the first pause
#: point after it) with ``GIVE_WAY_S`` between them (less as soon as no call is running):
#: a call waits for at most the rest of a slice, and about one call in
#: ``GIVE_WAY_S / call time`` meets one. Builds take ~1 / 11 of the time of a busy process;
#: of an idle one, all of it. ``POLL_S``: how often a build waiting looks again.
SLICE_S = 0.002
GIVE_WAY_S = 0.02
#: an urgent build's (a hot signature's code, which every call then runs faster): ~1/3 of
#: the time of a busy process
URGENT_GIVE_WAY_S = 0.005
POLL_S = 0.0005
#: one element per build of an urgent builder queued or running; how long at most another
#: build waits for them at one pause point
_URGENT: list[None] = []
URGENT_WAIT_S = 0.05
#: when the current slice began (one for all builders: ``STEPS`` lets one run at a time)
_slice = [0.0]


def _nothing() -> None:
    pass


#: ``active`` on the threads that run ``BackgroundBuilder`` builds
_ON_BUILDER = threading.local()

#: PyTorch's loggers that report what a build's fake or meta run refused, with a traceback.
_TORCH_LOGGERS = ("torch._subclasses.fake_tensor", "torch.fx.experimental.symbolic_shapes",
                  "torch._guards", "torch.fx.experimental.recording")


class _NotOnBuilders(logging.Filter):
    """Drops PyTorch's log records made on a builder's thread. A build that fails is reported
    by the builder itself (``failures``, ``describe()``); PyTorch's own record of it printed an
    error with a traceback to the user's stderr, and formatting that traceback parses source
    (Python 3.11's caret anchors) — which, on CPython before 3.12, corrupts an ``ast.parse``
    running at the same moment on another thread (``SystemError: AST constructor recursion
    depth mismatch``: ``torch.jit.script`` on the request thread failed so)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_ON_BUILDER, "active", False)


_FILTER = _NotOnBuilders()


def _quiet_torch_logs_on_builders() -> None:
    for name in _TORCH_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


#: Every live builder, for ``wait_for_builds``.
_BUILDERS: weakref.WeakSet[BackgroundBuilder] = weakref.WeakSet()


def wait_for_builds() -> None:
    """Block until every build any module asked for so far has finished: benchmarks call it
    after their warm-up, so that timed calls run the code a hot signature gets."""
    for builder in list(_BUILDERS):
        builder.wait()
