"""The differential test helper: the TorchScript interpreter is the oracle.

``check(model, inputs, second_inputs)`` compiles ``model`` with TorchScript (a Python
function or ``nn.Module`` is scripted; a string is TorchScript source, or IR text if it
starts with ``graph(``), builds a ``StaticModule`` for each option set, and for the input
sets (first, second of other shapes, first again) checks that:

* our outputs equal the interpreter's (``torch.testing.assert_close``, dtypes and
  container structure included), or both raise;
* no input was modified;
* outputs returned by one call are not changed by the next call.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

import static_runtime as sr
from static_runtime.runtime.hot import wait_for_builds

#: Option sets every case runs under: everything on (the defaults — generated code, measured
#: kernels —, plus verifying every memory plan), a minimal pipeline on the reference
#: interpreter (no passes, no out variants, no arena, ATen's kernels unmeasured), so both
#: executors and both paths are exercised, and
#: the defaults with fused regions compiled by Inductor.
#: "default" specialises each signature's code on its first call from the arena
#: (``specialize_after=0``), so the few calls of a case run the specialised code; "fused"
#: keeps the real default, under which they run the shared generic code (a signature is
#: specialised only once hot: ``runtime/hot.py``). Both kinds of code are checked.
OPTION_SETS: dict[str, sr.StaticModuleOptions] = {
    "default": sr.StaticModuleOptions(verify_memory_plans=True, specialize_after=0),
    "plain": sr.StaticModuleOptions(
        executor="interpreter", fast_bindings=False,
        enable_out_variant=False, optimize_memory=False, constant_propagation=False,
        remove_noops=False, variadic_cat_stack=False, merge_tuple_unpacks=False,
        specialize_alpha=False, functionalize=False, eliminate_dead_code=False,
        inplace_activations=False, fuse_attention=False, fuse_convolution=False,
        fuse_linear_pointwise=False, fold_batchnorm=False, pack_linears=False, fuse_transformer_encoder=False, scalarize_loop_counters=False, unroll_loops=False, fuse_gated_linear=False, fuse_linear_residual=False, fuse_conv_residual=False, fuse_scaled_index_add=False, fuse_rotary=False,
        specialize_signature=False, hoist_views=False, batch_embeddings=False, causal_conv1d=False,
        kernel_choice="default"),
    # issue 12: regions of small operators compiled by Inductor (where the C++ compiler
    # exists; without one, each region warns and runs unfused, which is checked just the same)
    "fused": sr.StaticModuleOptions(fusion_compiler="inductor", verify_memory_plans=True),
}


def script(model: Any) -> Any:
    """A TorchScript callable for a function, module, source string or IR text."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if isinstance(model, str):
            text = model.strip()
            if text.startswith("graph("):
                graph = torch._C.parse_ir(text)
                return torch._C._create_function_from_graph("ir_function", graph)
            cu = torch.jit.CompilationUnit(text + "\n")
            name = text.split("def ", 1)[1].split("(", 1)[0].strip()
            return getattr(cu, name)
        if isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction)):
            return model
        return torch.jit.script(model)


def _snapshot(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_snapshot(e) for e in x)
    if isinstance(x, dict):
        return {k: _snapshot(v) for k, v in x.items()}
    return copy.copy(x)


def assert_same(actual: Any, expected: Any, path: str = "output", **tol: Any) -> None:
    """Equal values, dtypes, shapes and container structure."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a Tensor, got {type(actual)}"
        torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{path}: {m}",
                                   **tol)
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected), \
            f"{path}: expected {type(expected).__name__}, got {type(actual).__name__}"
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{path}[{i}]", **tol)
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected dict, got {type(actual)}"
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_same(actual[k], expected[k], f"{path}[{k!r}]", **tol)
    elif isinstance(expected, float):
        assert isinstance(actual, float), f"{path}: expected float, got {type(actual)}"
        torch.testing.assert_close(actual, expected, equal_nan=True, **tol)
    else:
        assert type(actual) is type(expected), \
            f"{path}: expected {type(expected).__name__}, got {type(actual).__name__}"
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _run(fn: Callable[..., Any], inputs: Sequence[Any], kwargs: dict) -> tuple[Any, Any]:
    try:
        return fn(*inputs, **kwargs), None
    except Exception as e:  # noqa: BLE001  (the oracle's exception is compared by occurrence)
        return None, e


def check(model: Any, inputs: Sequence[Any], second_inputs: Sequence[Any] | None = None,
          *, kwargs: dict | None = None, options: dict[str, sr.StaticModuleOptions] | None = None,
          reference: Callable[..., Any] | None = None, **tol: Any) -> dict[str, sr.StaticModule]:
    """Run the differential check; returns the StaticModules built (by option-set name)."""
    scripted = script(model)
    kwargs = kwargs or {}
    modules, oracles = {}, {}
    for name, opts in (options or OPTION_SETS).items():
        # Build everything before the oracle runs: a module that mutates its own attributes
        # must start from the same state in both, for every option set.
        modules[name] = sr.StaticModule(scripted, options=opts)
        oracles[name] = reference or (copy.deepcopy(scripted)
                                      if isinstance(scripted, torch.jit.ScriptModule)
                                      else scripted)
    sets = [inputs] + ([second_inputs] if second_inputs is not None else []) + [inputs]
    for name, mod in modules.items():
        oracle_fn = oracles[name]
        held: list[tuple[Any, Any]] = []
        for k, xs in enumerate(sets):
            ours_in = _snapshot(list(xs))
            ref_in = _snapshot(list(xs))
            before = _snapshot(ours_in)
            expected, ref_err = _run(oracle_fn, ref_in, _snapshot(kwargs))
            actual, our_err = _run(mod, ours_in, _snapshot(kwargs))
            where = f"[{name} options, input set {k}]"
            if ref_err is not None:
                assert our_err is not None, \
                    f"{where} TorchScript raised {ref_err!r} but static_runtime returned {actual!r}"
                continue
            if our_err is not None:
                raise AssertionError(f"{where} static_runtime raised, TorchScript did not") \
                    from our_err
            assert_same(actual, expected, f"{where} output", **tol)
            assert_same(ours_in, before, f"{where} input (must be unchanged)")
            held.append((actual, _snapshot(actual)))
            if k == 0:
                # the shape program made after the first call (on a background thread) lays
                # out the second input set's sizes: checked too, not left to timing
                wait_for_builds()
        for k, (actual, snap) in enumerate(held):
            assert_same(actual, snap, f"[{name} options] output of call {k} after later calls")
    return modules
