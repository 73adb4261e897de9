"""EngineConfig: every threshold and runtime knob in one place, plus saved profiles."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ocrforge.models.registry import DEFAULT_MODEL_SET, get_model_set


@dataclass
class EngineConfig:
    """Configuration of an OCR engine. ``None`` thresholds take the model set's constants."""

    # models
    model_set: str = DEFAULT_MODEL_SET
    model_dir: str | None = None
    # artifact variant for each network: "fp32" (reference ONNX), "fp16", "int8", "int8-dynamic"
    det_precision: str = "fp32"
    rec_precision: str = "fp32"
    cls_precision: str = "fp32"

    # runtime
    runtime: str = "onnxruntime"  # "onnxruntime" | "torch"
    device: str = "cpu"  # "cpu" | "cuda" | "cuda:N"
    # torch runtime precision: "fp32" | "fp16" | "bf16"
    torch_precision: str = "fp32"
    torch_compile: bool = False
    cuda_graphs: bool = False
    # ONNX Runtime execution providers by short or full name, e.g. ["tensorrt", "cuda", "cpu"]
    providers: list[str] = field(default_factory=lambda: ["cpu"])
    intra_op_threads: int = 0  # 0 = ONNX Runtime default (physical cores)
    inter_op_threads: int = 0
    graph_optimization: str = "all"  # "disable" | "basic" | "extended" | "all"
    execution_mode: str = "sequential"  # "sequential" | "parallel"
    enable_mem_pattern: bool = True
    enable_cpu_mem_arena: bool = True
    # per-network intra-op threads (None = intra_op_threads); lets pipelined det and rec share cores
    det_threads: int | None = None
    rec_threads: int | None = None
    allow_spinning: bool = True  # ORT worker threads busy-wait between ops (fast alone, costly when stages overlap)

    # detection
    # measured on the dev set (docs/ACCURACY.md): a 2048 cap plus enlarging small pages
    # towards a 736 px short side reads receipts and dense documents better than a plain
    # 960 cap, and recognition, not detection, dominates the time either way
    det_limit_side: int = 2048  # resize so the long side is at most this (multiple of 32)
    det_limit_type: str = "max"  # "max": long side <= limit; "min": short side >= limit
    det_min_side: int = 736  # "max" mode: enlarge pages whose short side is below this ...
    det_max_upscale: float = 1.6  # ... by at most this factor
    det_thresh: float | None = None  # binarisation threshold of the probability map
    det_box_thresh: float | None = None  # minimum mean probability inside a box
    det_unclip_ratio: float | None = None
    det_max_candidates: int | None = None
    det_min_size: int = 3  # minimum box side in detector pixels
    det_batch_size: int = 1  # pages per detection call (same-size buckets only)

    # orientation
    use_cls: bool = False  # 0/180 classifier on each crop
    cls_thresh: float = 0.9
    cls_batch_size: int = 32

    # recognition
    rec_batch_size: int = 16
    rec_max_width: int = 3200  # crops wider than this (at height 48) are squeezed
    rec_width_step: int = 32  # crops are padded to a multiple of this width
    rec_min_width: int | None = None  # narrowest batch width (None = the model's training width, 320)
    drop_score: float = 0.5  # lines with a lower mean character score are dropped

    # input limits
    max_pixels: int = 80_000_000
    pdf_dpi: int = 200
    max_pdf_pages: int = 1000

    # scheduling
    pipeline: bool = True  # overlap decode / detection / recognition across pages
    workers: int = 2  # CPU threads for decode and post-processing
    queue_size: int = 8

    def resolved_det(self) -> dict[str, float | int]:
        c = get_model_set(self.model_set).det_constants
        return {
            "thresh": c.thresh if self.det_thresh is None else self.det_thresh,
            "box_thresh": c.box_thresh if self.det_box_thresh is None else self.det_box_thresh,
            "unclip_ratio": c.unclip_ratio if self.det_unclip_ratio is None else self.det_unclip_ratio,
            "max_candidates": c.max_candidates
            if self.det_max_candidates is None
            else self.det_max_candidates,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(sorted(unknown))}")
        cfg = cls(**data)
        cfg.validate()
        return cfg

    def with_(self, **changes: Any) -> EngineConfig:
        cfg = replace(self, **changes)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        get_model_set(self.model_set)
        if self.runtime not in ("onnxruntime", "torch"):
            raise ValueError(f"runtime must be 'onnxruntime' or 'torch', not {self.runtime!r}")
        if self.det_limit_type not in ("max", "min"):
            raise ValueError("det_limit_type must be 'max' or 'min'")
        if self.det_limit_side < 32:
            raise ValueError("det_limit_side must be at least 32")
        for name in ("det_precision", "rec_precision", "cls_precision"):
            v = getattr(self, name)
            if v not in ("fp32", "fp16", "int8", "int8-dynamic"):
                raise ValueError(f"{name} must be fp32, fp16, int8 or int8-dynamic, not {v!r}")
        if self.torch_precision not in ("fp32", "fp16", "bf16"):
            raise ValueError("torch_precision must be fp32, fp16 or bf16")
        if self.rec_batch_size < 1 or self.det_batch_size < 1 or self.cls_batch_size < 1:
            raise ValueError("batch sizes must be >= 1")


def save_profile(cfg: EngineConfig, path: str | os.PathLike[str], extra: dict | None = None) -> Path:
    """Write a profile (the config plus optional measurement notes) atomically."""
    path = Path(path)
    data = {"config": cfg.to_dict(), **(extra or {})}
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return path


def load_profile(path: str | os.PathLike[str]) -> EngineConfig:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"profile {p} not found") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"profile {p} is not valid JSON: {e}") from None
    return EngineConfig.from_dict(data.get("config", data))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write to a temp file in the same folder, then rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
