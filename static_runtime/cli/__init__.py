"""The ``static-runtime`` command (also ``python -m static_runtime``).

``demo`` runs a built-in model through the runtimes people use today and ours; ``bench``,
``profile`` and ``inspect`` do the same, per node, and inside out for a user's model;
``serve`` and ``predict`` run it behind Ray Serve and over a Parquet file with Ray Data (the
``serve`` extra, imported only by them).
"""

from __future__ import annotations

import click

from static_runtime.cli.common import Group
from static_runtime.cli.compare_cmds import bench, demo
from static_runtime.cli.inspect_cmd import inspect
from static_runtime.cli.profile_cmd import profile
from static_runtime.cli.serve_cmds import predict, serve


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show the full traceback when something fails.")
@click.version_option(package_name="static-runtime", prog_name="static-runtime")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """static_runtime: fast CPU inference for PyTorch models, after PyTorch's C++ Static
    Runtime. Start with `static-runtime demo`; then point `bench`, `profile` and `inspect` at
    your own TorchScript archive (torch.jit.save(torch.jit.script(model), "model.pt")) or
    torch.export archive (torch.export.save(torch.export.export(model, args), "model.pt2")).

    Errors are reported in one line (exit status 1); --debug shows the traceback."""
    ctx.obj = {"debug": debug}


main.add_command(demo)
main.add_command(bench)
main.add_command(profile)
main.add_command(inspect)
main.add_command(serve)
main.add_command(predict)

__all__ = ["main"]
