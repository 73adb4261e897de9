"""INT8 post-training quantization with ONNX Runtime (static QDQ and dynamic).

Static: QDQ format, per-channel INT8 weights, UINT8 activations whose ranges come from
calibration inputs (MinMax, Entropy or Percentile). Nodes named in ``exclude`` stay float.
Dynamic: weights INT8 ahead of time, activation ranges computed at run time (only MatMul /
Gemm by default: dynamic Conv runs as ConvInteger, which is slower than float on CPU here).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx

METHODS = ("minmax", "entropy", "percentile")
# ops whose weights/activations ORT's QDQ quantizer handles (the rest pass through as float)
QUANT_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """ORT's quantizer logs a warning per tensor; keep builds readable. It also writes
    scratch files (sym_shape_infer_temp.onnx, <uuid>.data) into the working directory, so
    the call runs inside a temporary one (callers pass absolute paths)."""
    log = logging.getLogger()
    old = log.level
    log.setLevel(logging.ERROR)
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="ocrforge-quant-") as scratch:
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(cwd)
            log.setLevel(old)


def _calib_method(name: str):
    from onnxruntime.quantization import CalibrationMethod

    table = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
             "percentile": CalibrationMethod.Percentile}
    try:
        return table[name.lower()]
    except KeyError:
        raise ValueError(f"calibration method must be one of {', '.join(METHODS)}, not {name!r}") from None


class ArrayReader:
    """CalibrationDataReader over a list of input arrays (one model input)."""

    def __init__(self, input_name: str, samples: Sequence[np.ndarray]):
        self.input_name = input_name
        self.samples = list(samples)
        self._it = iter(self.samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        x = next(self._it, None)
        return None if x is None else {self.input_name: x}

    def rewind(self) -> None:
        self._it = iter(self.samples)

    def set_range(self, start_index: int, end_index: int) -> None:
        """Used by ORT's strided calibration (CalibStridedMinMax)."""
        self._it = iter(self.samples[start_index:end_index])

    def __len__(self) -> int:
        return len(self.samples)


def input_name(model_path: str | Path) -> str:
    m = onnx.load(str(model_path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    return next(i.name for i in m.graph.input if i.name not in inits)


def preprocess(src: str | Path, dst: str | Path) -> Path:
    """Opset >= 13 (per-channel QDQ needs it) and ORT's quantization pre-processing
    (constant folding, BN/Conv fusion, shape inference)."""
    from onnx import version_converter
    from onnxruntime.quantization.shape_inference import quant_pre_process

    m = onnx.load(str(src))
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 13)
    with tempfile.TemporaryDirectory(prefix="ocrforge-pre-") as tmp:
        mid = Path(tmp) / "opset.onnx"
        if opset < 13:
            m = version_converter.convert_version(m, 13)
        onnx.save(m, str(mid))
        with _quiet():
            # symbolic shape inference fails on PaddlePaddle exports with dynamic dims; ORT's
            # own optimizer + ONNX shape inference are enough for quantization
            quant_pre_process(str(mid), str(Path(dst).resolve()), skip_symbolic_shape=True)
    return Path(dst)


def quantize_static(pre_path: str | Path, out_path: str | Path, samples: Sequence[np.ndarray], *,
                    method: str = "minmax", exclude: Sequence[str] = (), per_channel: bool = True,
                    cache_path: str | Path | None = None, percentile: float = 99.999) -> Path:
    """Static QDQ INT8. ``cache_path`` keeps the activation ranges so that re-quantizing
    with another ``exclude`` list (a sensitivity sweep) does not re-run calibration."""
    from onnxruntime.quantization import QuantFormat, QuantType
    from onnxruntime.quantization import quantize_static as ort_quantize_static

    cal = _calib_method(method)
    reader = None
    if cache_path is None or not Path(cache_path).is_file():
        if not samples:
            raise ValueError("static INT8 needs calibration inputs (none were given)")
        reader = ArrayReader(input_name(pre_path), samples)
    extra: dict = {"CalibMovingAverage": False}
    if method == "minmax" and reader is not None and len(reader) > 4:
        # ORT keeps every intermediate tensor of every sample until the end of calibration
        # (gigabytes for rec/det); strides merge ranges every `stride` samples instead.
        # CalibStridedMinMax needs the sample count to be a multiple of the stride.
        stride = next(s for s in (4, 3, 2, 1) if len(reader) % s == 0)
        extra["CalibStridedMinMax"] = stride
    if method == "percentile":
        extra["CalibPercentile"] = percentile
    with _quiet():
        ort_quantize_static(
            str(Path(pre_path).resolve()), str(Path(out_path).resolve()), reader,
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel, activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8, nodes_to_exclude=list(exclude),
            op_types_to_quantize=None, calibrate_method=cal, extra_options=extra,
            calibration_cache_path=str(Path(cache_path).resolve()) if cache_path else None,
        )
    return Path(out_path)


def quantize_dynamic(src: str | Path, out_path: str | Path, *, op_types: Sequence[str] = ("MatMul", "Gemm"),
                     exclude: Sequence[str] = (), per_channel: bool = False) -> Path:
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic as ort_quantize_dynamic

    with _quiet():
        ort_quantize_dynamic(str(Path(src).resolve()), str(Path(out_path).resolve()),
                             weight_type=QuantType.QInt8,
                             op_types_to_quantize=list(op_types), nodes_to_exclude=list(exclude),
                             per_channel=per_channel)
    return Path(out_path)


def quantizable_nodes(model_path: str | Path) -> list[str]:
    """Names of the nodes (in graph order) whose weights the quantizer turns to INT8."""
    m = onnx.load(str(model_path), load_external_data=False)
    return [n.name for n in m.graph.node if n.op_type in QUANT_OPS]


def node_groups(model_path: str | Path, n_chunks: int = 6) -> list[tuple[str, list[str]]]:
    """Candidate groups for a sensitivity sweep: first and last quantized node, the attention
    path (MatMul and Softmax), then the remaining quantized nodes in ``n_chunks`` contiguous
    slices of graph order. Group names are stable for a given model."""
    m = onnx.load(str(model_path), load_external_data=False)
    q = [n for n in m.graph.node if n.op_type in QUANT_OPS]
    if not q:
        return []
    groups: list[tuple[str, list[str]]] = [(f"first ({q[0].op_type})", [q[0].name])]
    if len(q) > 1:
        groups.append((f"last ({q[-1].op_type})", [q[-1].name]))
    att = [n.name for n in m.graph.node if n.op_type in ("MatMul", "Softmax")]
    matmul_q = [n for n in q[1:-1] if n.op_type in ("MatMul", "Gemm")]
    if att and matmul_q:
        groups.append(("attention/MLP MatMul+Softmax", att))
    rest = [n.name for n in q[1:-1] if n.op_type not in ("MatMul", "Gemm")]
    if rest:
        k = max(1, min(n_chunks, len(rest)))
        size = -(-len(rest) // k)
        for i in range(0, len(rest), size):
            part = rest[i : i + size]
            groups.append((f"conv {i + 1}-{i + len(part)} of {len(rest)}", part))
    return groups
