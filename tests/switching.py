"""Test workers run in threads that switch between (nearly) any two bytecodes, so that a
race between them shows in a short test."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any


def run_switching(target: Callable[..., Any], args: Iterable[tuple]) -> None:
    """One thread per ``args`` tuple running ``target(*args)``, with a switch interval of a
    microsecond (restored after); returns once all have ended."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=target, args=a) for a in args]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
