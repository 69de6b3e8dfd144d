"""The serving package against a real local Ray (``ray.init(num_cpus=2)``, HTTP on 127.0.0.1):
Ray Data output equals direct calls row by row (``Predictor`` and ``static-runtime predict``);
outputs over HTTP and through a deployment handle equal direct calls; batching joins and splits
under concurrent clients with mixed shapes; each bad request gets its 400, a model error its
500, overload a 503; a replica killed under a bounded load is replaced and later requests
succeed; ``static-runtime serve`` answers and stops on SIGTERM.

One Ray instance serves the whole module; under xdist the module is one unit of work
(``tests/conftest.py``), so that two workers never start Ray or Serve at once. Every loop is bounded in count and in time, every request has a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from differential import script

import static_runtime as sr
from static_runtime.models import MODELS

ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[serve]')")
pytest.importorskip("ray.serve", reason="ray[serve] is not installed (pip install '.[serve]')")
from ray import serve

from static_runtime import serving
from static_runtime.serving import codec

TIMEOUT_S = 30.0       # any single request
SMALL = {"num_cpus": 0.25}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Ray with 2 CPUs, Serve's HTTP proxy on a free port of 127.0.0.1, and the models saved
    as prepared modules."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    root = tmp_path_factory.mktemp("serving")
    paths = {}
    for name in ("mlp", "dlrm"):
        paths[name] = root / f"{name}.srm"
        sr.StaticModule(script(MODELS[name].build())).save(paths[name])
    paths["slow"] = root / "slow.pt"
    torch.jit.save(torch.jit.script(_Slow()), str(paths["slow"]))
    try:
        yield {"port": port, "paths": paths, "root": root}
    finally:
        serve.shutdown()
        ray.shutdown()


class _Slow(torch.nn.Module):
    """``n`` rounds of a small matmul: a request as slow as its ``n`` says."""

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = torch.tanh(x @ x)
        return x


def _post(url: str, body, timeout: float = TIMEOUT_S) -> tuple[int, dict | str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            return e.code, json.loads(text)
        except json.JSONDecodeError:
            return e.code, text


def _tensor_body(*args, **kwargs) -> dict:
    enc = codec.encode_value
    return {"inputs": [enc(a) for a in args], "kwargs": {k: enc(v) for k, v in kwargs.items()}}


def _assert_outputs(answer: dict, expected) -> None:
    (out,) = codec.decode_outputs(answer)
    torch.testing.assert_close(out, expected)


# --------------------------------------------------------------------------- Ray Data first
# (before the deployments hold CPUs)


def test_predictor_equals_direct_calls_row_by_row(cluster):
    path = cluster["paths"]["mlp"]
    direct = sr.load(path)
    x = torch.randn(50, 64, generator=torch.Generator().manual_seed(3))
    ds = ray.data.from_items([{"x": x[i].numpy(), "id": i} for i in range(len(x))])
    out = ds.map_batches(serving.Predictor, batch_format="numpy", batch_size=7, concurrency=1,
                         num_cpus=0.5, fn_constructor_kwargs={"model": str(path),
                                                              "input_columns": ["x"]})
    rows = sorted(out.take_all(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(50))
    for r in rows:
        torch.testing.assert_close(torch.tensor(r["output"]), direct(x[r["id"]][None])[0])


def test_predict_command_writes_parquet_in_order(cluster):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from static_runtime.cli import main

    root, path = cluster["root"], cluster["paths"]["mlp"]
    x = torch.randn(40, 64, generator=torch.Generator().manual_seed(4))
    pq.write_table(pa.table({"id": list(range(40)),
                             "x": pa.array(x.tolist(), type=pa.list_(pa.float32()))}),
                   root / "in.parquet")
    result = CliRunner().invoke(main, [
        "predict", str(path), "--input", str(root / "in.parquet"), "--output",
        str(root / "out.parquet"), "--columns", "x", "--batch-size", "16",
        "--concurrency", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["rows"] == 40
    table = pq.read_table(root / "out.parquet")
    assert table.column("id").to_pylist() == list(range(40))
    torch.testing.assert_close(_rows(table.column("output")), sr.load(path)(x))
    bad = CliRunner().invoke(main, ["predict", str(path), "--input", str(root / "in.parquet"),
                                    "--output", str(root / "o2.parquet"), "--columns", "nope"])
    assert bad.exit_code == 1 and "['nope'] not in" in bad.output


def _rows(column) -> torch.Tensor:
    """A column of equal-length rows (Ray's tensor extension type, or the plain list type it
    is stored as) as one tensor."""
    return torch.from_numpy(np.stack([np.asarray(r, dtype=np.float32)
                                      for r in column.to_pylist()]))


# --------------------------------------------------------------------------- Ray Serve


@pytest.fixture(scope="module")
def apps(cluster):
    """DLRM (list inputs) on 2 replicas unbatched, the MLP on 1 replica batching up to 8, and a
    slow model with room for one request at a replica and one in the queue."""
    p = cluster["paths"]
    base = f"http://127.0.0.1:{cluster['port']}"
    handles = {
        "dlrm": serve.run(serving.build_app(str(p["dlrm"]), replicas=2,
                                            ray_actor_options=SMALL),
                          name="dlrm", route_prefix="/dlrm"),
        "mlp": serve.run(serving.build_app(str(p["mlp"]), max_batch_size=8,
                                           batch_wait_timeout_s=0.05,
                                           ray_actor_options=SMALL),
                         name="mlp", route_prefix="/mlp"),
        "slow": serve.run(serving.build_app(str(p["slow"]), max_ongoing_requests=1,
                                            max_queued_requests=1, ray_actor_options=SMALL),
                          name="slow", route_prefix="/slow"),
    }
    return {"handles": handles, "url": {k: f"{base}/{k}" for k in handles}}


def test_http_and_handle_equal_direct_calls(cluster, apps):
    direct = sr.load(cluster["paths"]["dlrm"])
    for batch in (1, 3):
        dense, indices, offsets = MODELS["dlrm"].example_inputs(batch, seed=batch)
        expected = direct(dense, indices, offsets)
        status, answer = _post(apps["url"]["dlrm"], _tensor_body(dense, indices, offsets))
        assert status == 200, answer
        _assert_outputs(answer, expected)
        status, answer = _post(apps["url"]["dlrm"],
                               _tensor_body(dense, indices=indices, offsets=offsets))
        assert status == 200, answer
        _assert_outputs(answer, expected)
        got = apps["handles"]["dlrm"].predict.remote([dense, indices, offsets]).result(
            timeout_s=TIMEOUT_S)
        torch.testing.assert_close(got, expected)
    with urllib.request.urlopen(apps["url"]["dlrm"], timeout=TIMEOUT_S) as r:
        assert "indices" in json.loads(r.read())["signature"]


def test_bad_requests_get_400_model_errors_500(cluster, apps):
    url = apps["url"]["dlrm"]
    dense, indices, offsets = MODELS["dlrm"].example_inputs(2)
    good = _tensor_body(dense, indices, offsets)
    t = codec.encode_value(dense)
    cases = [
        (b"{not json", 400, "not valid JSON"),
        ({"inputs": {"a": 1}}, 400, "'inputs' must be a list"),
        ({"inputs": [dict(t, dtype="float128")] + good["inputs"][1:]}, 400,
         "unknown dtype 'float128'"),
        ({"inputs": [dict(t, shape=[3, 13])] + good["inputs"][1:]}, 400,
         "shape [3, 13] holds 39 element(s) but 'data' has 26"),
        ({"inputs": good["inputs"][:1]}, 400, "missing argument 'indices'"),
        ({"inputs": good["inputs"] + [1]}, 400, "too many arguments"),
        ({"inputs": ["text"] + good["inputs"][1:]}, 400, "expected Tensor, got str"),
        (_tensor_body(torch.randn(2, 5), indices, offsets), 500, "RuntimeError"),
    ]
    for body, status, words in cases:
        got, answer = _post(url, body)
        assert got == status, (body, answer)
        assert words in answer["error"], answer
    status, answer = _post(url, good)
    assert status == 200
    _assert_outputs(answer, sr.load(cluster["paths"]["dlrm"])(dense, indices, offsets))


def test_batching_joins_and_splits_under_concurrent_clients(cluster, apps):
    url, handle = apps["url"]["mlp"], apps["handles"]["mlp"]
    direct = sr.load(cluster["paths"]["mlp"])
    before = handle.stats.remote().result(timeout_s=TIMEOUT_S)
    assert before["frozen_objects"] > 10_000  # (the replica froze what it built: gc_pauses.py)
    clients, per_client = 12, 3
    barrier = threading.Barrier(clients, timeout=TIMEOUT_S)
    results: list = []

    def client(k: int) -> None:
        g = torch.Generator().manual_seed(100 + k)
        barrier.wait()
        for j in range(per_client):
            width = 32 if (k + j) % 5 == 0 else 64      # some cannot join: the model refuses
            x = torch.randn(1 + (k + j) % 3, width, generator=g)
            results.append((x, *_post(url, _tensor_body(x))))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=4 * TIMEOUT_S)
    assert not any(th.is_alive() for th in threads)
    assert len(results) == clients * per_client
    for x, status, answer in results:
        if x.shape[1] == 64:
            assert status == 200, answer
            _assert_outputs(answer, direct(x))
        else:
            assert status == 500 and "mat1 and mat2" in answer["error"], answer
    after = handle.stats.remote().result(timeout_s=TIMEOUT_S)
    requests = after["requests"] - before["requests"]
    calls = after["calls"] - before["calls"]
    assert requests == clients * per_client
    assert calls < requests, (calls, requests)       # some requests were joined


def test_overload_is_refused_with_503(apps):
    x = codec.encode_value(torch.eye(32) * 0.5)
    results: list = []

    def client() -> None:
        results.append(_post(apps["url"]["slow"], {"inputs": [x, 3000]}, timeout=120))

    threads = [threading.Thread(target=client) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=150)
    assert not any(th.is_alive() for th in threads)
    statuses = sorted(s for s, _ in results)
    assert set(statuses) <= {200, 503} and 200 in statuses and 503 in statuses, results
    assert all(answer for s, answer in results if s == 503)     # a message, not an empty body


def _replicas(app: str) -> set[str]:
    """The names of the live replica actors of application ``app`` (Serve names them
    ``SERVE_REPLICA::<app>#<deployment>#<id>`` in the namespace ``serve``)."""
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{app}#")}


def test_replica_killed_under_load_is_replaced(cluster, apps):
    url = apps["url"]["dlrm"]
    direct = sr.load(cluster["paths"]["dlrm"])
    inputs = MODELS["dlrm"].example_inputs(2)
    body, expected = _tensor_body(*inputs), direct(*inputs)
    old = _replicas("dlrm")
    assert len(old) == 2, old
    stop = threading.Event()
    results: list = []

    def client() -> None:
        for _ in range(300):
            if stop.is_set():
                return
            t0 = time.monotonic()
            try:
                status, answer = _post(url, body, timeout=TIMEOUT_S)
            except (urllib.error.URLError, OSError) as e:   # a timeout included: a hang
                status, answer = None, repr(e)
            results.append((status, answer, time.monotonic() - t0))

    threads = [threading.Thread(target=client) for _ in range(3)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 60
    while len(results) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    victim = min(old)
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    killed_at = len(results)
    while len(results) < killed_at + 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for th in threads:
        th.join(timeout=2 * TIMEOUT_S)
    assert not any(th.is_alive() for th in threads)
    assert all(s is not None for s, _, _ in results), [r for r in results if r[0] is None]
    assert all(s in (200, 500, 503) for s, _, _ in results)
    failed = [r for r in results if r[0] != 200]
    print("refused while a replica died:", failed)
    # A status and a message each: ours as {"error": ...}, Ray Serve's own as text.
    assert all(a and (isinstance(a, str) or a.get("error")) for _, a, _ in failed), failed
    assert len(failed) <= 3 * 2, failed        # only those in flight at the moment of death
    for s, a, _ in results:
        if s == 200:
            _assert_outputs(a, expected)
    # Serve replaces the replica; then every request succeeds.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        now = _replicas("dlrm")
        if len(now) == 2 and victim not in now:
            break
        time.sleep(0.5)
    assert len(now) == 2 and victim not in now, now
    for _ in range(10):
        status, answer = _post(url, body)
        assert status == 200, answer


def test_serve_command_answers_and_stops_on_sigterm(cluster, apps):
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address,
               PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                       os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(
        [sys.executable, "-m", "static_runtime", "serve", str(cluster["paths"]["mlp"]),
         "--port", str(cluster["port"]), "--max-batch-size", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 150
        while not any(ln.startswith("serving ") for ln in lines) and time.monotonic() < deadline:
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        line = next((ln for ln in lines if ln.startswith("serving ")), None)
        assert line is not None, "".join(lines)
        url = line.split(" at ")[1].split()[0]
        assert url == f"http://127.0.0.1:{cluster['port']}/"
        x = torch.randn(2, 64)
        status, answer = _post(url, _tensor_body(x))
        assert status == 200, answer
        _assert_outputs(answer, sr.load(cluster["paths"]["mlp"])(x))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert "static_runtime" not in serve.status().applications      # its app was deleted
    assert "dlrm" in serve.status().applications                      # the others were not
