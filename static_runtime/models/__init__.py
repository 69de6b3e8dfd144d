"""The built-in example models that the demo, the benchmarks and the tests share, as
TorchScript takes them (``builtin.py``) and as ``torch.export`` takes them (``export.py``).

    from static_runtime.models import MODELS
    from static_runtime.models.export import export_case
"""

from static_runtime.models.builtin import (
    DLRM,
    MLP,
    MODELS,
    AttributeSetter,
    ClassUser,
    ControlFlowModel,
    ModelSpec,
    MultiHeadAttention,
    ResNetSmall,
    RunningStats,
    TransformerEncoder,
)

__all__ = [
    "DLRM", "MLP", "MODELS", "AttributeSetter", "ClassUser", "ControlFlowModel", "ModelSpec",
    "MultiHeadAttention", "ResNetSmall", "RunningStats", "TransformerEncoder",
]
