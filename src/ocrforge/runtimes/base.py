"""The small protocols every runtime implements. A runtime runs one network; it knows nothing
about OCR (no roles, no output heads)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Runtime(Protocol):
    """Runs one network: a float32 NCHW batch in, the first output as float32 out (opened with
    ``factory.open_onnx(..., top1=...)``, an OpenVINO runtime returns its top-1 tuple instead;
    opened with ``u8_input``, it also takes uint8 NHWC and has ``input_u8_nhwc`` True)."""

    name: str
    precision: str
    device: str

    def run(self, batch: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class DeviceRuntime(Runtime, Protocol):
    """A runtime that also takes and returns tensors on its device (no host round trip): what
    the GPU scheduler uses. ``dtype`` is the dtype the network computes in."""

    dtype: Any

    def forward(self, x: Any, post: Any = None) -> Any: ...

    def warmup(self, shapes: list[tuple[int, ...]], post: Any = None) -> float: ...

    def needs_graph(self, shape: tuple[int, ...], post: Any = None, share: float = 0.5) -> bool: ...
