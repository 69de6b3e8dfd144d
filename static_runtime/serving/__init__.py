"""The runtime inside Ray: a Ray Serve deployment for online inference and a Ray Data
predictor for batch inference (the optional extra ``serve``: ``pip install
static-runtime[serve]``). The runtime itself never imports this package.

    from static_runtime import serving
    app = serving.build_app("model.srm", replicas=2, max_batch_size=32)
    ray.serve.run(app)                     # POST / {"inputs": [...]} -> {"outputs": [...]}

    ds.map_batches(serving.Predictor, fn_constructor_kwargs={"model": "model.srm",
                   "input_columns": ["x"]}, concurrency=2, batch_size=256)

A saved module (``StaticModule.save``, ``.srm``) is the artefact to serve: each replica or
actor loads it without preparing the model again. A TorchScript (``.pt``) or torch.export
(``.pt2``) archive works too, prepared once per replica.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from static_runtime.serving.codec import RequestError
from static_runtime.serving.loading import ModelSource, is_prepared_module, load_model
from static_runtime.serving.predictor import Predictor

__all__ = ["Predictor", "RequestError", "build_app", "load_model"]

_NEEDS_RAY = ("static_runtime.serving needs Ray Serve: pip install 'static-runtime[serve]' "
              "(ray[serve,data])")


def build_app(model: ModelSource, *, replicas: int = 1, max_batch_size: int = 1,
              batch_wait_timeout_s: float = 0.005, options: Any = None,
              max_ongoing_requests: int | None = None, max_queued_requests: int = 256,
              ray_actor_options: dict | None = None) -> Any:
    """A Ray Serve application serving ``model`` (see ``load_model`` for what it may be).

    ``replicas`` processes each build the module once. With ``max_batch_size > 1`` a replica
    joins up to that many concurrent requests whose tensors share a batch dimension into one
    call (``batching``), waiting at most ``batch_wait_timeout_s`` for a batch to fill.
    ``max_ongoing_requests`` bounds the requests a replica holds at once (default
    ``max(32, 2 * max_batch_size)``: a batch can fill while the previous one runs, and requests
    wait in the replica's queue rather than at the caller, whose retries to a full replica back
    off exponentially and cost 10-100x in latency under a closed loop of 32 clients);
    ``max_queued_requests`` bounds those waiting at each caller, past which HTTP callers get a
    503 and handle callers a ``BackPressureError``. ``ray_actor_options`` go to each replica
    (default one CPU each).
    """
    try:
        from static_runtime.serving.deployment import StaticModuleDeployment
    except ImportError as e:
        raise ImportError(_NEEDS_RAY) from e
    if not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas must be a positive integer, got {replicas!r}")
    if not isinstance(max_batch_size, int) or max_batch_size < 1:
        raise ValueError(f"max_batch_size must be a positive integer, got {max_batch_size!r}")
    if batch_wait_timeout_s < 0:
        raise ValueError(f"batch_wait_timeout_s must be >= 0, got {batch_wait_timeout_s!r}")
    if options is not None and isinstance(model, (str, os.PathLike)) \
            and Path(model).is_file() and is_prepared_module(Path(model)):
        # Refused here, not in each replica, where Serve would retry the failing constructor.
        raise ValueError(f"{model} is a prepared module: its options were fixed when it was "
                         "saved; pass options=None")
    if max_ongoing_requests is None:
        max_ongoing_requests = max(32, 2 * max_batch_size)
    deployment = StaticModuleDeployment.options(
        num_replicas=replicas,
        max_ongoing_requests=max_ongoing_requests,
        max_queued_requests=max_queued_requests,
        ray_actor_options=ray_actor_options or {"num_cpus": 1},
    )
    return deployment.bind(model, options, max_batch_size, batch_wait_timeout_s)
