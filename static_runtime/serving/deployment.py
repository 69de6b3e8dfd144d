"""The Ray Serve deployment: replicas that each build the module once and answer HTTP JSON
requests (``codec``) and deployment-handle calls, joining concurrent requests into one call
when asked to (``batching``).

Status codes: 200 with ``{"outputs": [...]}``; 400 with ``{"error": ...}`` for a body that is
not JSON, a value the JSON form refuses (``codec.RequestError``) or arguments the model's
signature refuses (``ArgumentError``); 500 with ``{"error": ...}`` for an error the model
raised. Ray Serve itself answers 503 when a caller's queue is full (``max_queued_requests``)
or no replica is alive.
"""

from __future__ import annotations

import gc
import json
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from static_runtime.runtime.binding import ArgumentError, describe_signature
from static_runtime.serving import batching, codec
from static_runtime.serving.loading import load_model


def _json(content: dict, status: int = 200) -> Response:
    """A JSON response in which non-finite floats are written as ``NaN``/``Infinity`` (as
    Python's and JavaScript's parsers read them) rather than refused, as starlette's
    ``JSONResponse`` does: a model may well return ``-inf``."""
    return Response(json.dumps(content, separators=(",", ":")), status,
                    media_type="application/json")


def _message(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if isinstance(e, (codec.RequestError, ArgumentError)) else \
        f"{type(e).__name__}: {text}"


@serve.deployment
class StaticModuleDeployment:
    """One replica: one module, built in ``__init__``."""

    def __init__(self, model: Any, options: Any, max_batch_size: int,
                 batch_wait_timeout_s: float) -> None:
        self.module = load_model(model, options)
        # What the replica holds now (PyTorch, Ray, the module and its plan: ~300 k objects)
        # lives as long as the process: out of the cyclic collector's sight, a full
        # collection scans only what came since — 130-200 ms before, with the GIL held,
        # every few hundred new input sizes (benchmarks/gc_pauses.py). Garbage from before
        # that forms a cycle later is never freed: a replica builds one module, once.
        gc.collect()
        gc.freeze()
        self.batched = max_batch_size > 1
        if self.batched:
            self._run_batch.set_max_batch_size(max_batch_size)
            self._run_batch.set_batch_wait_timeout_s(batch_wait_timeout_s)
        graph = getattr(self.module, "graph", None)
        self.signature = describe_signature(graph) if graph is not None else None
        self.calls = 0       # calls of the module
        self.requests = 0    # requests answered by them (more than calls when joined)

    async def __call__(self, request: Request) -> Response:
        if request.method == "GET":
            return _json({"signature": self.signature,
                                 "max_batch_size": self._max_batch_size()})
        if request.method != "POST":
            return _json({"error": f"method {request.method} not allowed; POST a JSON "
                                 "body {\"inputs\": [...], \"kwargs\": {...}}"}, 405)
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            return _json({"error": f"the body is not valid JSON: {e}"}, 400)
        try:
            args, kwargs = codec.decode_request(body)
        except codec.RequestError as e:
            return _json({"error": _message(e)}, 400)
        ok, result = await self._outcome(args, kwargs)
        if ok:
            try:
                return _json(codec.encode_outputs(result))
            except TypeError as e:
                return _json({"error": _message(e)}, 500)
        status = 400 if isinstance(result, ArgumentError) else 500
        return _json({"error": _message(result)}, status)

    async def predict(self, args: list | tuple = (), kwargs: dict | None = None) -> Any:
        """The handle path: ``handle.predict.remote(args, kwargs)`` returns the model's output
        (tensors as they are); errors are raised to the caller."""
        ok, result = await self._outcome(list(args), dict(kwargs or {}))
        if not ok:
            raise result
        return result

    async def _outcome(self, args: list, kwargs: dict) -> batching.Outcome:
        if self.batched:
            return await self._run_batch((args, kwargs))
        self.calls += 1
        self.requests += 1
        try:
            return True, self.module(*args, **kwargs)
        except Exception as e:  # noqa: BLE001  (the request's answer: 400/500 or raised)
            return False, e

    # The batch limits set here are replaced in __init__ by build_app's arguments.
    @serve.batch(max_batch_size=2, batch_wait_timeout_s=0.0)
    async def _run_batch(self, requests: list[tuple[list, dict]]) -> list[batching.Outcome]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return self.module(*args, **kwargs)

        self.requests += len(requests)
        return batching.run_batch(call, requests)

    def stats(self) -> dict:
        """This replica's counts: ``calls`` of the module and ``requests`` they answered, and
        the objects it keeps out of the collector's sight (``gc.freeze`` once built)."""
        return {"calls": self.calls, "requests": self.requests,
                "frozen_objects": gc.get_freeze_count()}

    def _max_batch_size(self) -> int:
        return self._run_batch._get_max_batch_size() if self.batched else 1
