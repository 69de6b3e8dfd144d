"""Which zoo models get a shape program (issue 18): for each, the module is called at the
zoo's larger batch, its background builds are let finish, and it is called at three batch
sizes never seen (one more, two more, two); each result is compared with the TorchScript
interpreter's. Printed per model: how many programs the structure got, how many of the three
new sizes a program laid out (the rest recorded, as before programs), the symbols a program
kept (``no symbol``: it pinned every size, a program for one size) and, when none was made,
why — what the fake-tensor run could not follow.

Not a timing: the figures do not depend on the machine's load.

    python benchmarks/programs.py                      # every zoo model, ~3 minutes
    python benchmarks/programs.py --models hf_bert,unet_tiny
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import click
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/programs.py`: the zoo is imported from the root
    sys.path.insert(0, str(ROOT))

import static_runtime as sr
from benchmarks.zoo import ZOO
from static_runtime.runtime.hot import wait_for_builds

RESULTS = Path(__file__).parent / "results"


def survey(name: str) -> dict:
    """One model's programs after a call at the zoo's larger batch and three new ones."""
    z = ZOO[name]
    scripted = z.scripted()
    mod = sr.StaticModule(scripted)
    batch = z.batches[1]
    mod(*z.inputs(batch))
    wait_for_builds()
    served = mod._memory.programs.served
    before = sum(served.values())
    for b in (batch + 1, batch + 2, 2):
        x = z.inputs(b, seed=b)
        got = mod(*x)
        with torch.no_grad():
            want = scripted(*x)
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    programs = mod._memory.programs
    made = [p for ps in programs._items.values() for p in ps]
    return {
        "programs": len(made),
        "new_sizes_laid_out": sum(served.values()) - before,
        "symbols": sorted({s for p in made for s in p.symbols.values()}),
        "why_none": sorted(set(programs.failures.values())),
    }


@click.command()
@click.option("--models", default=",".join(ZOO), show_default=False,
              help="Comma-separated zoo models (default: all).")
@click.option("--json-out", default=str(RESULTS / "programs.json"), show_default=True)
def main(models: str, json_out: str) -> None:
    """Survey the zoo's shape programs; see the module docstring."""
    from rich.console import Console
    from rich.table import Table

    names = [n for n in models.split(",") if n]
    bad = [n for n in names if n not in ZOO]
    if bad:
        raise click.BadParameter(f"unknown model(s) {bad}; choose from {list(ZOO)}")
    torch.set_num_threads(1)
    table = Table(title="Shape programs over the zoo: three new batch sizes each")
    for col in ("model", "programs", "new sizes laid out", "symbols", "why none"):
        table.add_column(col)
    results = {}
    for name in names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = results[name] = survey(name)
        table.add_row(name, str(r["programs"]), f"{r['new_sizes_laid_out']} / 3",
                      ", ".join(r["symbols"]) or ("no symbol" if r["programs"] else ""),
                      "; ".join(r["why_none"])[:90])
    covered = sum(r["new_sizes_laid_out"] == 3 for r in results.values())
    Console(width=160).print(table)
    print(f"{covered} of {len(results)} models: every new size laid out by a program")
    Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(json_out).write_text(json.dumps(results, indent=1))
    print(f"JSON: {json_out}")


if __name__ == "__main__":
    main()
