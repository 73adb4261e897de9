"""Hand memory that the process freed back to the system (glibc's ``malloc_trim``).

glibc keeps freed heap pages resident while any live block sits above them, and after the first
large free it serves buffers of up to 32 MB from the heap instead of fresh mappings. A long page
stream then grows by the recognition buffers of every group (measured: ~3 MB a page over an
A4 PDF with 4-page groups; docs/BENCHMARKS.md "Memory"), although nothing is leaked. Trimming
after each page group keeps resident memory at the working set. Elsewhere (musl, macOS,
Windows) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys


@functools.cache
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def release_free_heap() -> bool:
    """Return free heap pages to the system; True where glibc did it."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True
