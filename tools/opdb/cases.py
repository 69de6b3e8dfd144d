"""OpInfos to cases: dtype, samples, the call made into a TorchScript module, the call inputs.

A *case* is one sample of one OpInfo in one variant (``VARIANTS``): a
TorchScript module whose inputs are the sample's tensors (those nested in the sample's
input, args and kwargs, in ``torch.utils._pytree`` order), with every other value baked
in, and the inputs of the calls made to it (``CallInputs``).

How the call inputs are chosen (``call_inputs``):

* **A** — the sample's own tensors.
* **A'** — the same sample regenerated under another seed: OpInfo sample generators draw
  values at random but shapes and non-tensor arguments deterministically, so the sample at
  the same index has the same structure with other values — and index-like integer tensors
  the generator made valid for the op. Where the regenerated sample differs in anything
  but tensor values, A' is A with each floating/complex element scaled by a factor in
  [0.95, 1.05] (signs and zeros kept, which keeps most domains) and integer and bool
  tensors kept as they are (they are often indices, counts or masks).
* **B** — another sample of the OpInfo with the same argument structure and tensor
  dtypes but other shapes, preferring one whose non-tensor arguments equal A's (the
  module has A's baked in); none if no sample qualifies.
"""

from __future__ import annotations

import itertools
import math
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

#: How the op's result leaves the module: as it is (``returned``); each tensor of it fed to
#: ``torch.stack((r, r))`` (``consumed``: the result is an intermediate, planned into the
#: arena); each tensor fed to four ``neg`` in a row (``chained``: with
#: ``fusion_compiler="inductor"`` an element-wise op joins them in a region Inductor
#: compiles, so the op itself is compiled; ``neg`` is exact, so the chain adds no rounding
#: of its own to compare; bool tensors, which have no neg, are stacked). The first two run
#: by default.
VARIANTS = ("returned", "consumed", "chained")
DEFAULT_VARIANTS = ("returned", "consumed")

#: What follows each tensor of the result, per variant: in Python, and as TorchScript source.
_FOLLOW: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "consumed": (lambda r: torch.stack((r, r)), "torch.stack(({r}, {r}))"),
    "chained": (lambda r: r.neg().neg().neg().neg(), "{r}.neg().neg().neg().neg()"),
}


def _follower(variant: str, t: torch.Tensor) -> str:
    return "consumed" if variant == "chained" and t.dtype == torch.bool else variant

#: How many of an OpInfo's samples are generated and looked at (for A's and for B).
SCAN_SAMPLES = 24


def op_db() -> list[Any]:
    """PyTorch's operator database (importing it takes a few seconds)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db as db
    return list(db)


def full_name(op: Any) -> str:
    """The OpInfo's name with its variant (``"max.reduction_with_dim"``), unique in op_db."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def random_reason(op: Any) -> str | None:
    """Why an OpInfo is random by its own flags, or None.

    OpInfo marks random operators in two ways: ``has_nondeterministic_output`` (results of
    uninitialised memory, e.g. ``empty_like``) and an ``op`` wrapped in
    ``wrapper_set_seed`` (the database's way to make a random op repeatable in eager
    tests: it re-seeds before every call — which a traced graph does not).
    """
    if op.has_nondeterministic_output:
        return "random: OpInfo.has_nondeterministic_output"
    code = getattr(op.op, "__code__", None)
    if code is not None and "wrapper_set_seed" in code.co_names:
        return "random: OpInfo's op is wrapped in wrapper_set_seed"
    return None


def pick_dtype(op: Any) -> torch.dtype | None:
    """float32 if the OpInfo supports it on CPU, else int64, else None."""
    supported = op.supported_dtypes("cpu")
    for dtype in (torch.float32, torch.int64):
        if dtype in supported:
            return dtype
    return None


def seed_for(name: str, salt: int = 0) -> int:
    """A seed stable across processes (a restarted worker regenerates the same samples)."""
    return zlib.crc32(name.encode()) + salt


@dataclass
class Flat:
    """A sample's ``(input, args, kwargs)`` flattened: its tensors and everything else."""

    spec: Any
    leaves: list[Any]
    tensor_at: list[int]

    @property
    def tensors(self) -> list[torch.Tensor]:
        return [self.leaves[i] for i in self.tensor_at]

    def constants(self) -> list[Any]:
        """The non-tensor leaves (the values baked into the module)."""
        return [x for i, x in enumerate(self.leaves) if i not in set(self.tensor_at)]

    def with_tensors(self, tensors: list[torch.Tensor]) -> tuple[Any, tuple, dict]:
        leaves = list(self.leaves)
        for i, t in zip(self.tensor_at, tensors):
            leaves[i] = t
        return pytree.tree_unflatten(leaves, self.spec)


def flatten(sample: Any) -> Flat:
    """Flatten a SampleInput; tensors anywhere in it are the module's inputs."""
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    return Flat(spec, leaves, [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)])


