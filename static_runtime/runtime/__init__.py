"""The runtime: ``StaticModule`` and ``StaticRuntime`` run a prepared, planned graph per call,
through the reference interpreter or generated code, specialised per input signature and laid
out per size by shape programs, with the runtime pool, async execution and the profiler."""
