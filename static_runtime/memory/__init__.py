"""Lifetimes and aliasing of intermediate tensors, and which of them the runtime may reuse."""
