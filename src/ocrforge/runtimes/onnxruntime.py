"""ONNX Runtime execution with every session knob exposed through EngineConfig."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ocrforge.config import RuntimeConfig
from ocrforge.runtimes.cpu_budget import default_threads

if os.environ.get("ORT_DISABLE_TELEMETRY", "1") != "0":  # ocrforge/__init__.py sets it
    ort.disable_telemetry_events()  # for when onnxruntime was imported before ocrforge

_PROVIDER_ALIASES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "dml": "DmlExecutionProvider",
    "directml": "DmlExecutionProvider",
    "rocm": "ROCMExecutionProvider",
}

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def provider_names(names: list[str]) -> list[str]:
    """Map short names ("cuda", "tensorrt") to ONNX Runtime provider names and check them."""
    available = ort.get_available_providers()
    out = []
    for n in names:
        full = _PROVIDER_ALIASES.get(n.lower(), n)
        if full not in available:
            raise RuntimeError(
                f"ONNX Runtime execution provider {full!r} is not available in this install "
                f"(available: {', '.join(available)}). For CUDA/TensorRT install onnxruntime-gpu "
                "and the matching CUDA/TensorRT libraries."
            )
        out.append(full)
    if "CPUExecutionProvider" not in out:
        out.append("CPUExecutionProvider")
    return out


def session_options(cfg: RuntimeConfig) -> ort.SessionOptions:
    so = ort.SessionOptions()
    # never 0: ONNX Runtime's own count pins threads outside this process's CPU set
    so.intra_op_num_threads = cfg.intra_op_threads or default_threads()
    so.inter_op_num_threads = cfg.inter_op_threads
    so.graph_optimization_level = _OPT_LEVELS[cfg.graph_optimization]
    so.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL
        if cfg.execution_mode == "parallel"
        else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    so.enable_mem_pattern = cfg.enable_mem_pattern
    so.enable_cpu_mem_arena = cfg.enable_cpu_mem_arena
    so.log_severity_level = 3
    if not cfg.allow_spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def _shrink_options() -> ort.RunOptions:
    """Run options that give the CPU arena's unused chunks back at the end of the run."""
    ro = ort.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return ro


class OrtRuntime:
    """One ONNX model in one InferenceSession."""

    def __init__(self, model_path: str | Path, cfg: RuntimeConfig, precision: str = "fp32"):
        self.path = Path(model_path)
        self.precision = precision
        providers = provider_names(cfg.providers)
        self.device = "cpu" if providers[0] == "CPUExecutionProvider" else providers[0]
        self.name = f"onnxruntime[{providers[0]}]"
        self.session = ort.InferenceSession(
            str(self.path), sess_options=session_options(cfg), providers=providers
        )
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name
        self.run_options = _shrink_options() if cfg.shrink_arena and cfg.enable_cpu_mem_arena else None
        self._channels: int | None = None
        # an arena that every run keeps (no shrink after each run): release_memory gives it back
        self._kept_arena = cfg.enable_cpu_mem_arena and self.run_options is None

    def run(self, batch: np.ndarray) -> np.ndarray:
        out = self.session.run([self.output_name], {self.input_name: batch}, self.run_options)[0]
        if self._channels is None and batch.ndim == 4:
            self._channels = batch.shape[1]
        return out if out.dtype == np.float32 else out.astype(np.float32)

    def release_memory(self) -> None:
        """Give the arena's free chunks back now (a session that keeps its arena between runs):
        ONNX Runtime shrinks only at the end of a run, so this runs a 32x32 input with the
        shrink option. Only for fully convolutional NCHW networks that have run before."""
        if self._channels is None or not self._kept_arena:
            return  # nothing run yet, or every run already gave its arena back
        small = np.zeros((1, self._channels, 32, 32), np.float32)
        self.session.run([self.output_name], {self.input_name: small}, _shrink_options())
