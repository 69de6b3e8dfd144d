"""Lowering into TorchScript: the subgraphs of a scripted module our runtime supports become
calls of it, and the TorchScript interpreter keeps the rest.

Why a package of its own, after ``runtime/``, and not beside the importers in ``frontend/``:
a frontend turns a model into IR for the passes, whereas lowering builds a finished
``StaticModule`` for each region and hands it back to TorchScript as a custom operator. It
imports ``runtime/``, so it comes after it in the one-way flow (frontend → ir → passes → ops →
memory → runtime → lowering), where nothing of the pipeline can reach it.
"""

from static_runtime.lowering.fuse import FusedRegion, FusionReport, fuse_to_static_runtime

__all__ = ["FusedRegion", "FusionReport", "fuse_to_static_runtime"]
