"""Open the runtime for one network file: a path and runtime settings in, a Runtime out.

Never builds anything: the caller passes the file to run (a reference ONNX model or a built
artifact) or, for the torch runtime, the native module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ocrforge.config import RuntimeConfig
from ocrforge.runtimes.base import Runtime
from ocrforge.runtimes.choice import cpu_backend


def open_onnx(path: Path, settings: RuntimeConfig, *, precision: str = "fp32",
              threads: int | None = None, top1: tuple[int, ...] | None = None,
              u8_input: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
              kernel_cache: int = 100) -> Runtime:
    """``top1``: where the runtime can (OpenVINO), ``run`` returns the top-1 index and value
    along the output's last axis plus these columns of it, not the whole output (which ONNX
    Runtime still returns: callers take both). ``u8_input`` (scale, offset per channel): where
    the runtime can (OpenVINO; it then has ``input_u8_nhwc`` True), ``run`` takes uint8 NHWC
    and computes ``x * scale + offset`` itself; elsewhere the caller normalises.
    ``kernel_cache``: OpenVINO's prepared kernels kept (per node and input shape)."""
    if threads is not None:
        settings = settings.model_copy(update={"intra_op_threads": threads})
    if cpu_backend(settings, precision) == "openvino":
        from ocrforge.runtimes.openvino import OpenVinoRuntime

        return OpenVinoRuntime(path, settings, precision, top1=top1, u8_input=u8_input,
                               kernel_cache=kernel_cache)
    from ocrforge.runtimes.onnxruntime import OrtRuntime

    return OrtRuntime(path, settings, precision)


def open_torch(module: Any, settings: RuntimeConfig, *, name: str = "", share: Any = None) -> Runtime:
    """``share``: another runtime's ``graph_share`` (runtime.shared_graph_pool), else None."""
    try:
        from ocrforge.runtimes.torch import TorchRuntime
    except ModuleNotFoundError as e:
        if e.name == "torch":
            raise RuntimeError("runtime 'torch' needs PyTorch: pip install 'ocrforge[torch]'") from None
        raise
    return TorchRuntime(module, settings, name=name, share=share)
