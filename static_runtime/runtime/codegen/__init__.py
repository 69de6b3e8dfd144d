"""The generated-code executor: a prepared, planned graph as one straight-line Python function.

Per node the reference interpreter pays for a loop iteration, a list of argument slots, a
branch on the node's kind and stores into a value array. Here each node is one line of
Python: locals instead of the value array, every operator a pre-bound callable in the
function's globals, constants inlined (literals) or bound as globals, arena tensors as
closure variables, ``if``/``while`` for control flow, and intermediates released
(``del``) after their last use unless they live in the arena.

Hygiene, as torch.fx's code generation does it: names come from one namespace (legal,
unique, no keywords), captured objects go in an explicit globals dict, a header says what
produced the code, and ``line_to_node`` maps every generated line back to its IR node so an
exception names the node and its source line. The source is registered with ``linecache``
so tracebacks show it.

The code depends on the arena layout (which managed values live in the arena for the
current input signature), so it is generated per layout and cached by the module; each
runtime binds it to its own arena tensors by calling the generated factory.

One module per job, in the order the code is made and used: ``names`` (naming and
literals), ``nodes`` (straight-line nodes and blocks), ``control`` (``if``, loops, forks),
``prologue`` (the signature guard and the views hoisted into the factory), ``function`` (the
whole function, compiled: ``generate``), ``cache`` (``CodeCache``) and ``executor``
(``CodegenExecutor``, which installs and calls it).
"""

from static_runtime.runtime.codegen.cache import CodeCache, Pending
from static_runtime.runtime.codegen.executor import CodegenExecutor
from static_runtime.runtime.codegen.function import GeneratedCode, generate, stamp_layout
from static_runtime.runtime.codegen.prologue import SignatureChanged

__all__ = ["CodeCache", "CodegenExecutor", "GeneratedCode", "Pending", "SignatureChanged",
           "generate", "stamp_layout"]
