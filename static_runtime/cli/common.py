"""What the commands share: loading a model from a path, example inputs from options, and
turning errors into one line a person can act on."""

from __future__ import annotations

import logging
import re
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import torch
from rich.console import Console

import static_runtime as sr
from static_runtime.cli.inputs import (
    InputSpecError,
    describe_inputs,
    load_inputs_file,
    make_inputs,
    parse_spec,
)
from static_runtime.frontend.export import is_pt2, load_pt2
from static_runtime.runtime.binding import describe_signature


class CLIError(Exception):
    """A problem with what the user asked for; its message is the whole story."""


# Errors whose message is written for a person: shown without their type name.
_OWN_ERRORS = (CLIError, InputSpecError, sr.FrontendError, sr.ArgumentError,
               sr.UnsupportedOperatorError)


def one_line(e: BaseException) -> str:
    """The error as one line: its message (lines joined) and its notes (which node failed)."""
    parts = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    parts += [n.removeprefix("static_runtime: ").strip() for n in getattr(e, "__notes__", ())]
    text = "; ".join(parts) if parts else type(e).__name__
    if len(text) > 600:
        text = text[:600] + " ..."
    return text if isinstance(e, _OWN_ERRORS) else f"{type(e).__name__}: {text}"


class Group(click.Group):
    """A click group that reports errors from its commands as one line on stderr and exit
    status 1; with ``--debug``, with the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {one_line(e)}  (--debug shows the traceback)", err=True)
            ctx.exit(1)


# --------------------------------------------------------------------------- models


def load_module(path: str, options: sr.StaticModuleOptions | None = None) -> sr.StaticModule:
    """``StaticModule(path)`` with errors that say what the file is and what to do."""
    p = Path(path)
    if not p.exists():
        raise CLIError(f"no such file: {path}")
    if p.is_dir():
        raise CLIError(f"{path} is a directory; give a TorchScript archive (.pt) or a "
                       "torch.export archive (.pt2) file")
    try:
        with _export_log() as logged:
            return sr.StaticModule(str(p), options=options)
    except sr.FrontendError as e:
        raise CLIError(_not_a_model(p, e, logged)) from e


@contextmanager
def _export_log() -> Iterator[list[str]]:
    """Collect what the ``torch.export`` logger reports: ``torch.export.load`` logs the
    exception it ran into (a traceback, as a warning) and then raises an error that says
    less. Yields the logged exceptions, one line each; the logger's own output (many lines)
    is held back unless ``--debug`` was given: the command's error is one line."""
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx else None
    debug = bool(root and root.obj and root.obj.get("debug"))
    logged: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info and record.exc_info[1] is not None:
                logged.append(one_line(record.exc_info[1])[:300])

    log = logging.getLogger("torch.export")
    handlers, propagate = log.handlers[:], log.propagate
    log.handlers = [*handlers, Collect()] if debug else [Collect()]
    log.propagate = propagate and debug
    try:
        yield logged
    finally:
        log.handlers, log.propagate = handlers, propagate


def _not_a_model(p: Path, e: Exception, logged: list[str]) -> str:
    if is_pt2(p):
        if not zipfile.is_zipfile(p):
            return (f"{p} is not a torch.export archive: not a zip archive (torch.export.save "
                    "writes one); the file is damaged or was written by something else")
        if logged:
            return f"{one_line(e)}; torch.export.load ran into {logged[0]}"
        with zipfile.ZipFile(p) as z:
            programs = [n for n in z.namelist() if re.search(r"(^|/)models/[^/]+\.json$", n)]
        if not programs:
            return (f"{p} holds no exported program (no models/*.json record, which "
                    "torch.export.save writes): the file is damaged or incomplete")
        return one_line(e)
    if not zipfile.is_zipfile(p):
        return (f"{p} is not a model file: not a zip archive (a TorchScript archive, "
                "written by torch.jit.save, or a torch.export archive, written by "
                "torch.export.save, is one)")
    with zipfile.ZipFile(p) as z:
        names = {n.split("/", 1)[-1] for n in z.namelist()}
    if "data.pkl" in names and "constants.pkl" not in names:
        return (f"{p} was written by torch.save (weights or a pickled object), not "
                "torch.jit.save: it holds no program to run. Save the model with "
                "torch.jit.save(torch.jit.script(model), 'model.pt')")
    return one_line(e)


