"""static_runtime: a Python inference runtime for PyTorch models.

    import static_runtime as sr
    mod = sr.StaticModule(torch.jit.script(model))
    out = mod(x)
"""

from static_runtime.frontend import FrontendError
from static_runtime.lowering import fuse_to_static_runtime
from static_runtime.ops.registry import Tier, UnsupportedOperatorError
from static_runtime.runtime.binding import ArgumentError
from static_runtime.runtime.checks import OutVariantWarning
from static_runtime.runtime.metrics import IndividualMetrics
from static_runtime.runtime.module import StaticModule, StaticRuntime, prepare
from static_runtime.runtime.options import StaticModuleOptions
from static_runtime.runtime.serialize import VERSION, PreparedFileError, UnsaveableValueError, load

__all__ = [
    "ArgumentError", "FrontendError", "IndividualMetrics", "StaticModule",
    "StaticModuleOptions", "StaticRuntime", "Tier", "UnsupportedOperatorError", "prepare",
]
__version__ = VERSION
__all__ += ["OutVariantWarning", "PreparedFileError", "UnsaveableValueError", "fuse_to_static_runtime", "load"]
