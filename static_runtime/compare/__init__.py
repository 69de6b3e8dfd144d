"""Comparison with the runtimes people use today — eager PyTorch, TorchScript, PyTorch's C++
Static Runtime, ONNX Runtime, ``torch.compile`` — side by side in one process: outputs,
latency, memory, and per-operator profiles against them.

``peers.py`` builds the runners (``onnx_peer.py`` the ONNX Runtime one; ``files.py`` those of a
model file), ``agreement.py`` checks their outputs, ``timing.py`` and ``memory.py`` measure
them, ``ops.py`` lines up per-node-kind profiles with PyTorch's C++ Static Runtime.

    from static_runtime import compare
    runners = compare.make_runners(model, inputs)
    timings = compare.time_runners(runners)
"""

from static_runtime.compare.agreement import ATOL, RTOL, output_errors, outputs_agree
from static_runtime.compare.memory import MemoryFigures, measure_memory
from static_runtime.compare.onnx_peer import ONNX_EXPORTERS
from static_runtime.compare.peers import DEMO_RUNNERS, RUNNERS, make_runners
from static_runtime.compare.runner import Runner
from static_runtime.compare.timing import Timing, median_us, time_runners

__all__ = [
    "ATOL", "DEMO_RUNNERS", "ONNX_EXPORTERS", "RTOL", "RUNNERS", "MemoryFigures", "Runner",
    "Timing", "make_runners", "measure_memory", "median_us", "output_errors", "outputs_agree",
    "time_runners",
]
