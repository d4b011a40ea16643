"""glibc's allocator, as longbert sets it: freed memory kept for reuse (`keep_freed_memory`, which every command
calls at start-up) and handed back to the operating system (`trim_heap`). Standard library only: the CLI's start-up
imports it, and `longbert --help` loads no torch."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEPT_BLOCK_BYTES = 2**30


def keep_freed_memory() -> bool:
    """Let glibc's malloc serve blocks of up to 1 GiB from its heap and keep what is freed, instead of mapping each
    large block fresh from the kernel and handing it back when freed. A forward pass allocates and frees activations
    of tens of MB per layer; mapped fresh, every page of them faults on first touch. On the 2-core CPU with AVX-512
    masked, 64 long IMDb reviews: longbert fp32 8.96 -> 9.81 documents/s, int8 13.9 -> 14.7, belt-nlp in the same
    process 5.83 -> 6.68 (benchmarks/bench_belt.py --emulate-avx2 [--keep-freed-memory]). The cost: the process's
    memory stays near its peak once it got there. Every `longbert` command calls this; from Python, call it once.
    Returns True where it took effect (glibc), False elsewhere (nothing changes there)."""
    if platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, KEPT_BLOCK_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, KEPT_BLOCK_BYTES))


def trim_heap() -> bool:
    """Hand the heap's freed pages back to the operating system (glibc's malloc_trim); False where there is no glibc.

    Why: a CPU training step frees its activations (hundreds of MB, of a different size every step), but glibc keeps
    freed heap memory, fragmented, so the resident size climbs step after step. Measured for sliding batches of 16
    IMDb reviews (benchmarks/bench_training.py, "sliding memory"): 1.7 GB resident after the first step and 3.5 GB
    after the 30th, 3.7 GB peak; trimmed after every step (`train.trim_heap`), 0.8 and 1.4 GB, 3.0 GB peak, 12% fewer
    tokens a second (the call itself takes about 0.1 s; the freed pages are faulted in again at the next step)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def _malloc_trim():
    global _TRIM
    if _TRIM is False:
        _TRIM = None
        if platform.system() == "Linux" and (platform.libc_ver()[0] == "glibc"):
            try:
                _TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            except (OSError, AttributeError):
                _TRIM = None
    return _TRIM


_TRIM = False  # not looked up yet
