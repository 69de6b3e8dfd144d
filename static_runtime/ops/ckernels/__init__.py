"""Kernels of our own, in C, compiled on the user's machine for its CPU: candidates for the
measured kernel choice (``ops/kernels.py``) where no kernel PyTorch ships comes close to what
the CPU can do.

Why: at batch 1 every kernel PyTorch 2.13 offers for a depthwise convolution costs ~18 µs a
call on the AMD EPYC we develop on (oneDNN's fixed cost around a ~1 µs primitive; ATen's
channels-last path 25–30 µs), where ONNX Runtime takes 3.6–10 µs (``benchmarks/
conv_paths.py``). A direct loop over a channels-last tensor, vectorised across channels, takes
3.4–18 µs at those sizes — including its call from Python.

How: the C sources beside this file are compiled once per machine and CPU by the system C
compiler (``$CC``, else ``cc``) with ``-O3 -march=native`` (GCC's vector extensions, so the
same source vectorises for AVX-512, AVX2 or NEON), into the kernel cache directory
(``ops/kernels.py``'s, under ``native/``), named by a hash of the sources, flags and CPU; a
second process loads the library it finds, without a compiler. The build takes a file lock,
so processes sharing a cache compile it once; a new build deletes all but the newest few. Without a working compiler the kernels are simply absent
(one warning): the measured choice then chooses among PyTorch's kernels, as before.

The kernels are called through ``ctypes`` (which releases the GIL for the call, so runtimes of
a pool run them concurrently). Every wrapper checks dtype, device, rank and layout before
handing a pointer to C; a kernel never sees a tensor it could read out of bounds.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import fcntl
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import torch

from static_runtime.ops.kernel_cache import cache_path
from static_runtime.ops.kernels import cpu_identity

#: What the library is built from (all hashed; the .c files compiled).
_FILES = ("act.h", "attention.c", "depthwise.c", "eltwise.c", "gemm.c", "norms.c",
          "recurrent.c")
_FLAG_SETS = (["-O3", "-march=native"], ["-O3", "-mcpu=native"], ["-O3"])
#: Where the CPU has AVX-512, first a build that moves 64 bytes at once: every kernel loads
#: and stores a 16-float vector by a 64-byte ``memcpy``, and GCC (12 and later) tuned for a
#: CPU that prefers 256-bit vectors (``-march=native`` on Intel's Skylake-SP to Sapphire
#: Rapids) expands it into two 32-byte stores to the stack and one 64-byte load of them — a
#: failed store forward on every vector load (L2 normalisation of 256 rows of 16 floats:
#: 18.5 → 8.0 µs on a Cascade Lake Xeon). A compiler that does not know the options (clang,
#: older GCC) fails that build, and the next set is built.
_WIDE_MOVES = ["-O3", "-march=native", "-mmove-max=512", "-mstore-max=512"]


def _flag_sets() -> list[list[str]]:
    """The flag sets to build with, the preferred first."""
    wide = platform.machine() in ("x86_64", "AMD64") \
        and torch.backends.cpu.get_cpu_capability() == "AVX512"
    return [_WIDE_MOVES, *_FLAG_SETS] if wide else list(_FLAG_SETS)


#: ``-ffp-contract=fast``: ISO C mode (``-std=c11``) forbids fusing ``a * b + c`` into one
#: multiply-add, and GCC then issues a multiply and an add: on CPUs whose adds share the FMA
#: ports (Intel's) half the throughput; 151 → 192 GFLOP/s on a K = 32 product here.
_BASE_FLAGS = ["-std=c11", "-ffp-contract=fast", "-fPIC", "-shared", "-fno-math-errno"]
#: Set to "0" to never compile or load our own kernels (PyTorch's are then the only candidates).
ENV_SWITCH = "STATIC_RUNTIME_NATIVE_KERNELS"

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_tried = False
_why_not: str | None = None


def library() -> ctypes.CDLL | None:
    """The compiled kernels, built on first use; None (with ``why_unavailable()`` saying
    why) when switched off or when no compiler could build them."""
    global _library, _tried, _why_not
    if _tried:
        return _library
    with _lock:
        if not _tried:
            try:
                _library = _load()
            except _Unavailable as e:
                _why_not = str(e)
                if os.environ.get(ENV_SWITCH) != "0":
                    warnings.warn(f"static_runtime: our own C kernels are unavailable ({e}); "
                                  "only PyTorch's kernels are measured", RuntimeWarning,
                                  stacklevel=2)
            _tried = True
    return _library


def _required_library() -> ctypes.CDLL:
    """The compiled kernels, for a caller that cannot go on without them."""
    lib = library()
    if lib is None:
        raise RuntimeError(f"our own C kernels are unavailable: {why_unavailable()}")
    return lib


def available() -> bool:
    return library() is not None


def why_unavailable() -> str | None:
    return _why_not if not available() else None


class _Unavailable(Exception):
    pass


@functools.cache
def source_digest() -> str:
    """A digest of our kernels' sources and the flags of the build loaded: a choice measured
    with other kernels than these (another version of this package, or another build of it)
    is not a choice among these (``KernelChooser``)."""
    library()
    here = Path(__file__).resolve().parent
    recipe = b"".join((here / name).read_bytes() for name in _FILES)
    if _built_with != _FLAG_SETS[0]:  # (the digest of a plain ``-march=native`` build as before)
        recipe += " ".join(_built_with).encode()
    return hashlib.sha256(recipe).hexdigest()[:12]


#: the flags of the build loaded (``_load``)
_built_with: list[str] = []


def _load() -> ctypes.CDLL:
    """A build for these sources, flags and CPU from the cache directory, else a new one (the
    compiler's version is not in the name: a build stays valid across compiler updates). The
    flag sets are tried in order: a set's build is loaded if it exists, made if it does not
    and has not failed here before (a ``.failed`` file beside it says it did), else the next
    set is tried."""
    global _built_with
    if os.environ.get(ENV_SWITCH) == "0":
        raise _Unavailable(f"{ENV_SWITCH}=0")
    here = Path(__file__).resolve().parent
    source = b"".join((here / name).read_bytes() for name in _FILES)
    directory = cache_path().parent / "native"
    compiler = os.environ.get("CC") or "cc"
    has_compiler = shutil.which(compiler) is not None
    errors = []
    for flags in _flag_sets():
        digest = hashlib.sha256(b"\0".join([source, " ".join([*flags, *_BASE_FLAGS]).encode(),
                                           cpu_identity().encode()])).hexdigest()[:16]
        target = directory / f"libsr_kernels-{digest}.so"
        failed = target.with_suffix(".failed")
        if not target.exists():
            if not has_compiler or failed.exists():
                continue
            try:
                _build(compiler, flags, [here / name for name in _FILES if name.endswith(".c")],
                       target)
            except (OSError, subprocess.SubprocessError) as e:
                detail = getattr(e, "stderr", "") or str(e)
                last = detail.strip().splitlines()[-1] if detail.strip() else str(e)
                errors.append(f"{' '.join(flags)}: {last}")
                if isinstance(e, subprocess.CalledProcessError):
                    # (the compiler refused: it will again; a full disk or a timeout may not)
                    with contextlib.suppress(OSError):
                        failed.write_text(last + "\n", encoding="utf-8")
                continue
        try:
            lib = _declare(ctypes.CDLL(str(target)))
        except (OSError, AttributeError) as e:
            errors.append(f"{target.name}: {e}")
            continue
        _built_with = flags
        return lib
    why = f"{compiler} could not build them" if has_compiler else \
        f"no C compiler {compiler!r} on PATH (set $CC)"
    raise _Unavailable("; ".join([why, *errors]))


def _build(compiler: str, flags: list[str], sources: list[Path], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
        if target.exists():  # another process built it while we waited
            return
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".build.", suffix=".so")
        os.close(fd)
        try:
            subprocess.run([compiler, *flags, *_BASE_FLAGS, "-o", tmp, *map(str, sources)],
                           capture_output=True, text=True, check=True, timeout=300)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _forget_old_builds(target)


#: Builds kept in the cache directory: other versions of this package, compilers or CPUs
#: sharing a home directory; older ones are deleted when a new one is made.
_KEEP_BUILDS = 4


def _forget_old_builds(current: Path) -> None:
    builds = sorted(current.parent.glob("libsr_kernels-*.so"), key=lambda p: p.stat().st_mtime,
                    reverse=True)
    for old in builds[_KEEP_BUILDS:]:
        if old != current:
            for path in (old, old.with_suffix(".lock"), old.with_suffix(".failed")):
                # a process that loaded it keeps its mapping; one about to load it builds anew
                path.unlink(missing_ok=True)


_I64, _PTR = ctypes.c_int64, ctypes.c_void_p


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    for name in ("sr_depthwise_conv2d_block", "sr_gemm_block"):
        fn = getattr(lib, name)
        fn.restype = None
        fn.argtypes = [_PTR, _PTR, _PTR]
    lib.sr_gemm_rows.restype = None
    lib.sr_gemm_rows.argtypes = [_PTR, _PTR, _I64, _PTR]
    for name in ("sr_conv2d_block", "sr_gemm_gated_block"):
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [_PTR, _PTR, _PTR]
    lib.sr_index_add_rows.restype = ctypes.c_int
    lib.sr_index_add_rows.argtypes = [_PTR, _I64, _I64, _PTR, _I64, _PTR]
    lib.sr_rotary_add.restype = None
    lib.sr_rotary_add.argtypes = [_PTR, _PTR, _PTR, _PTR]
    lib.sr_index_add_rows_scaled.restype = ctypes.c_int
    lib.sr_index_add_rows_scaled.argtypes = [_PTR, _I64, _I64, _PTR, _I64, _PTR, _PTR]
    lib.sr_embedding_bags.restype = ctypes.c_int
    lib.sr_embedding_bags.argtypes = [_PTR, ctypes.c_int, _PTR, _I64, _I64, _I64, _I64,
                                       _I64, _PTR]
    lib.sr_embedding_bag_rows.restype = ctypes.c_int
    lib.sr_embedding_bag_rows.argtypes = [_PTR, ctypes.c_int, _I64, _I64, _PTR, ctypes.c_int,
                                          _I64, _I64, _I64, _I64, _PTR, _PTR]
    lib.sr_embeddings.restype = ctypes.c_int
    lib.sr_embeddings.argtypes = [_PTR, ctypes.c_int, _I64, _I64, _I64, _PTR, _PTR]
    lib.sr_conv2d_res_block.restype = ctypes.c_int
    lib.sr_conv2d_res_block.argtypes = [_PTR, _PTR, _PTR, _PTR]
    lib.sr_gemm_res_rows.restype = None
    lib.sr_gemm_res_rows.argtypes = [_PTR, _PTR, _PTR, _I64, _PTR]
    lib.sr_rms_norm.restype = None
    lib.sr_rms_norm.argtypes = [_PTR, _PTR, _PTR, _I64, _I64, ctypes.c_float]
    lib.sr_layer_norm.restype = None
    lib.sr_layer_norm.argtypes = [_PTR, _PTR, _PTR, _PTR, _I64, _I64, ctypes.c_float]
    lib.sr_l2_normalize.restype = None
    lib.sr_l2_normalize.argtypes = [_PTR, _PTR, _I64, _I64, ctypes.c_float]
    lib.sr_recurrent_layer.restype = ctypes.c_int
    lib.sr_recurrent_layer.argtypes = [_PTR, _I64, _I64, _PTR, _PTR, _PTR, _PTR, _PTR, _I64,
                                       _I64, _I64, _I64, _I64, ctypes.c_int]
    lib.sr_activation.restype = None
    lib.sr_activation.argtypes = [_PTR, _PTR, _I64, ctypes.c_int]
    lib.sr_attention.restype = ctypes.c_int
    lib.sr_attention.argtypes = [_PTR, _PTR, _PTR, _PTR, _PTR, _PTR, ctypes.c_float, _PTR]
    lib.sr_rnn_cell.restype = ctypes.c_int
    lib.sr_rnn_cell.argtypes = [_PTR, _PTR, _PTR, _PTR, _PTR, _PTR]
    lib.sr_gemm_pack.restype = None
    lib.sr_gemm_pack.argtypes = [_PTR, _I64, _I64, _I64, _PTR]
    lib.sr_gemm_nr.restype = _I64
    lib.sr_gemm_nr.argtypes = []
    return lib


def _block(*values: int) -> tuple[array.array, int]:
    """A kernel's per-shape arguments as one int64 array (kept alive by the caller) and its
    address: ctypes converts each argument of a call (~0.07 µs apiece), so a kernel takes
    its input, its output and this block — three. (An ``array`` of C ``long long``: made in
    a third of a ctypes array's time, on the request path for each new size.)"""
    block = array.array("q", values)
    return block, block.buffer_info()[0]


#: Per-shape entries a kernel's cache keeps (argument blocks, calls bound to a shape): the
#: oldest is dropped for a new one past this many (a caller holds the block it uses, so
#: dropping one under a concurrent call is safe). As many as a dynamic batcher's batch
#: sizes (1…512) or a text model's lengths: an entry dropped and made again is objects the
#: garbage collector promotes, and traffic of more sizes than the cache holds made them at
#: every call of a size not held (with 256, and the whole cache dropped when full, a full
#: collection of the process every ~3,000 calls on the recommender of
#: ``benchmarks/gc_pauses.py``). An entry is a few hundred bytes.
_MAX_SHAPES = 1024


def remember(cache: dict, key, value):
    """``cache[key] = value`` in a cache of at most ``_MAX_SHAPES`` entries (the oldest
    dropped); returns ``value``. A ``torch.Size`` in the key (itself or an element) is kept
    as the plain tuple it equals: a plain tuple of numbers is one the cyclic garbage
    collector stops tracking, and such entries are made for every size."""
    if len(cache) >= _MAX_SHAPES:
        try:
            del cache[next(iter(cache))]
        except (RuntimeError, KeyError, StopIteration):  # (another thread changed it)
            pass
    # (on the request path several times for each new size: a loop that stops at the first
    # ``Size``, not a generator over the key — 1.3 µs against 2.9 for ``(Size, threads)``)
    kind = type(key)
    if kind is _Size:
        key = tuple(key)
    elif kind is tuple or isinstance(key, tuple):
        for k in key:
            if type(k) is _Size:
                key = tuple([tuple(k) if type(k) is _Size else k for k in key])
                break
    cache[key] = value
    return value


_Size = torch.Size


ACTIVATIONS = {"none": 0, "relu": 1, "relu6": 2, "hardswish": 3, "sigmoid": 4, "silu": 5,
               "gelu": 6, "tanh": 7, "gelu_tanh": 8}


class Gemm:
    """``act(x · weight_t + bias)`` by our own kernel (``gemm.c``) for a constant (K, N)
    ``weight_t``, packed once into the kernel's panels; ``act`` a key of ``ACTIVATIONS``."""

    def __init__(self, weight_t: torch.Tensor, bias: torch.Tensor | None, act: str = "none"):
        lib = _required_library()
        if act not in ACTIVATIONS:
            raise ValueError(f"Gemm applies {sorted(ACTIVATIONS)}, not {act!r}")
        if weight_t.dim() != 2 or weight_t.dtype is not torch.float32:
            raise ValueError(f"Gemm takes a float32 (K, N) weight, got {weight_t.dtype} "
                             f"{tuple(weight_t.shape)}")
        self.k, self.n = k, n = weight_t.shape
        nr = lib.sr_gemm_nr()
        panels = -(-n // nr)
        source = weight_t.detach().contiguous()
        self.packed = torch.empty(max(1, panels * nr * k))
        lib.sr_gemm_pack(source.data_ptr(), n, k, n, self.packed.data_ptr())
        self.bias = None
        if bias is not None:
            if bias.shape != (n,) or bias.dtype is not torch.float32:
                raise ValueError(f"Gemm: the bias must be float32 ({n},), got {bias.dtype} "
                                 f"{tuple(bias.shape)}")
            self.bias = torch.zeros(panels * nr)
            self.bias[:n] = bias.detach()
        self.act = ACTIVATIONS[act]
        self._run = lib.sr_gemm_rows
        self._run_res = lib.sr_gemm_res_rows
        #: (row stride of x, row stride of the result) → the calls' argument block (the row
        #: count is an argument of its own: one block serves every row count)
        self._blocks: dict[tuple[int, int], tuple] = {}
        self.block, self.address = self._block_for(max(k, 1), n)

    def _block_for(self, lda: int, ldc: int) -> tuple:
        """(the argument block, its address); the caller holds it while the kernel runs (a
        concurrent call may drop it from the cache meanwhile)."""
        key = (lda, ldc)
        found = self._blocks.get(key)
        if found is None:
            found = remember(self._blocks, key, _block(
                lda, self.packed.data_ptr(), 0 if self.bias is None else self.bias.data_ptr(),
                ldc, self.k, self.n, self.act))
        return found

    def kernel(self):
        """``(x2, o2) -> o2``: ``x2`` a float32 CPU (M, K) matrix with unit column stride,
        ``o2`` a contiguous (M, N) float32 tensor to write, or None to allocate one."""
        run, k, n, block_for = self._run, self.k, self.n, self._block_for
        f32, empty = torch.float32, torch.empty

        def gemm(x2: torch.Tensor, o2: torch.Tensor | None) -> torch.Tensor:
            shape = x2.shape
            if x2.dtype is not f32 or len(shape) != 2 or shape[1] != k or not x2.is_cpu:
                raise ValueError(f"Gemm takes a float32 CPU (M, {k}) matrix, got {x2.dtype} "
                                 f"{tuple(shape)} on {x2.device}")
            if x2.is_contiguous():
                lda = k
            else:
                strides = x2.stride()
                if k > 1 and strides[1] != 1:
                    raise ValueError(f"Gemm takes a matrix with unit column stride, got "
                                     f"strides {strides}")
                lda = strides[0]
            m = shape[0]
            if o2 is None:
                o2 = empty(m, n)
            elif o2.dtype is not f32 or not o2.is_contiguous() or o2.shape != (m, n) \
                    or not o2.is_cpu:
                raise ValueError(f"Gemm writes a contiguous float32 ({m}, {n}) CPU tensor, "
                                 f"got {o2.dtype} {tuple(o2.shape)}")
            block = block_for(max(lda, 1), n)
            run(x2.data_ptr(), o2.data_ptr(), m, block[1])
            return o2

        gemm.keep = self  # type: ignore[attr-defined]  # the packed weight's owner
        return gemm

    def with_residual(self, m: int):
        """``(x, o, r) -> None`` for ``m`` rows writing ``act(x · W + bias + r)``: ``r`` a
        contiguous float32 residual of ``o``'s shape (``o`` itself allowed), which the
        epilogue adds before the activation. Unchecked, as ``direct``."""

        # (bound by defaults, ``_owner`` what the address names: kept per size, and a
        # closure's cells and an attribute's dict are objects the collector tracks)
        def with_residual(x: torch.Tensor, o: torch.Tensor, r: torch.Tensor,
                          run=self._run_res, m=m, address=self.address, _owner=self) -> None:
            run(x.data_ptr(), o.data_ptr(), r.data_ptr(), m, address)

        return with_residual

    def direct(self, m: int):
        """``(x, o) -> None`` for ``m`` rows, checking nothing: the caller has checked that
        ``x`` is a contiguous float32 CPU tensor of ``m`` rows of K (any rank) and ``o`` a
        contiguous float32 CPU tensor of ``m`` rows of N. ``kernel()``'s checks and argument
        block lookup cost ~0.9 µs a call, four times a 1 × 64 · 64 × 64 product's own time;
        this is the call a caller that knows the shapes makes on every call after its first.
        (Made for each new row count: a function and nothing else, the block is shared.)"""

        def direct(x: torch.Tensor, o: torch.Tensor, run=self._run, m=m,
                   address=self.address, _owner=self) -> None:
            run(x.data_ptr(), o.data_ptr(), m, address)

        return direct

    def conv1x1(self):
        """``x -> act(conv2d(x, w, bias))`` for a 1 × 1, stride-1, unpadded, ungrouped
        convolution whose (out, in, 1, 1) weight this was made from as ``w.view(out, in).t()``:
        a channels-last (N, C, H, W) input is the (N·H·W, C) matrix, and the (N·H·W, out)
        product written row by row is the channels-last result. The result is channels-last
        (a channels-first input is converted first)."""
        from static_runtime.ops.ckernels.convs import channels_last_strides, unchecked

        run, k, n, address = self._run, self.k, self.n, self.address
        run_block = _required_library().sr_gemm_block  # (the row count in the block)
        f32, cl, empty_strided = torch.float32, torch.channels_last, torch.empty_strided

        def conv1x1(x: torch.Tensor) -> torch.Tensor:
            if x.dtype is not f32 or x.dim() != 4 or x.shape[1] != k or not x.is_cpu:
                raise ValueError(f"a 1 × 1 convolution of {k} input channels takes a float32 "
                                 f"4-D CPU tensor, got {x.dtype} {tuple(x.shape)} on {x.device}")
            x = x.contiguous(memory_format=cl)
            batch, _, h, w = x.shape
            # empty_strided: half the cost of empty(memory_format=) (~0.8 against 1.3 µs)
            out = empty_strided((batch, n, h, w), channels_last_strides(n, h, w))
            run(x.data_ptr(), out.data_ptr(), batch * h * w, address)
            return out

        def direct_for(shape: torch.Size):
            """``x -> result`` for channels-last float32 CPU inputs of ``shape``, unchecked."""
            batch, _, h, w = shape
            out_shape, strides = (batch, n, h, w), channels_last_strides(n, h, w)
            # (the row count at the block's end: the call takes the three arguments every
            # convolution's unchecked call does)
            block, at = _block(*self.block, batch * h * w)
            return unchecked(run_block, out_shape, strides, at, (self, block))

        conv1x1.keep = self  # type: ignore[attr-defined]
        conv1x1.direct_for = direct_for  # type: ignore[attr-defined]
        return conv1x1


# (after what they are built on)
from static_runtime.ops.ckernels.convs import Conv2d as Conv2d
from static_runtime.ops.ckernels.convs import depthwise_conv2d as depthwise_conv2d
from static_runtime.ops.ckernels.convs import depthwise_weight as depthwise_weight
