"""``serve`` and ``predict``: a model behind Ray Serve's HTTP proxy, and a Parquet file through
Ray Data. Ray is imported inside the commands: the rest of the CLI works without the extra."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click

from static_runtime.cli.common import CLIError

APP_NAME = "static_runtime"


def _import_ray() -> Any:
    try:
        import ray
        from ray import serve  # noqa: F401
    except ImportError as e:
        raise CLIError("this command needs Ray: pip install 'static-runtime[serve]' "
                       f"(ray[serve,data]); {e}") from e
    return ray


def _start_ray(ray: Any) -> bool:
    """Join ``RAY_ADDRESS`` or start a local instance; True when this process started it (and
    so shuts it down)."""
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
        return False
    ray.init(include_dashboard=False, log_to_driver=False)
    return True


def _answers(url: str, timeout_s: float) -> bool:
    """Whether ``GET url`` returns 200 before ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    return False


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes serving the model, one module each.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address the HTTP proxy listens on (0.0.0.0 for every interface).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--max-batch-size", type=click.IntRange(min=1), default=1, show_default=True,
              help="Join up to this many concurrent requests into one call (1: no batching).")
@click.option("--batch-wait-ms", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="How long a replica waits for a batch to fill.")
@click.option("--max-ongoing-requests", type=click.IntRange(min=1), default=None,
              help="Requests a replica holds at once [default: max(32, 2 x max batch size)].")
@click.option("--ready-timeout", type=click.FloatRange(min=1), default=180.0, show_default=True,
              help="Seconds to wait for the first answer before giving up.")
def serve(model: str, replicas: int, host: str, port: int, max_batch_size: int,
          batch_wait_ms: float, max_ongoing_requests: int | None, ready_timeout: float) -> None:
    """Serve MODEL (a saved module .srm, or a .pt / .pt2 archive) over HTTP with Ray Serve.

    Starts a local Ray instance (or joins the cluster at $RAY_ADDRESS), deploys REPLICAS
    replicas, prints the URL once it answers, and runs until Ctrl-C or SIGTERM. POST / a JSON
    body {"inputs": [{"dtype": "float32", "shape": [1, 64], "data": [...]}]}; the answer is
    {"outputs": [...]} in the same form. GET / shows the model's signature."""
    ray = _import_ray()
    from ray import serve as ray_serve

    from static_runtime import serving

    started = _start_ray(ray)
    # After ray.init, which installs handlers of its own that would end the process at once.
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set())
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray_serve.start(http_options={"host": host, "port": port})
        app = serving.build_app(str(Path(model).resolve()), replicas=replicas,
                                max_batch_size=max_batch_size,
                                batch_wait_timeout_s=batch_wait_ms / 1000,
                                max_ongoing_requests=max_ongoing_requests)
        ray_serve.run(app, name=APP_NAME, route_prefix="/")
        shown_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        url = f"http://{shown_host}:{port}/"
        if not _answers(url, ready_timeout):
            raise CLIError(f"the deployment did not answer at {url} within {ready_timeout:g} s")
        click.echo(f"serving {model} at {url} ({replicas} replica(s), max batch "
                   f"{max_batch_size}); Ctrl-C or SIGTERM stops", )
        while not stop.wait(0.5):
            pass
        click.echo("stopping")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if started:
            # The whole local instance goes, Serve's actors with it. (Not serve.shutdown()
            # first: after a Ctrl-C in a terminal the raylet got the SIGINT too, and Serve's
            # controller could not answer.)
            ray.shutdown()
        else:
            ray_serve.delete(APP_NAME)


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--input", "input_path", required=True, type=click.Path(exists=True),
              help="A Parquet file (or a folder of them).")
@click.option("--output", "output_path", required=True, type=click.Path(dir_okay=False),
              help="The Parquet file to write: the input's columns and the output column.")
@click.option("--columns", required=True,
              help="Input columns, comma-separated, in the order of the model's arguments.")
@click.option("--output-column", default="output", show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True,
              help="Ray Data actors, one module each.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
def predict(model: str, input_path: str, output_path: str, columns: str, output_column: str,
            concurrency: int, batch_size: int) -> None:
    """Run MODEL over every row of a Parquet file with Ray Data; rows keep their order."""
    ray = _import_ray()
    import pyarrow.parquet as pq
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from static_runtime import serving

    names = [c.strip() for c in columns.split(",") if c.strip()]
    if not names:
        raise CLIError("--columns names no column")
    schema = pq.read_schema(input_path) if Path(input_path).is_file() else None
    total = pq.ParquetFile(input_path).metadata.num_rows if schema is not None else None
    if schema is not None:
        missing = [c for c in names if c not in schema.names]
        if missing:
            raise CLIError(f"column(s) {missing} not in {input_path}; its columns are "
                           f"{schema.names}")
    started = _start_ray(ray)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        ds = ray.data.read_parquet(str(Path(input_path).resolve())).map_batches(
            serving.Predictor, batch_format="numpy", batch_size=batch_size,
            concurrency=concurrency,
            fn_constructor_kwargs={"model": str(Path(model).resolve()), "input_columns": names,
                                   "output_column": output_column})
        rows = 0
        t0 = time.perf_counter()
        writer = None
        with Progress(BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      transient=False) as bar:
            task = bar.add_task("rows", total=total)
            try:
                for table in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                    if writer is None:
                        writer = pq.ParquetWriter(output_path, table.schema)
                    writer.write_table(table)
                    rows += table.num_rows
                    bar.update(task, advance=table.num_rows)
            finally:
                if writer is not None:
                    writer.close()
        if writer is None:
            raise CLIError(f"{input_path} has no rows; nothing written")
        click.echo(json.dumps({"rows": rows, "output": output_path,
                               "seconds": round(time.perf_counter() - t0, 3)}))
    finally:
        if started:
            ray.shutdown()
