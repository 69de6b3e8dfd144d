"""Serving (issue 13): requests/s, p50 and p99 latency of the Ray Serve deployment over HTTP on
127.0.0.1, against one process calling the module directly.

For each model (MLP and DLRM at batch 1, saved as prepared modules):

* ``direct``: this process calls the module in a loop (1 thread, ``torch.set_num_threads(1)``);
  latency is the call, requests/s its inverse;
* ``http, 1 client``: one closed-loop client, 1 replica, no batching: the HTTP path's own cost
  is this p50 minus the direct call's p50;
* ``http, C clients``: ``--clients`` closed-loop clients (each sends its next request when the
  last one is answered), for 1 and 2 replicas, without batching and with ``max_batch_size``
  ``--max-batch-size`` (requests joined along dimension 0; DLRM's list inputs are never joined,
  so its batched rows show the cost of the batch queue only).

Clients are asyncio coroutines on one aiohttp session in this process; each configuration runs
``--warmup`` seconds unmeasured and then ``--seconds`` measured; every request has a 30 s
timeout, and a request that fails or times out is counted, never retried. Ray runs on this
machine with ``num_cpus`` = its core count; each replica holds one CPU and one torch thread.
The clients, Serve's HTTP proxy and the replicas share the machine's cores.

    python benchmarks/serving.py                            # both models, ~4 minutes
    python benchmarks/serving.py --models mlp --seconds 3 --clients 32

``--traffic`` (issue 18): traffic of every size through the deployment. The model is
``benchmarks/traffic.py``'s ``recsys`` workload (``dcn_v2`` scripted); each request has its own
batch size, drawn from that workload's trace (``1 + Poisson(λ)``, λ log-normal: what a
dynamic batcher upstream makes), and with batching on the deployment joins requests again, so
the model sees yet other sizes. ``direct`` calls the module on the same requests in turn.
Clients cycle through the requests (each from its own offset)::

    python benchmarks/serving.py --traffic --clients 16 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import torch

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.serving import codec

TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_TICK = os.sysconf("SC_CLK_TCK")
_GROUPS = (("replica", "ServeReplica"), ("proxy", "ProxyActor"), ("ray", "ray"))


def _cpu_by_group() -> dict[str, float]:
    """CPU seconds (user + system) used so far by the processes alive now, grouped: Serve's
    replicas, its HTTP proxy, the rest of Ray, this process (the clients) and everything else
    on the machine (other work; processes that ended are not counted)."""
    out = dict.fromkeys(["replica", "proxy", "ray", "clients", "other"], 0.0)
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / _TICK
        if int(d) == me:
            out["clients"] += cpu
            continue
        group = next((g for g, word in _GROUPS if word in cmd), "other")
        out[group] += cpu
    return out


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _direct(module, args, seconds: float, warmup: float, requests: list | None = None) -> dict:
    """Calls of ``module`` in a loop: on ``args``, or on each of ``requests`` in turn."""
    requests = requests or [args]
    end = time.perf_counter() + warmup
    i = 0
    while time.perf_counter() < end:
        module(*requests[i % len(requests)])
        i += 1
    lat = []
    t_end = time.perf_counter() + seconds
    while (t0 := time.perf_counter()) < t_end:
        module(*requests[i % len(requests)])
        i += 1
        lat.append(time.perf_counter() - t0)
    return {"rps": len(lat) / sum(lat), "p50": _percentile(lat, 0.5),
            "p99": _percentile(lat, 0.99), "n": len(lat), "failed": 0}


async def _load(url: str, body: bytes | list[bytes], clients: int, seconds: float,
                warmup: float) -> dict:
    import aiohttp

    lat: list[float] = []
    failed = 0
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    conn = aiohttp.TCPConnector(limit=clients)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        start = time.perf_counter()
        measure_from, stop_at = start + warmup, start + warmup + seconds

        bodies = body if isinstance(body, list) else [body]

        async def client(k: int) -> None:
            nonlocal failed
            while (t0 := time.perf_counter()) < stop_at:
                k += 1
                try:
                    async with session.post(url, data=bodies[k % len(bodies)],
                                            headers=headers) as r:
                        await r.read()
                        ok = r.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                t1 = time.perf_counter()
                if t0 >= measure_from and t1 <= stop_at:
                    if ok:
                        lat.append(t1 - t0)
                    else:
                        failed += 1

        await asyncio.gather(*(client(i * 7) for i in range(clients)))
    return {"rps": len(lat) / seconds, "p50": _percentile(lat, 0.5) if lat else float("nan"),
            "p99": _percentile(lat, 0.99) if lat else float("nan"), "n": len(lat),
            "failed": failed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,dlrm")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--max-batch-size", type=int, default=32)
    ap.add_argument("--batch-wait-ms", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.5)
    ap.add_argument("--json", help="Also write the rows to this JSON file.")
    ap.add_argument("--traffic", action="store_true",
                    help="recsys traffic of every size (issue 18) instead of --models")
    ap.add_argument("--requests", type=int, default=200,
                    help="with --traffic: how many requests the clients cycle through")
    a = ap.parse_args()

    import ray
    from ray import serve

    from static_runtime import serving

    torch.set_num_threads(1)
    cores = os.cpu_count() or 1
    print("load before:", _uptime())
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False,
             logging_level="WARNING")
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port},
                logging_config={"log_level": "WARNING", "enable_access_log": False})
    url = f"http://127.0.0.1:{port}/"
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="sr_serving_bench_"))
    try:
        for name in (["recsys traffic"] if a.traffic else a.models.split(",")):
            requests = _traffic_requests(a.requests) if a.traffic else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                module = sr.StaticModule(_traffic_model() if a.traffic else
                                         torch.jit.script(MODELS[name].build()))
            path = tmp / f"{name.split()[0]}.srm"
            module.save(path)
            args = requests[0] if requests else MODELS[name].example_inputs(1)
            bodies = [json.dumps({"inputs": [codec.encode_value(x) for x in r]}).encode()
                      for r in (requests or [args])]
            body = bodies if requests else bodies[0]
            # The answer over HTTP equals the direct call (a benchmark of wrong answers is none).
            direct = _direct(module, args, a.seconds, a.warmup, requests)
            rows.append({"model": name, "runner": "direct call, 1 process", **direct})
            print(rows[-1], flush=True)
            configs = [(1, 1, 1)] + [(r, b, a.clients) for r in (1, 2)
                                     for b in (1, a.max_batch_size)]
            for replicas, batch, clients in configs:
                app = serving.build_app(str(path), replicas=replicas, max_batch_size=batch,
                                        batch_wait_timeout_s=a.batch_wait_ms / 1000)
                serve.run(app, name="bench", route_prefix="/",
                          logging_config={"log_level": "WARNING", "enable_access_log": False})
                _check(url, bodies[0], module(*args))
                cpu0, t0 = _cpu_by_group(), time.perf_counter()
                result = asyncio.run(_load(url, body, clients, a.seconds, a.warmup))
                cpu1, wall = _cpu_by_group(), time.perf_counter() - t0
                # CPU share of the machine's cores over the run (warm-up included).
                result["cpu"] = {g: (cpu1[g] - cpu0[g]) / wall / cores for g in cpu1}
                label = (f"http, {replicas} replica{'s' if replicas > 1 else ''}, "
                         + (f"batch <= {batch}" if batch > 1 else "no batching")
                         + f", {clients} client{'s' if clients > 1 else ''}")
                rows.append({"model": name, "runner": label, **result})
                print(rows[-1], flush=True)
                serve.delete("bench")
    finally:
        serve.shutdown()
        ray.shutdown()
    print("load after:", _uptime())
    _print_table(rows)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


def _traffic_workload():
    import sys

    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.traffic import WORKLOADS

    return WORKLOADS["recsys"]


def _traffic_model() -> torch.jit.ScriptModule:
    w = _traffic_workload()
    return w.script(w.model())


def _traffic_requests(n: int) -> list[tuple]:
    """``n`` requests of the recsys trace, each its own batch size."""
    w = _traffic_workload()
    return [w.inputs(size) for size in w.trace(n, 0)]


def _check(url: str, body: bytes, expected: torch.Tensor) -> None:
    import urllib.request

    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
        (out,) = codec.decode_outputs(json.loads(r.read()))
    torch.testing.assert_close(out, expected)


def _print_table(rows: list[dict]) -> None:
    groups = ["replica", "proxy", "ray", "clients", "other"]
    print("\n| model | runner | requests/s | p50 ms | p99 ms | requests | failed | CPU % of "
          "the cores: " + " / ".join(groups) + " |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        cpu = " / ".join(f"{100 * r['cpu'][g]:.0f}" for g in groups) if "cpu" in r else ""
        print(f"| {r['model']} | {r['runner']} | {r['rps']:.0f} | {r['p50'] * 1e3:.3f} | "
              f"{r['p99'] * 1e3:.3f} | {r['n']} | {r['failed']} | {cpu} |")
    for model in dict.fromkeys(r["model"] for r in rows):
        by = {r["runner"]: r for r in rows if r["model"] == model}
        d = next(v for k, v in by.items() if k.startswith("direct"))
        one = next((v for k, v in by.items() if k.endswith(", 1 client")), None)
        multi = {k: v for k, v in by.items() if k.startswith("http") and v is not one}
        ks = list(multi)
        if one:
            print(f"{model}: HTTP path's own cost, p50(1 client) - p50(direct) = "
                  f"{(one['p50'] - d['p50']) * 1e3:.3f} ms (direct call {d['p50'] * 1e6:.1f} µs)")
        if len(ks) == 4:
            r1, b1, r2, b2 = (max(multi[k]["rps"], 1e-9) for k in ks)
            print(f"{model}: 2 replicas / 1 replica requests/s: {r2 / r1:.2f} (no batching), "
                  f"{b2 / b1:.2f} (batching); batching / none: {b1 / r1:.2f} (1 replica), "
                  f"{b2 / r2:.2f} (2 replicas); p99/p50 batched 1 replica: "
                  f"{multi[ks[1]]['p99'] / multi[ks[1]]['p50']:.2f}")


if __name__ == "__main__":
    main()
