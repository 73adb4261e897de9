"""OpenVINO execution of the same ONNX files (CPU), behind the Runtime protocol.

On CPUs with native BF16 (AVX512_BF16, AMX) OpenVINO computes in BF16 unless told otherwise;
``runtime.openvino_precision`` picks: "auto" (OpenVINO's choice for this CPU), "f32" or "bf16".
Its accuracy against the FP32 reference is measured in docs/BENCHMARKS.md ("OpenVINO").
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from ocrforge.config import RuntimeConfig
from ocrforge.runtimes.cpu_budget import default_threads

ChannelAffine = tuple[tuple[float, ...], tuple[float, ...]]  # (scale, offset) per channel


class OpenVinoRuntime:
    """One ONNX model compiled by OpenVINO for the CPU; one infer request per calling thread."""

    def __init__(self, model_path: str | Path, cfg: RuntimeConfig, precision: str = "fp32",
                 top1: tuple[int, ...] | None = None, u8_input: ChannelAffine | None = None,
                 kernel_cache: int = 100):
        try:
            import openvino as ov
        except ModuleNotFoundError:
            raise RuntimeError("runtime 'openvino' needs OpenVINO: pip install 'ocrforge[openvino]'") from None
        self.path = Path(model_path)
        self._args = (cfg, precision, top1, None, kernel_cache)
        self._float_twin: OpenVinoRuntime | None = None  # for float32 NCHW input, on demand
        # prepared kernels kept (per node and input shape): 100 by default, not OpenVINO's 5000:
        # dev set peak RSS 3487 -> 2689 MiB at the same pages/s (1.626 vs 1.620; 0 gave 2572 MiB
        # at 1.526), 2-core VM; recognition, whose few shapes recur, is opened with more
        props: dict[str, object] = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
                                    "CPU_RUNTIME_CACHE_CAPACITY": kernel_cache}
        threads = cfg.intra_op_threads or default_threads()  # the CPU quota too, not only the set
        if threads:
            props["INFERENCE_NUM_THREADS"] = threads
        # for measuring other capacities: all networks, or one (OCRFORGE_OV_CACHE_REC for rec.onnx)
        for var in ("OCRFORGE_OV_CACHE", "OCRFORGE_OV_CACHE_" + self.path.stem.upper()):
            if os.environ.get(var):
                props["CPU_RUNTIME_CACHE_CAPACITY"] = int(os.environ[var])
        if cfg.openvino_precision != "auto":
            props["INFERENCE_PRECISION_HINT"] = cfg.openvino_precision
        core = ov.Core()
        model = core.read_model(str(self.path))
        self.top1 = top1
        if top1 is not None:
            model = _top1_model(ov, model, top1)
        # uint8 N x H x W x C in, x * scale + offset per channel inside the compiled model
        self.input_u8_nhwc = u8_input is not None
        if u8_input is not None:
            model = _u8_nhwc_model(ov, model, u8_input)
        self.compiled = core.compile_model(model, "CPU", props)
        hint = self.compiled.get_property("INFERENCE_PRECISION_HINT")
        computed = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)  # f32, bf16
        self.precision = precision if precision != "fp32" else {"f32": "fp32"}.get(computed, computed)
        self.device = "cpu"
        self.name = f"openvino[CPU,{computed}]"
        self._local = threading.local()
        self._busy = 0  # infer requests running now (any thread)
        self._busy_lock = threading.Lock()

    def run(self, batch: np.ndarray) -> np.ndarray:
        """``batch``: float32 NCHW, or uint8 NHWC where opened with ``u8_input`` (which still
        takes float32 NCHW, normalised by the caller, through a twin compiled on first use)."""
        if self.input_u8_nhwc and batch.dtype != np.uint8:
            with self._busy_lock:
                if self._float_twin is None:
                    self._float_twin = OpenVinoRuntime(self.path, *self._args)
            return self._float_twin.run(batch)
        req = getattr(self._local, "req", None)
        if req is None:
            req = self._local.req = self.compiled.create_infer_request()
        with self._busy_lock:
            self._busy += 1
        try:
            dtype = np.uint8 if self.input_u8_nhwc else np.float32
            req.infer({0: np.ascontiguousarray(batch, dtype=dtype)})
            # the request's output buffers are reused by its next call: copy them out
            if self.top1 is not None:
                return tuple(np.array(req.get_output_tensor(k).data, copy=True)
                             for k in range(2 + len(self.top1)))
            return np.array(req.get_output_tensor(0).data, dtype=np.float32, copy=True)
        finally:
            with self._busy_lock:
                self._busy -= 1

    def release_memory(self) -> None:
        """Give back the buffers of the shapes run so far (detection does this before
        recognition starts: a 2048x1472 page holds ~490 MiB in them). Skipped while another
        thread infers (the pipelined reader detects the next pages meanwhile): OpenVINO refuses
        to release a busy model, and the next group's release gets the buffers back."""
        with self._busy_lock:  # no run starts while the buffers are released
            if self._busy == 0:
                self.compiled.release_memory()


def _u8_nhwc_model(ov, model, affine: ChannelAffine):
    """``model`` taking uint8 N x H x W x C and computing ``x * scale + offset`` per channel
    (then NCHW) itself: the caller hands over the pixels as they are, a quarter of the bytes,
    and the conversion runs on the runtime's threads (the same float32 arithmetic)."""
    from openvino.preprocess import PrePostProcessor

    scale, offset = affine
    ppp = PrePostProcessor(model)
    ppp.input().tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC"))
    ppp.input().model().set_layout(ov.Layout("NCHW"))
    # steps apply in order: x / (1 / scale) - (-offset)
    ppp.input().preprocess().convert_element_type(ov.Type.f32) \
        .scale([1.0 / float(v) for v in scale]).mean([-float(v) for v in offset])
    return ppp.build()


def _top1_model(ov, model, columns: tuple[int, ...]):
    """``model`` whose (..., C) output is replaced by its top-1 index (int32) and value along
    the last axis, then the listed columns (each (...,)): the whole output is never copied out
    of the compiled model (recognition: N x T x 18,710 floats, ~96 MB for 16 lines of 640 px,
    faulted in anew for every larger shape)."""
    from openvino import opset13 as ops

    result = model.get_results()[0]
    out = result.input_value(0)
    top = ops.topk(out, ops.constant(np.int64(1)), axis=-1, mode="max", sort="none",
                   index_element_type="i32")
    axis = ops.constant(np.int64(len(out.get_partial_shape()) - 1))
    outs = [ops.squeeze(top.output(1), axis), ops.squeeze(top.output(0), axis)]
    outs += [ops.gather(out, ops.constant(np.int64(c)), axis) for c in columns]
    model.remove_result(result)
    model.add_results([ops.result(o) for o in outs])
    return model
