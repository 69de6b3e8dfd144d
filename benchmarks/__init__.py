"""Benchmarks: side-by-side measurements against the other runtimes, and the model zoo."""