def generate(op: Any, dtype: torch.dtype, salt: int = 0) -> list[Flat]:
    """The OpInfo's first ``SCAN_SAMPLES`` samples, flattened, under a stable seed."""
    torch.manual_seed(seed_for(full_name(op), salt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # set_seed=False: OpInfo would otherwise re-seed before each sample by the test's name
        samples = itertools.islice(op.sample_inputs("cpu", dtype, set_seed=False),
                                   SCAN_SAMPLES)
        flats = [flatten(s) for s in samples]
    # samples with sparse tensors are left out: the harness copies inputs by storage, sizes
    # and strides (``replicate``), which sparse tensors do not have
    return [f for f in flats if all(t.layout == torch.strided for t in f.tensors)]


def _meta(t: torch.Tensor) -> tuple:
    return (t.dtype, tuple(t.shape), t.stride(), t.storage_offset())


def _same_constants(a: Flat, b: Flat) -> bool:
    try:
        return all(_equal_constant(x, y) for x, y in zip(a.constants(), b.constants(), strict=True))
    except ValueError:
        return False


def _equal_constant(x: Any, y: Any) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, float) and math.isnan(x):
        return math.isnan(y)
    try:
        return bool(x == y)
    except Exception:  # noqa: BLE001  (a value without a usable ==: not the same)
        return False


def _perturbed(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    if not (t.is_floating_point() or t.is_complex()):
        return t.clone()
    factor = 1 + 0.05 * (2 * torch.rand(t.shape, generator=gen, dtype=torch.float64) - 1)
    return (t.to(torch.complex128 if t.is_complex() else torch.float64) * factor).to(t.dtype)


@dataclass
class CallInputs:
    """The tensors of each distinct input set; ``b`` is None when no sample qualifies."""

    a: list[torch.Tensor]
    a2: list[torch.Tensor]
    a2_how: str
    b: list[torch.Tensor] | None
    b_index: int | None


def call_inputs(samples: list[Flat], again: list[Flat], index: int) -> CallInputs:
    """A, A' and B for ``samples[index]`` (``again``: the samples regenerated, another seed)."""
    a = samples[index]
    alt = again[index] if index < len(again) else None
    if (alt is not None and alt.spec == a.spec and _same_constants(a, alt)
            and [_meta(t)[:2] for t in alt.tensors] == [_meta(t)[:2] for t in a.tensors]):
        a2, how = alt.tensors, "regenerated"
    else:
        gen = torch.Generator().manual_seed(index)
        a2, how = [_perturbed(t, gen) for t in a.tensors], "perturbed"
    b, b_index = None, None
    shapes = [tuple(t.shape) for t in a.tensors]
    dtypes = [t.dtype for t in a.tensors]
    candidates = [
        (not _same_constants(a, s), j) for j, s in enumerate(samples)
        if j != index and s.spec == a.spec and [t.dtype for t in s.tensors] == dtypes
        and [tuple(t.shape) for t in s.tensors] != shapes]
    if candidates:
        _, b_index = min(candidates)
        b = samples[b_index].tensors
    return CallInputs(a.tensors, a2, how, b, b_index)


def pick_indices(n: int, k: int) -> list[int]:
    """``k`` sample indices spread over ``n``, the first included."""
    if n <= k:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _follow(result: Any, variant: str) -> Any:
    """Every tensor of the result fed to what follows it in ``variant``."""
    if variant == "returned":
        return result
    leaves = pytree.tree_leaves(result)
    outs = tuple(_FOLLOW[_follower(variant, x)][0](x) if isinstance(x, torch.Tensor) else x
                 for x in leaves)
    return outs[0] if len(outs) == 1 else outs


class _Call(torch.nn.Module):
    """``op(input, *args, **kwargs)`` with the sample's tensors as this module's inputs."""

    def __init__(self, fn: Callable[..., Any], flat: Flat, variant: str) -> None:
        super().__init__()
        self.fn, self.flat, self.variant = fn, flat, variant

    def forward(self, *tensors: torch.Tensor) -> Any:
        inp, args, kwargs = self.flat.with_tensors(list(tensors))
        return _follow(self.fn(inp, *args, **kwargs), self.variant)


def replicate(x: Any) -> Any:
    """A copy with the same sizes, strides and storage offset (overlapping layouts too)."""
    if isinstance(x, torch.Tensor):
        y = torch.empty(0, dtype=x.dtype)
        y.set_(x.untyped_storage().clone(), x.storage_offset(), x.size(), x.stride())
        return y
    if isinstance(x, (list, tuple)):
        return type(x)(replicate(e) for e in x)
    if isinstance(x, dict):
        return {k: replicate(v) for k, v in x.items()}
    return x


def same(actual: Any, expected: Any, path: str = "output") -> str | None:
    """None if equal (values by assert_close with NaNs equal, dtypes, structure), else why."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"{path}: expected a Tensor, got {type(actual).__name__}"
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except AssertionError as e:
            lines = (line.strip() for line in str(e).splitlines())
            return f"{path}: {' / '.join(line for line in lines if line)}"
        return None
    if isinstance(expected, (list, tuple)):
        if isinstance(actual, tuple) != isinstance(expected, tuple) or \
                not isinstance(actual, (list, tuple)):
            return f"{path}: expected {type(expected).__name__}, got {type(actual).__name__}"
        if len(actual) != len(expected):
            return f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            why = same(a, e, f"{path}[{i}]")
            if why:
                return why
        return None
    if isinstance(expected, float) and isinstance(actual, float):
        if math.isnan(expected) and math.isnan(actual):
            return None
        return None if math.isclose(actual, expected, rel_tol=1.3e-6, abs_tol=1e-5) \
            else f"{path}: {actual!r} != {expected!r}"
    if type(actual) is not type(expected) or actual != expected:
        return f"{path}: {actual!r} ({type(actual).__name__}) != {expected!r}"
    return None


def _loose(x: Any) -> Any:
    """Structure-insensitive form (tuples, lists and return_types alike) for eager checks."""
    if isinstance(x, (list, tuple)):
        return [_loose(e) for e in x]
    return x


@dataclass
class Module:
    """One case's module: ``oracle`` is the TorchScript callable (module or function)."""

    oracle: Any
    how: str
    notes: list[str] = field(default_factory=list)


def _reproduces(oracle: Any, eager: Callable[..., Any], tensors: list[torch.Tensor]) -> str | None:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = eager(*replicate(tensors))
        got = oracle(*replicate(tensors))
    return same(_loose(got), _loose(expected), "traced vs eager")


def build_module(op: Any, flat: Flat, variant: str) -> Module | str:
    """The TorchScript module of one sample and variant, or why there is none."""
    eager = _Call(op.op, flat, variant)
    inp, args, kwargs = flat.with_tensors(replicate(flat.tensors))
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = op.op(inp, *args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return f"eager: the op raises on its own sample ({_first(e)})"
    if variant != "returned" and \
            not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(result)):
        return f"{variant}: the result has no tensor to consume"
    notes = []
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(eager, tuple(flat.tensors), check_trace=False, strict=False)
        why = _reproduces(traced, eager, flat.tensors)
        if why is None:
            return Module(traced, "traced")
        notes.append(f"trace does not reproduce ({why[:200]})")
    except Exception as e:  # noqa: BLE001  (any tracing failure falls back to scripting)
        notes.append(f"trace failed ({_first(e)})")
    scripted = script_call(op, flat, variant, result)
    if isinstance(scripted, str):
        return "; ".join(notes + [scripted])
    try:
        why = _reproduces(scripted, eager, flat.tensors)
    except Exception as e:  # noqa: BLE001
        why = _first(e)
    if why is not None:
        return "; ".join(notes + [f"script does not reproduce ({why[:200]})"])
    return Module(scripted, "scripted", notes)


def _literal(x: Any, names: Iterator[str]) -> str:
    """TorchScript source for a baked value (a tensor: the next input's name)."""
    if isinstance(x, torch.Tensor):
        return next(names)
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return repr(x)
    if isinstance(x, float):
        return f"float('{x}')" if math.isinf(x) or math.isnan(x) else repr(x)
    if isinstance(x, (torch.dtype, torch.layout, torch.memory_format)):
        return repr(x)
    if isinstance(x, torch.device):
        return f"torch.device('{x}')"
    if isinstance(x, (list, tuple)) and x:
        items = ", ".join(_literal(e, names) for e in x)
        return f"[{items}]" if isinstance(x, list) else f"({items},)"
    raise TypeError(f"no TorchScript literal for {type(x).__name__}")


def _torch_path(op: Any) -> str | None:
    """``torch.<op.name>`` if that is the OpInfo's callable, else None."""
    obj: Any = torch
    for part in op.name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return f"torch.{op.name}" if obj is op.op else None


def _first(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}"


def script_call(op: Any, flat: Flat, variant: str, result: Any) -> Any:
    """The call as a scripted function from generated source, or why it cannot be.
    ``result``: the eager call's, which tells what follows each tensor of it."""
    path = _torch_path(op)
    if path is None:
        return "not scriptable: the OpInfo's op is not torch." + op.name
    inp, args, kwargs = pytree.tree_unflatten(list(flat.leaves), flat.spec)
    names = iter(f"t{i}" for i in range(len(flat.tensor_at)))
    try:
        parts = [_literal(inp, names)] + [_literal(a, names) for a in args]
        parts += [f"{k}={_literal(v, names)}" for k, v in kwargs.items()]
    except TypeError as e:
        return f"not scriptable: {e}"
    params = ", ".join(f"t{i}" for i in range(len(flat.tensor_at)))
    lines = [f"def call({params}):", f"    r = {path}({', '.join(parts)})"]
    if variant == "returned":
        lines.append("    return r")
    elif isinstance(result, torch.Tensor):
        lines.append(f"    return {_FOLLOW[_follower(variant, result)][1].format(r='r')}")
    elif isinstance(result, tuple) and all(isinstance(t, torch.Tensor) for t in result):
        outs = ", ".join(_FOLLOW[_follower(variant, t)][1].format(r=f"r[{i}]")
                         for i, t in enumerate(result))
        lines.append(f"    return ({outs},)")
    else:
        return f"not scriptable: {variant} needs a tensor or a tuple of tensors"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.jit.CompilationUnit("\n".join(lines) + "\n").call
    except Exception as e:  # noqa: BLE001
        return f"script failed ({_first(e)})"
