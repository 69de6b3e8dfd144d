"""Native implementations: Python code for views, containers, scalars, objects, constants.

Importing this package registers them all with ``static_runtime.ops.registry``.
"""
