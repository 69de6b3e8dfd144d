"""Strides of dense tensors: laid out in a given order of dimensions, and as PyTorch's
``TensorIterator`` lays out the result of an elementwise operator (what a kernel of ours
must give where it replaces one); whether a layout is dense, whether sizes broadcast into a
shape."""

from __future__ import annotations


def dense_strides(shape, order: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a dense tensor of ``shape`` whose dimensions run in ``order``, outermost
    first (a dimension of size 1 counts as 1, as PyTorch's contiguous strides do)."""
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def _contiguous(shape, strides) -> bool:
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def is_dense(shape, strides) -> bool:
    """Whether a tensor of ``shape`` and ``strides`` holds every element of its span once, in
    some order of its dimensions (a permutation of a row-major tensor; dimensions of one
    element aside)."""
    order = sorted(range(len(shape)), key=lambda d: strides[d], reverse=True)
    return _contiguous([shape[d] for d in order], [strides[d] for d in order])


def broadcasts_into(sizes, shape) -> bool:
    """Whether a tensor of ``sizes`` broadcasts to ``shape`` without widening it."""
    return len(sizes) <= len(shape) and all(
        s == 1 or s == n for s, n in zip(reversed(sizes), reversed(shape)))


def _channels_last(shape, strides) -> bool:
    if len(shape) != 4:
        return False
    expected = 1
    for d in (1, 3, 2, 0):
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


def iterator_strides(shape: tuple, operands: list) -> tuple:
    """The strides (in elements) PyTorch's ``TensorIterator`` gives the result of an
    elementwise operator of ``operands`` — ``(shape, strides)`` pairs of one dtype,
    broadcast to ``shape`` — as its fast set-ups and dimension ordering decide them (a
    dimension of 1 breaks ties; ``tests/passes/test_rotary.py`` checks it against ATen).
    Every operand dense or broadcast; no dimension of 0."""
    n = len(shape)
    if all(tuple(s) == shape for s, _ in operands):
        if all(_contiguous(shape, st) for _, st in operands):
            return dense_strides(shape, tuple(range(n)))
        if all(_channels_last(shape, st) for _, st in operands):
            return dense_strides(shape, (0, 2, 3, 1))
        if all(tuple(st) == tuple(operands[0][1]) for _, st in operands):
            return tuple(operands[0][1])
    full = []
    for s, st in operands:
        lead = n - len(s)
        full.append([0] * lead + [0 if s[i] == 1 and shape[lead + i] != 1 else st[i]
                                  for i in range(len(s))])

    def should_swap(d0: int, d1: int) -> int:
        for st in full:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(n - 1, -1, -1))  # (innermost first, as TensorIterator orders them)
    for i in range(1, n):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return dense_strides(shape, tuple(reversed(perm)))
