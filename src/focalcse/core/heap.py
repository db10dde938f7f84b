"""Keeping freed memory in the process: glibc's malloc thresholds for a training process on the CPU.

By default glibc serves an allocation above its mmap threshold (128 KiB, rising adaptively to at most
32 MiB) with a fresh ``mmap`` and returns it to the kernel when freed, and trims the heap's top above
128 KiB. A training step allocates and frees the same large tensors every step: the word-embedding
gradient (30522 x 384 fp32, 47 MB, for all-MiniLM-L6-v2), the (B, heads, L, L) attention scores, the
FFN activations. Each fresh mapping is zero-filled page by page by the kernel on first touch, so
``torch.zeros(30522, 384)`` took 12 ms on the 2-core Intel Xeon kind against 1 ms for zeroing memory
already held (docs/performance.md). With both thresholds raised, freed blocks stay in the heap and the
next step reuses them.

The cost: the process keeps its high-water mark of memory for its lifetime (peak RSS is unchanged, the
RSS no longer falls between steps). Results cannot change: only where the memory comes from does.
Other C libraries (musl, macOS, Windows) are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Kept in the heap up to this size; glibc versions that cap the mmap threshold (at 32 MiB on 64-bit)
# refuse it, and the cap is set instead.
KEEP_BYTES = 1 << 30
GLIBC_MMAP_CAP = 32 << 20


@functools.cache
def keep_freed_memory() -> int:
    """Raise glibc's mmap and trim thresholds so freed memory stays in the process (once per process).
    Returns the mmap threshold set, in bytes; 0 where the C library is not glibc or refused."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (glibc only)
    except (OSError, AttributeError):
        return 0
    for size in (KEEP_BYTES, GLIBC_MMAP_CAP):
        if libc.mallopt(_M_MMAP_THRESHOLD, size) == 1:
            libc.mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES)
            return size
    return 0
