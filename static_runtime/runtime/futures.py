"""Futures and launchers: how ``prim::fork`` and ``run_async`` run work on other threads.

A *launcher* is any callable that takes a zero-argument function and arranges for it to be
called, on whatever thread it likes (``concurrent.futures.Executor.submit`` is one). The
default is one thread pool shared by the process, of ``torch.get_num_interop_threads()``
workers, as PyTorch's inter-op pool is.

A fork's result is a ``Fork``, a ``torch.futures.Future`` whose ``wait()`` runs the forked
function on the waiting thread if no launcher thread has started it yet. So a fork never
waits for a thread that is itself waiting (forks of forks on a pool of two threads, or a
launcher that runs nothing until later), and a fork waited on at once costs no thread hop.
Exceptions raised by the forked function are re-raised by ``wait()`` as they were: same
object, same message.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import torch

Launcher = Callable[[Callable[[], None]], Any]

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
#: The launcher of the run (or fork) this thread is executing, for the forks it makes.
_current = threading.local()


def default_launcher() -> Launcher:
    """The process-wide launcher: a thread pool sized from ``torch.get_num_interop_threads()``,
    created on first use."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=max(1, torch.get_num_interop_threads()),
                                           thread_name_prefix="static_runtime")
    return _pool.submit


def check_launcher(launcher: Any) -> Launcher:
    """``launcher``, or the default for None; a clear error for anything not callable."""
    if launcher is None:
        return default_launcher()
    if not callable(launcher):
        raise TypeError(f"launcher must be a callable taking a zero-argument function, got "
                        f"{type(launcher).__name__}")
    return launcher


def current_launcher() -> Launcher:
    """The launcher forks made on this thread use: the one of the enclosing ``run_async``
    (or fork), else the default."""
    launcher = getattr(_current, "launcher", None)
    return launcher if launcher is not None else default_launcher()


@contextmanager
def using_launcher(launcher: Launcher | None) -> Iterator[None]:
    """Within the block, forks made on this thread go to ``launcher``."""
    previous = getattr(_current, "launcher", None)
    _current.launcher = launcher
    try:
        yield
    finally:
        _current.launcher = previous


class Fork(torch.futures.Future):
    """The future of a forked function: runs ``fn(*args)`` once, on the first thread to get
    to it (a launcher thread via ``run``, or a thread calling ``wait``)."""

    def __init__(self, fn: Callable[..., Any], args: tuple, launcher: Launcher):
        super().__init__()
        self._fn = fn
        self._args = args
        self._launcher = launcher
        # Present until some thread claims the work (``list.pop`` is atomic).
        self._unclaimed = [True]

    def run(self) -> None:
        """Run the forked function unless another thread already did (or is doing so)."""
        try:
            self._unclaimed.pop()
        except IndexError:
            return
        fn, args = self._fn, self._args
        self._fn = self._args = None  # the inputs need not outlive the work
        mode = torch._C._InferenceMode(True)  # thread-local: the forking thread's mode
        try:
            with using_launcher(self._launcher):
                result = fn(*args)
        except BaseException as e:  # noqa: BLE001  (handed to whoever waits)
            self.set_exception(e)
            return
        finally:
            del mode
        self.set_result(result)

    def wait(self) -> Any:
        self.run()
        return super().wait()


def fork(fn: Callable[..., Any], *args: Any) -> Fork:
    """Start ``fn(*args)`` on this thread's launcher; its ``Fork`` future."""
    launcher = current_launcher()
    future = Fork(fn, args, launcher)
    launcher(future.run)
    return future


def wait(future: Any) -> Any:
    """``aten::wait``: the value of a future (a ``Fork`` or any ``torch.futures.Future``),
    re-raising the exception it completed with."""
    return future.wait()
