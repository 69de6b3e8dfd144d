"""Silencing C++ code's output (exporters, the profiler) for a block."""

from __future__ import annotations


class _quiet_fds:
    """Silence file descriptors ``fds`` (C++ code's output, which ``sys.stdout`` and
    ``sys.stderr`` redirection cannot reach) for a block; Python's buffers are flushed first
    so that nothing written before is lost."""

    def __init__(self, *fds: int):
        self._fds = fds or (2,)

    def __enter__(self):
        import os
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        self._null = os.open(os.devnull, os.O_WRONLY)
        self._saved = []
        for fd in self._fds:
            self._saved.append(os.dup(fd))
            os.dup2(self._null, fd)
        return self

    def __exit__(self, *exc):
        import os

        for fd, saved in zip(self._fds, self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        os.close(self._null)
        return False


def _quiet_stderr() -> _quiet_fds:
    """Silence file descriptor 2 (the profiler's C++ start/stop log lines) for a block."""
    return _quiet_fds(2)
