"""How much of a GPU this process's PyTorch allocator may take (gpu.memory_limit_gib).

PyTorch's caching allocator keeps freed blocks for reuse, per stream, so a GPU engine holds
more than it has allocated at any moment (8.2-8.7 GiB reserved for a 3.6 GiB peak, H100,
2026-12-07). A limit makes the allocator give cached blocks back before it asks for more,
and past it an allocation fails: the engine then splits its batches and holds fewer line
crops (scheduling/gpu.py), so it reads slower rather than taking the card. The CUDA context
and the libraries' own buffers (cuDNN, nvJPEG) come on top of it. The limit is per process:
every engine on a device in one process shares it (the last one set wins), and each engine
process of ``gpu.processes`` sets its own.
"""

from __future__ import annotations

GIB = 2**30


def memory_fraction(limit_bytes: float, total_bytes: int) -> float:
    """The share of the card that ``limit_bytes`` is, within (0, 1]."""
    if limit_bytes <= 0 or total_bytes <= 0:
        raise ValueError("a memory limit and the card's memory must be positive")
    return min(1.0, limit_bytes / total_bytes)


def limit_device_memory(device: str, gib: float | None) -> bool:
    """Hold this process's allocator on ``device`` to ``gib`` GiB (None: the whole card).
    False where there is nothing to limit (no limit asked, a CPU device, no CUDA)."""
    if not device.startswith("cuda"):
        return False
    import torch

    if not torch.cuda.is_available():
        return False
    dev = torch.device(device)
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(idx).total_memory
    frac = 1.0 if gib is None else memory_fraction(gib * GIB, total)
    torch.cuda.set_per_process_memory_fraction(frac, idx)
    return gib is not None
