"""PyTorch's operator database (``op_db``) as a differential suite for our runtime.

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` (float32,
or int64 where the OpInfo has no float32 on CPU), a few of its sample inputs are each made
into a small TorchScript module — the call traced (``torch.jit.trace``), or scripted from
generated source where tracing fails or does not reproduce the eager call — in two
variants: the op's result returned (``returned``), and every tensor of the result consumed
by a following operator, ``torch.stack((r, r))`` (``consumed``), so the result is an
intermediate our memory planner places in the arena. A third, ``chained`` (``--variants``),
follows each tensor with four ``neg`` (exact), so that with the fused option an
element-wise op is compiled by Inductor together with them (slow on a cold Inductor cache). Each module runs under our runtime
with each option set (``OPTION_SETS``) and under the TorchScript interpreter (the oracle,
the traced or scripted module itself, not frozen), with the calls of ``check.CALLS``:
the sample's tensors (A), A again, A' (other values, same shapes), B (another sample's
tensors, other shapes), A again. Every call checks that our results equal the oracle's,
that our inputs after the call equal the oracle's inputs after it, and that the results of
earlier calls are unchanged.

``cases`` turns OpInfos into cases, ``check`` runs one case, ``runner`` runs OpInfos in
crash-safe subprocesses, ``__main__`` is the command (``python -m tools.opdb --help``).
"""
