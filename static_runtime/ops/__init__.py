"""The operator registry: out variants, native implementations, the PyTorch fallback.

Importing the package defines the operators graph preparation introduces
(``native/specialized.py``: ``static_runtime::add``...) as PyTorch operators too, so that a
graph containing them — prepared, or printed and parsed back — resolves their schemas.
"""

from static_runtime.ops.native import fused as _fused  # noqa: F401  (registers)
from static_runtime.ops.native import layout as _layout  # noqa: F401  (registers)
from static_runtime.ops.native import recurrent as _recurrent  # noqa: F401  (registers)
from static_runtime.ops.native import specialized as _specialized  # noqa: F401  (registers)
