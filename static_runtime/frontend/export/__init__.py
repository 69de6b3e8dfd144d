"""The torch.export importer: an ``ExportedProgram``, a ``.pt2`` archive, or an ``nn.Module``
plus example inputs → IR.

* ``program`` — getting the program (loading a ``.pt2``, exporting a module);
* ``importer`` — the program → an IR graph (``import_export``), refusing what inference must not do;
* ``nodes`` — FX nodes → IR nodes;
* ``signature`` — the program's input and output structure and what it assumed of its inputs.

The names below are what the rest of the package uses.
"""

from static_runtime.frontend.export.importer import import_export
from static_runtime.frontend.export.program import (
    export_module,
    is_pt2,
    load_pt2,
    split_example,
)
from static_runtime.frontend.export.signature import ExportSignature, InputGuard

__all__ = ["ExportSignature", "InputGuard", "export_module", "import_export", "is_pt2",
           "load_pt2", "split_example"]
