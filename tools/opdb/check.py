"""One case checked: our runtime against the TorchScript interpreter, call by call.

``check_case(oracle, build, inputs)`` builds ours (``build()``), then makes the calls of
``CALLS``. Each call gets its own copies of the input tensors (same sizes, strides and
offsets) for ours and for the oracle, so nothing is shared between calls or runtimes, and
checks in this order:

* ``error`` — ours raised where the oracle did not (building ours counts as call -1);
  where the oracle raises, ours must raise too (any exception; counted as *both raise*);
* ``wrong`` — our result differs from the oracle's (``assert_close``, NaNs equal, dtypes
  and container structure), or ours returned where the oracle raised;
* ``input_changed`` — our inputs after the call differ from the oracle's inputs after it
  (unchanged, unless the op itself writes them);
* ``output_overwritten`` — a result of an earlier call changed during this one.

A case whose oracle gives different results for two identical calls on A (made before the
calls above) is skipped: the op is not deterministic and nothing can be compared.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from tools.opdb.cases import CallInputs, replicate, same


class Status(str, enum.Enum):
    """What became of a case (``CRASH`` is set by the runner, never by ``check_case``)."""

    PASS = "pass"
    WRONG = "wrong"
    INPUT_CHANGED = "input_changed"
    OUTPUT_OVERWRITTEN = "output_overwritten"
    ERROR = "error"
    CRASH = "crash"
    SKIP = "skip"


#: Failure statuses, in the order the summary lists them.
FAILURES = (Status.WRONG, Status.INPUT_CHANGED, Status.OUTPUT_OVERWRITTEN, Status.ERROR,
            Status.CRASH)

#: The calls made to each case: (label, which input set).
CALLS = (("A", "a"), ("A again", "a"), ("A' (other values)", "a2"),
         ("B (other shapes)", "b"), ("A again", "a"))


@dataclass
class Outcome:
    """The verdict on one case. ``call`` is the index into ``CALLS`` where it failed."""

    status: Status
    message: str = ""
    call: int | None = None
    both_raise: int = 0
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


def _run(fn: Callable[..., Any], tensors: list[torch.Tensor]) -> tuple[Any, BaseException | None]:
    try:
        with torch.no_grad():
            return fn(*tensors), None
    except Exception as e:  # noqa: BLE001  (exceptions are compared by occurrence)
        return None, e


def _brief(e: BaseException) -> str:
    text = " / ".join(line.strip() for line in str(e).strip().splitlines() if line.strip())
    return f"{type(e).__name__}: {text[:300]}"


def _snapshot(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return [_snapshot(e) for e in x] if isinstance(x, list) else tuple(_snapshot(e) for e in x)
    return x


def check_case(oracle: Callable[..., Any], build: Callable[[], Callable[..., Any]],
               inputs: CallInputs) -> Outcome:
    """Build ours and make the calls of ``CALLS``; the first failure found is the verdict."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = _check(oracle, build, inputs)
    seen = []
    for w in caught:
        text = f"{w.category.__name__}: {str(w.message).splitlines()[0][:200]}"
        if text not in seen and "TorchScript" not in text and "torch.jit" not in text:
            seen.append(text)
    outcome.warnings = seen[:5]
    return outcome


def _check(oracle: Callable[..., Any], build: Callable[[], Callable[..., Any]],
           inputs: CallInputs) -> Outcome:
    try:
        ours = build()
    except Exception as e:  # noqa: BLE001
        return Outcome(Status.ERROR, f"building ours raised {_brief(e)}", call=-1)
    first, err1 = _run(oracle, replicate(inputs.a))
    second, err2 = _run(oracle, replicate(inputs.a))
    if err1 is None and err2 is None and same(second, first) is not None:
        return Outcome(Status.SKIP, "TorchScript's results differ between two identical "
                       f"calls: {same(second, first)[:200]}")
    sets = {"a": inputs.a, "a2": inputs.a2, "b": inputs.b}
    held: list[tuple[int, Any, Any]] = []
    both_raise = 0
    for k, (label, which) in enumerate(CALLS):
        tensors = sets[which]
        if tensors is None:
            continue
        ref_in, our_in = replicate(tensors), replicate(tensors)
        expected, ref_err = _run(oracle, ref_in)
        actual, our_err = _run(ours, our_in)
        where = f"call {k} ({label})"
        if ref_err is not None:
            if our_err is None:
                return Outcome(Status.WRONG, f"{where}: TorchScript raised {_brief(ref_err)}, "
                               "ours returned", call=k)
            both_raise += 1
            continue
        if our_err is not None:
            return Outcome(Status.ERROR, f"{where}: ours raised {_brief(our_err)}", call=k)
        why = same(actual, expected)
        if why is not None:
            return Outcome(Status.WRONG, f"{where}: {why}", call=k)
        why = same(our_in, ref_in, "inputs")
        if why is not None:
            return Outcome(Status.INPUT_CHANGED, f"{where}: {why}", call=k)
        for j, earlier, snap in held:
            why = same(earlier, snap, f"result of earlier call {j}")
            if why is not None:
                return Outcome(Status.OUTPUT_OVERWRITTEN, f"{where}: {why}", call=k)
        held.append((k, actual, _snapshot(actual)))
    return Outcome(Status.PASS, both_raise=both_raise)
