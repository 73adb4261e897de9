"""Build the runtime for one network of a model set according to the config."""

from __future__ import annotations

from pathlib import Path

from ocrforge.config import EngineConfig
from ocrforge.runtimes.base import Runtime


def build_runtime(role: str, path: Path, cfg: EngineConfig) -> Runtime:
    """role: det | rec | cls. ONNX precision variants are built (and cached) on first use."""
    if cfg.runtime == "torch":
        from ocrforge.runtimes.torch import build_torch_runtime

        return build_torch_runtime(role, path, cfg)
    from ocrforge.runtimes.onnxruntime import OrtRuntime

    threads = getattr(cfg, f"{role}_threads", None)
    if threads is not None:
        cfg = cfg.with_(intra_op_threads=threads)
    precision = getattr(cfg, f"{role}_precision")
    if precision != "fp32":
        from ocrforge.optimize.artifacts import artifact_for

        path = artifact_for(role, path, precision, cfg)
    return OrtRuntime(path, cfg, precision)
