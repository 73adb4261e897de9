"""Which CPU runtime runs the ONNX files when ``runtime.backend`` is "auto" (the default).

OpenVINO, where it is installed and the CPU computes BF16 natively (AVX512_BF16 or AMX): there
it read 1.17-1.84x the pages/s of ONNX Runtime FP32 on two cores at CER within 0.3 points
(docs/BENCHMARKS.md, "auto"). Elsewhere ONNX Runtime: OpenVINO in FP32 was not faster. Built
artifacts (INT8/FP16 files of ``ocrforge build``) stay on ONNX Runtime, where they were measured,
and so do sessions asked for other execution providers.
"""

from __future__ import annotations

import functools

from ocrforge.config import RuntimeConfig


@functools.cache
def openvino_native_bf16() -> bool:
    """OpenVINO is importable and its CPU plugin reports native BF16 for this CPU."""
    try:
        import openvino as ov

        caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except Exception:  # not installed, or a CPU plugin that does not load
        return False
    return "BF16" in [str(c) for c in caps]


def cpu_backend(settings: RuntimeConfig, precision: str = "fp32") -> str:
    """"onnxruntime" or "openvino": the runtime that opens an ONNX file under ``settings``."""
    if settings.backend != "auto":
        return settings.backend
    if precision != "fp32" or [p.lower() for p in settings.providers] != ["cpu"]:
        return "onnxruntime"
    return "openvino" if openvino_native_bf16() else "onnxruntime"