def recorded_inputs(path: str) -> tuple | None:
    """The example arguments a ``.pt2`` archive records (``ExportedProgram.example_inputs``,
    the ones it was exported with), or None if it records none."""
    with _export_log():
        ep = load_pt2(path)
    if ep.example_inputs is None:
        return None
    args, kwargs = ep.example_inputs
    if kwargs:
        raise CLIError(f"the program's example inputs include keyword arguments "
                       f"({', '.join(kwargs)}), which the command line cannot pass")
    return tuple(args)


def signature_of(mod: sr.StaticModule) -> str:
    return describe_signature(mod.graph)


# --------------------------------------------------------------------------- inputs


def input_options(fn: Callable) -> Callable:
    """``--input`` (repeatable) and ``--inputs-file``."""
    fn = click.option("--inputs-file", type=click.Path(dir_okay=False),
                      help="A file of example arguments: torch.save((x, y, ...), path).")(fn)
    fn = click.option("--input", "input_specs", multiple=True, metavar="SHAPE:DTYPE",
                      help="One per positional argument, e.g. 1x64:float32, "
                           "8:int64:0..1000 (integers drawn from [0, 1000)), Bx13:float32 "
                           "(B: the batch size).")(fn)
    return fn


def example_inputs(mod: sr.StaticModule, input_specs: tuple[str, ...], inputs_file: str | None,
                   batch: int = 1, *, model: str | None = None) -> tuple:
    """The example arguments the options describe, checked against the model's signature
    (an ``ArgumentError`` names the signature). Without ``--input``/``--inputs-file``, a
    torch.export archive (``model``) gives the example inputs it records."""
    if input_specs and inputs_file:
        raise CLIError("give --input or --inputs-file, not both")
    if inputs_file:
        args = load_inputs_file(inputs_file)
    elif input_specs:
        specs = [parse_spec(s) for s in input_specs]
        args = make_inputs(specs, batch)
    elif model is not None and is_pt2(model):
        args = recorded_inputs(model)
        if args is None:
            raise CLIError(f"the exported program takes {signature_of(mod)} and records no "
                           "example inputs: describe its inputs with --input SHAPE:DTYPE "
                           "(one per argument) or --inputs-file FILE")
    else:
        raise CLIError(f"the model takes {signature_of(mod)}: describe its inputs with "
                       "--input SHAPE:DTYPE (one per argument) or --inputs-file FILE")
    mod.binder.bind(args, {})
    return args


def batched_specs(input_specs: tuple[str, ...]) -> bool:
    return any(parse_spec(s).batched for s in input_specs)


def run_first_call(mod: sr.StaticModule, args: tuple) -> Any:
    """Call the model once, turning a failure into a message that shows the inputs given
    and the signature (the usual cause: a shape or dtype the model does not accept)."""
    try:
        return mod(*args)
    except sr.ArgumentError:
        raise
    except Exception as e:
        raise CLIError(f"the model failed on the inputs given ({describe_inputs(args)}); it "
                       f"takes {signature_of(mod)}: {one_line(e)}") from e


def threads_option(fn: Callable) -> Callable:
    return click.option("--threads", default=1, show_default=True,
                        help="Intra-op threads (torch.set_num_threads).")(fn)


def kernel_choice_option(fn: Callable) -> Callable:
    return click.option("--kernel-choice", type=click.Choice(["measure", "default"]),
                        default="measure", show_default=True,
                        help="How GEMMs and convolutions get their kernel: timed on this CPU "
                             "('measure', the default) or by fixed rules ('default').")(fn)


def set_threads(threads: int) -> None:
    if threads < 1:
        raise CLIError("--threads must be at least 1")
    torch.set_num_threads(threads)


def format_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    from static_runtime.memory.planner import format_bytes as fb

    return fb(int(n))


def console_for(as_json: bool) -> Console:
    """Progress and tables: to stderr when stdout carries JSON; 110 columns wide
    when the output is not a terminal (a file, a test), so tables are not squeezed."""
    probe = Console(stderr=as_json)
    return Console(stderr=as_json, width=None if probe.is_terminal else 110)
