"""A bound on what the GPU engine's process keeps on the card (``gpu.memory_limit_gb``).

PyTorch's caching allocator keeps every freed block for reuse, per stream and per graph pool.
On the real-page mix an engine with ~5.6 GiB allocated at its peak held ~28 GiB reserved (what
nvidia-smi shows; H100, 2026-12-06): page, crop and batch sizes vary, so cached blocks rarely fit
the next request exactly and new segments keep being made. With a limit the allocator gives
cached blocks back (cudaFree) whenever a new segment would pass it, and only when that cannot
make room does the allocation fail (the scheduler then halves the batch, ``with_oom_retry``).

The limit is the allocator's per-process fraction of the device, so it covers every engine of
the process on that device; the last one opened sets it.
"""

from __future__ import annotations

import torch


def apply_memory_limit(dev: torch.device, limit_gb: float | None) -> float | None:
    """Bound the caching allocator on ``dev`` to ``limit_gb`` GiB (None: no bound, the whole
    card); returns the fraction set, or None when nothing was set."""
    if limit_gb is None or dev.type != "cuda":
        return None
    total = torch.cuda.get_device_properties(dev).total_memory
    fraction = min(1.0, limit_gb * 2**30 / total)
    torch.cuda.set_per_process_memory_fraction(fraction, dev)
    return fraction
