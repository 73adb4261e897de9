"""Small constant tensors (normalisation vectors, filter taps) cached per device and dtype.

Building them per page with ``torch.tensor(..., device=cuda)`` copies from pageable host memory,
and such a copy waits for every kernel already queued on the stream: the GPU driver thread then
stalls once per page and the CPU and GPU take turns instead of overlapping."""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=256)
def _cached(values: tuple[float, ...], shape: tuple[int, ...], device: Any, dtype: Any) -> Any:
    import torch

    return torch.tensor(values, dtype=dtype, device=device).view(shape)


def constant(values: Any, shape: tuple[int, ...], like: Any, dtype: Any = None) -> Any:
    """``values`` (a flat sequence) as a tensor of ``shape`` on ``like``'s device and dtype
    (or ``dtype``), made once per (values, shape, device, dtype); callers must not modify it
    in place."""
    flat = tuple(float(v) for v in (values.reshape(-1) if hasattr(values, "reshape") else values))
    return _cached(flat, tuple(shape), like.device, like.dtype if dtype is None else dtype)
