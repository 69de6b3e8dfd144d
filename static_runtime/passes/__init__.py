"""Graph-to-graph rewrites that preserve meaning, and the alias analysis they rely on."""
