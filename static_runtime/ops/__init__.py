"""The operator registry: out variants, native implementations, the PyTorch fallback."""
