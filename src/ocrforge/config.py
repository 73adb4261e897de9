"""EngineConfig: one typed, nested configuration for every entry point.

Sections: models, det, cls, rec, runtime, pipeline, gpu, layout, limits. Profiles (JSON files),
CLI flags, ``OCRFORGE_<SECTION>__<FIELD>`` environment variables and per-request HTTP options all
parse through these pydantic models, so an unknown key or a bad value is an error that names it.

Old flat names (``det_limit_side=960``, ``use_cls=True``, ``intra_op_threads=1``) are accepted by
``EngineConfig.from_flat`` / ``with_`` / ``OCR(**kwargs)`` and mapped onto the sections
(``FLAT_KEYS``), so existing code and profiles keep working.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ocrforge.models.registry import DEFAULT_MODEL_SET, get_model_set
from ocrforge.paths import (
    OutputError,
    cache_dir,  # noqa: F401  (re-exported: one cache folder)
)

TEMP_SUFFIX = ".tmp"  # atomic_write_bytes: .NAME.PID.XXXXXXXX.tmp

Precision = Literal["fp32", "fp16", "int8", "int8-dynamic"]

# accuracy budget of every faster configuration (CER points over the FP32 reference), and the
# seed of every sampled set: one place, used by build, tune and the guard
CER_BUDGET = 0.5
SEED = 0
# per-request detection limits are rounded up to one of these (bounded state per engine)
DET_LIMIT_BUCKETS = (320, 480, 640, 800, 960, 1280, 1600, 2048, 2560, 3200, 4096)
# CPU recognition widths under OpenVINO (~1.4x apart): on the 2-core Intel AMX VM +21-24 %
# pages/s on the choice sets at CER +0.04-0.09 points against 32-px steps (BENCHMARKS.md)
OPENVINO_REC_WIDTHS = (160, 224, 320, 448, 640, 896, 1280, 1792, 2560, 3200)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelsConfig(_Section):
    name: str = DEFAULT_MODEL_SET  # model set: ppocrv6-small | ppocrv6-tiny | ppocrv5-mobile
    dir: str | None = None  # folder with the model files (else OCRFORGE_MODEL_DIR, else the wheel)

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        get_model_set(v)
        return v


class DetConfig(_Section):
    precision: Precision = "fp32"  # ONNX artifact variant (built by `ocrforge build`)
    # measured on the dev set (docs/ACCURACY.md): a 2048 cap reads dense documents better than
    # a 960 cap; only small images (word crops, plates) are enlarged: enlarging every page under
    # 736 px cost 9 % of 2-CPU speed on held-out pages for no CER (BENCHMARKS.md, 2026-12-04)
    limit_side: int = Field(2048, ge=32, le=8192)  # long side at most this (multiple of 32)
    limit_type: Literal["max", "min"] = "max"  # "min": short side at least limit (PaddleOCR)
    min_side: int = Field(320, ge=0)  # "max" mode: enlarge pages whose short side is below ...
    max_upscale: float = Field(1.6, ge=1.0)  # ... by at most this factor
    thresh: float | None = Field(None, gt=0, lt=1)  # None: the model set's constant
    box_thresh: float | None = Field(None, gt=0, lt=1)
    unclip_ratio: float | None = Field(None, gt=0)
    max_candidates: int | None = Field(None, ge=1)
    min_size: int = Field(3, ge=1)  # minimum box side in detector pixels
    batch_size: int | None = Field(None, ge=1)  # pages per call; None: 1 on CPU, 8 on GPU
    threads: int | None = Field(None, ge=0)  # intra-op threads for det (None: runtime's)


class ClsConfig(_Section):
    enabled: bool = False  # 0/180 classifier on each text line
    precision: Precision = "fp32"
    thresh: float = Field(0.9, gt=0, lt=1)
    batch_size: int = Field(32, ge=1)
    # whole-page 0/90/180/270 orientation before detection (stages/page_orientation.py): on,
    # since it costs ~1 % of a page and turned no upright dev or synthetic page (ACCURACY.md,
    # "Rotated pages"); not applied by the GPU scheduler (scheduling/gpu.py) yet
    page_orientation: bool = True


class RecConfig(_Section):
    precision: Precision = "fp32"
    batch_size: int | None = Field(None, ge=1)  # lines per call; None: 16 on CPU, 128 on GPU
    # at most this many line pixels (lines x bucket width) per call, so a page of very wide
    # lines does not run 16 x 3200 at once (1.7 GB of activations); None: 16 x 640 on the CPU,
    # the batch size x 1280 in the GPU scheduler (its widest calls size recognition's graph pool)
    batch_pixels: int | None = Field(None, ge=32)
    max_width: int = Field(3200, ge=32)  # lines wider than this (at height 48) are squeezed
    width_step: int = Field(32, ge=1)  # each line is padded to a multiple of this width ...
    min_width: int | None = Field(None, ge=8)  # ... and to at least this (None: 160 on the CPU, the model's 320 on the GPU)
    # CPU width buckets (the GPU has gpu.rec_widths): a list, "step" (multiples of width_step)
    # or "auto": OPENVINO_REC_WIDTHS under OpenVINO, which prepares each new input shape anew
    # (a third of 2-CPU recognition time with 32-px steps; BENCHMARKS.md, "Coarser recognition
    # widths"), multiples of width_step under ONNX Runtime
    widths: list[int] | Literal["auto", "step"] = "auto"
    drop_score: float = Field(0.5, ge=0, le=1)  # drop lines with a lower mean char score
    threads: int | None = Field(None, ge=0)
    crop_fallback: bool = True  # small/crop-like inputs with no detection: recognise whole image


class RuntimeConfig(_Section):
    # auto: OpenVINO where it is installed and the CPU computes BF16 natively (AVX512_BF16, AMX),
    # else ONNX Runtime (runtimes/choice.py; measured in docs/BENCHMARKS.md, "auto")
    backend: Literal["auto", "onnxruntime", "openvino", "torch"] = "auto"
    device: str = "cpu"  # cpu | cuda | cuda:N
    torch_precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    compile: bool = False  # torch.compile (inductor, static shapes)
    cuda_graphs: bool = False
    # True: a new shape's CUDA graph is captured by a worker thread while the shape runs
    # eagerly, instead of stalling the caller (the GPU scheduler's driver thread) 0.3-1.5 s a
    # shape. Off by default: on the real-page mix (H100, 2026-12-05, one run each) it removed
    # the late stalls (pass 3: 104.6 against 88.3 pages/s) but the first 1008 pages read at
    # 16.4 against 26.5 pages/s (captures took 3x longer beside the eager runs), so a
    # 1000-page job finished later
    capture_in_background: bool = False
    # uses of a shape that run eagerly before its CUDA graph is captured: a capture costs the
    # caller 0.3-1.5 s, a replay saves a few ms of launches against eager, so a shape used only
    # a few times is cheaper left eager (gpu_bench.py's variants count the uses per shape)
    capture_after: int = Field(1, ge=0)
    # one CUDA-graph memory pool (and capture stream) for detection, recognition and page
    # orientation instead of one each: their graphs replay one after another on the driver's
    # stream, so one network's temporaries can use memory another's left free (the pools were
    # 2.9 + 0.9 + 0.4 GiB on the H100, 2026-12-07). Measured: one pool of 3.8 GiB, same rate and
    # dev-set reading; its many-page reading test passed on the H100 (2026-12-07,
    # docs/BENCHMARKS.md)
    shared_graph_pool: bool = True
    # ONNX Runtime execution providers by short or full name, e.g. ["tensorrt", "cuda", "cpu"]
    providers: list[str] = Field(default_factory=lambda: ["cpu"])
    # backend openvino: "auto" = OpenVINO's choice for this CPU (BF16 where the CPU has it)
    openvino_precision: Literal["auto", "f32", "bf16"] = "auto"
    intra_op_threads: int = Field(0, ge=0)  # 0 = physical cores in this process's CPU set
    inter_op_threads: int = Field(0, ge=0)
    graph_optimization: Literal["disable", "basic", "extended", "all"] = "all"
    execution_mode: Literal["sequential", "parallel"] = "sequential"
    enable_mem_pattern: bool = False  # off: recognition shapes vary (docs/BENCHMARKS.md, memory)
    enable_cpu_mem_arena: bool = True
    # give the CPU arena's unused chunks back after every run (ORT run option
    # memory.enable_memory_arena_shrinkage); see docs/BENCHMARKS.md "Memory on A4 pages".
    # None: recognition (and the line classifier) only; detection keeps its arena, since its
    # shapes repeat page after page and faulting them in again cost +26 % CPU per call
    # (docs/BENCHMARKS.md "the detection arena"); True / False: every session
    shrink_arena: bool | None = None
    allow_spinning: bool = True  # ORT threads busy-wait between ops (fast alone, costly overlapped)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v != "cpu" and not (v == "cuda" or (v.startswith("cuda:") and v[5:].isdigit())):
            raise ValueError(f"device must be cpu, cuda or cuda:N, not {v!r}")
        return v

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")


class PipelineConfig(_Section):
    # overlap decode / detection / recognition across pages; None: on above 2 usable CPUs. On 2
    # CPUs one page after the other read faster at the same text (quiet 2-core VM, 2026-12-02:
    # 1.101 vs 0.900 dev pages/s; chosen on 20 synth pages, 1.33/1.26 vs 1.20/1.12)
    enabled: bool | None = None
    workers: int = Field(2, ge=1)  # CPU threads for decode and post-processing
    queue_size: int = Field(8, ge=2)  # pages in flight between stages (bounds memory)
    # pages whose lines are recognised together: fuller recognition batches and fewer distinct
    # shapes for OpenVINO to prepare; 16 against 4, quiet 2-core VM, 2026-12-04: synth 5150
    # +9/+12 %, dev +6/+10 %, held-out synth 90124 +9 %, same text, peak RSS +20 to +130 MiB
    batch_pages: int = Field(16, ge=1)
    # return freed heap to the system after each page group (glibc malloc_trim): without it a
    # long A4 PDF grew ~3 MB a page (scheduling/heap.py, docs/BENCHMARKS.md "Memory")
    trim_heap: bool = True
    # read_many on many CPUs: engine processes reading whole inputs (None: from the CPU count,
    # 1 below 4 CPUs; see scheduling/processes.py), each with process_threads ORT threads
    processes: int | None = Field(None, ge=1)
    process_threads: int = Field(2, ge=1)


class GpuConfig(_Section):
    # detection page buckets as (H, W) fractions of det.limit_side; pages are padded into the
    # smallest bucket that holds them, so the set of shapes is fixed and warmed once
    # (A4 / letter portrait and landscape, receipts, screenshots, small photos: each pads
    # common page shapes by <= ~15 %; 17 buckets x 2 batch shapes are captured at start)
    page_buckets: list[tuple[float, float]] = Field(default_factory=lambda: [
        (1, 1), (1, 0.875), (1, 0.75), (1, 0.625), (1, 0.5), (1, 0.375), (0.75, 1),
        (0.5625, 1), (0.5, 1), (0.75, 0.75), (0.75, 0.5), (0.5, 0.75), (0.625, 0.625),
        (0.5, 0.5), (0.375, 0.5), (0.5, 0.375), (0.25, 0.25)])
    # > 0: a page's detection shape is its own rounded up to a multiple of this on each side,
    # instead of the smallest of page_buckets that holds it: less padding (the dev set's pages
    # run 1.44x their pixels in page_buckets, 1.17x at 256, 1.08x at 128) for more shapes
    # (11, 16, 22 on the dev set), so more CUDA graphs; 0: page_buckets. 256 (H100, 2026-12-07,
    # docs/BENCHMARKS.md): 17 % fewer detection pixels, dev CER 13.53 against 13.57 %, its
    # steady rate within the host's noise, but its first pass of 1008 pages 34-42 % slower in
    # each same-call pair (more shapes met for the first time): not the default until a steady gain is shown
    bucket_step: int = Field(0, ge=0, multiple_of=32)
    # recognition batches in power-of-two shapes between the small (rec batch / 8) and the full
    # one, not only those two (a batch of 17 lines then runs as 32 rows, not 128): more graphs
    rec_pow2_rows: bool = False
    # recognition width buckets (height 48); None: multiples of rec.width_step (as on the CPU)
    rec_widths: list[int] | None = Field(default_factory=lambda: [
        320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1920, 2560, 3200])
    decode: bool = True  # nvJPEG decode of plain JPEGs on the GPU (torchvision), batched
    # the nvJPEG calls in the decoder threads (on a stream of their own) rather than batched
    # on the driver thread, whose time they took (~3 ms a page): 140 against 108 real pages/s,
    # GPU 89 % against 68 % busy (H100, 2026-12-05; docs/BENCHMARKS.md)
    decode_in_threads: bool = True
    post_workers: int = Field(8, ge=1)  # threads for DB box extraction
    post_processes: int | None = Field(None, ge=0)  # DB processes (None: auto on CUDA, 0 on CPU)
    # processes for the layout stage (None: auto on CUDA, 0 on CPU: on the driver thread)
    layout_processes: int | None = Field(None, ge=0)
    max_inflight: int = Field(128, ge=2)  # pages taken in and not yet emitted
    # pages decoded ahead of the driver thread: a third being decoded, two thirds decoded and
    # waiting to be taken in. With nvJPEG they wait in device memory: the decode stream held
    # 1.9 GiB at the default, ~192 pages (H100, 2026-12-07); None: 1.5 x max_inflight
    decode_ahead: int | None = Field(None, ge=3)
    # line crops held for recognition (MiB, None: no bound): more pages are cut only while the
    # crops held stay under it (one page's always). Trades speed for peak GPU memory; crops
    # were the largest live item at the peak (H200, 2026-12-04)
    max_crop_megabytes: float | None = Field(None, gt=0)
    # line crops held as grey levels (1 byte a pixel, as the host path's crops) and normalised
    # per recognition batch; False: in the network's dtype (FP16: 2 bytes), normalised when cut
    grey_crops: bool = True
    # a partial batch (pages of one detection bucket, lines of one recognition width) is
    # launched once its oldest item has waited this long, besides whenever nothing else will
    # fill it: bounds how long a page with a line of a rare width waits (a served request
    # feels it). Rate-neutral at 100 ms on the real-page mix; 30 ms read slower (H100,
    # 2026-12-05, docs/BENCHMARKS.md)
    max_wait_ms: float = Field(100.0, ge=0)
    # a partial batch is also launched as soon as the GPU has finished everything launched
    # before (continuous batching): a served page then never waits for others to fill its
    # batch while the GPU idles; under full load the GPU is never idle and batches stay full
    launch_when_idle: bool = True
    # > 0: cutting lines and draining recognition stop after this many ms of a driver pass, so
    # detection and orientation get their turn within it; 0: each step takes all that is ready.
    # In pass 2 of the real-page mix the GPU sat idle 28 % of the time, half of it while the
    # driver cut the lines of many pages in one go (passes up to 0.6 s; H100, 2026-12-07)
    step_budget_ms: float = Field(0.0, ge=0)
    # a page decoded by nvJPEG in a decoder thread joins the driver's work only once its decode
    # has finished on the GPU, instead of at once with the driver's stream waiting for the
    # decode stream (which holds up every kernel queued after it); not yet measured
    admit_when_decoded: bool = False
    # "lazy": a bucket's CUDA graph is captured the second time its shape is used (pages flow
    # at once); "all" / True: every bucket shape is captured when the scheduler starts
    warmup: Literal["lazy", "all"] | bool = "lazy"
    # while a run has no page in hand and none arriving (a server between requests), its
    # driver thread captures one likely next shape at a time: the other batch shape of a
    # detection bucket already met, the other row shapes of a recognition width already met.
    # A shape's first call in the driver thread builds its cuDNN plans (0.4-2.5 s on the H100,
    # 2026-12-06), which a served page would otherwise wait for
    capture_when_idle: bool = True
    # freeze the objects alive when the first run starts (gc.freeze), so the garbage
    # collector's full passes skip them: a full pass over torch and the engine stopped every
    # thread of a run for up to ~200 ms; undone when the engine closes (scheduling/gc_freeze.py)
    gc_freeze: bool = True
    # the interpreter's switch interval while a GPU run is open (ms; None: Python's 5 ms): how
    # long another thread (a server's request handling, layout results) may hold the lock the
    # driver thread needs between its device calls; restored when the last run closes
    switch_interval_ms: float | None = Field(None, gt=0)
    # input pixels per detection call (millions): bounds GPU memory (activations and graph
    # pools scale with it); a big card may raise it for a little more throughput
    det_batch_megapixels: float = Field(4.0, gt=0)
    orient_batch: int = Field(32, ge=1)  # pages per page-orientation call on the device
    # engine processes behind read_many on one GPU, each with its own driver thread and CUDA
    # graphs, over one shared page queue (scheduling/engine_process.py): one driver thread's
    # Python bounds a process well below what the GPU does. None: 1 (in this process) until
    # several measure faster (3 read 49 real pages/s against 69 for 1 on the H200, 2026-12-04)
    processes: int | None = Field(None, ge=1)


class LayoutConfig(_Section):
    # reading order, blocks, tables, words (layout/); on by default: measured in docs/ACCURACY.md
    # ("Structure on by default"), no page kind worse
    enabled: bool = True
    words: bool = True
    tables: bool = True


class LimitsConfig(_Section):
    max_pixels: int = Field(80_000_000, ge=1)
    pdf_dpi: int = Field(200, ge=36, le=1200)
    max_pdf_pages: int = Field(1000, ge=1)
    pages: str | None = None  # page range of multi-page inputs, e.g. "1-5,8" (1-based)


class EngineConfig(_Section):
    """Configuration of an OCR engine. ``None`` thresholds take the model set's constants."""

    models: ModelsConfig = Field(default_factory=ModelsConfig)
    det: DetConfig = Field(default_factory=DetConfig)
    cls: ClsConfig = Field(default_factory=ClsConfig)
    rec: RecConfig = Field(default_factory=RecConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    gpu: GpuConfig = Field(default_factory=GpuConfig)
    layout: LayoutConfig = Field(default_factory=LayoutConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)

    @model_validator(mode="before")
    @classmethod
    def _flat_names(cls, data: Any) -> Any:
        """``EngineConfig(model_set=..., det_limit_side=...)``: first-version flat names are
        moved into their sections (``runtime``/``pipeline``/``layout`` given as a plain value
        mean runtime.backend / pipeline.enabled / layout.enabled)."""
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        moved: dict[str, dict[str, Any]] = {}
        for key, value in data.items():
            if key in _BOOL_SECTION_ALIASES and isinstance(value, bool):
                key = _BOOL_SECTION_ALIASES[key]
            elif key == "runtime" and isinstance(value, str):
                key = "runtime.backend"
            elif key in FLAT_KEYS and key not in SECTION_NAMES:
                key = FLAT_KEYS[key]
            if "." in key:
                sec, _, name = key.partition(".")
                moved.setdefault(sec, {})[name] = value
            else:
                out[key] = value
        for sec, fields in moved.items():
            base = out.get(sec, {})
            base = base.model_dump() if isinstance(base, BaseModel) else dict(base)
            out[sec] = {**base, **fields}
        return out

    @model_validator(mode="after")
    def _consistent(self) -> EngineConfig:
        """Knobs that cannot apply to the chosen runtime are errors, not silently ignored."""
        rt = self.runtime
        if rt.backend not in ("openvino", "auto") and rt.openvino_precision != "auto":
            raise ValueError("runtime.openvino_precision applies to runtime.backend openvino only")
        if rt.backend != "torch":
            if rt.backend == "openvino" and rt.providers != ["cpu"]:
                raise ValueError("runtime.providers applies to runtime.backend onnxruntime only")
            if rt.on_gpu:
                raise ValueError("runtime.device cuda needs runtime.backend torch; ONNX Runtime "
                                 "picks its device from runtime.providers (e.g. cuda,cpu)")
            for knob in ("compile", "cuda_graphs"):
                if getattr(rt, knob):
                    raise ValueError(f"runtime.{knob} applies to runtime.backend torch only")
            if rt.torch_precision != "fp32":
                raise ValueError("runtime.torch_precision applies to runtime.backend torch only; "
                                 "ONNX Runtime uses det/rec/cls.precision")
        else:
            for sec in ("det", "rec", "cls"):
                if getattr(self, sec).precision != "fp32":
                    raise ValueError(f"{sec}.precision {getattr(self, sec).precision!r} is an ONNX "
                                     "Runtime artifact; with runtime.backend torch use "
                                     "runtime.torch_precision (fp16/bf16)")
            if rt.providers != ["cpu"]:
                raise ValueError("runtime.providers applies to runtime.backend onnxruntime only")
            if rt.cuda_graphs and not rt.on_gpu:
                raise ValueError("runtime.cuda_graphs needs runtime.device cuda")
        return self

    # ------------------------------------------------------------------ derived values
    def resolved_det(self) -> dict[str, float | int]:
        c = get_model_set(self.models.name).det_constants
        d = self.det
        return {
            "thresh": c.thresh if d.thresh is None else d.thresh,
            "box_thresh": c.box_thresh if d.box_thresh is None else d.box_thresh,
            "unclip_ratio": c.unclip_ratio if d.unclip_ratio is None else d.unclip_ratio,
            "max_candidates": c.max_candidates if d.max_candidates is None else d.max_candidates,
        }

    def det_batch(self) -> int:
        return self.det.batch_size or (8 if self.runtime.on_gpu else 1)

    def rec_batch(self) -> int:
        return self.rec.batch_size or (128 if self.runtime.on_gpu else 16)

    def rec_batch_pixels(self) -> int | None:
        """Line pixels per CPU recognition call (None on the GPU, whose scheduler sizes its own)."""
        if self.runtime.on_gpu:
            return self.rec.batch_pixels
        return self.rec.batch_pixels or 16 * 640

    def rec_cpu_widths(self, runtime_name: str) -> list[int] | None:
        """The CPU recognition width buckets for the runtime named ``runtime_name`` (None:
        multiples of rec.width_step)."""
        w = self.rec.widths
        if w == "auto":
            return list(OPENVINO_REC_WIDTHS) if runtime_name.startswith("openvino") else None
        return None if w == "step" else w

    def rec_min_width(self) -> int | None:
        """Narrowest recognition input: rec.min_width, else 160 on the CPU (lines shorter than
        the model's 320 are padded less: +7-10 % pages/s at +0.02-0.05 CER points, measured in
        docs/BENCHMARKS.md) and the model's width (None) on the GPU."""
        if self.rec.min_width is not None or self.runtime.on_gpu:
            return self.rec.min_width
        return 160

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        """Nested (``{"det": {"limit_side": 960}}``) or flat (``{"det_limit_side": 960}``) keys."""
        return cls().with_(**data)

    @classmethod
    def from_flat(cls, **changes: Any) -> EngineConfig:
        return cls().with_(**changes)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> EngineConfig:
        """Defaults overridden by ``OCRFORGE_<SECTION>__<FIELD>`` variables (values parsed as
        JSON when they are JSON, else taken as strings) and the legacy OCRFORGE_MODEL_DIR."""
        return cls().with_env(environ)

    def with_env(self, environ: dict[str, str] | None = None) -> EngineConfig:
        env = os.environ if environ is None else environ
        changes: dict[str, Any] = {}
        for key, raw in env.items():
            if not key.startswith("OCRFORGE_") or "__" not in key:
                continue
            section, _, name = key[len("OCRFORGE_"):].lower().partition("__")
            changes[f"{section}.{name}"] = _parse_env_value(raw)
        if env.get("OCRFORGE_MODEL_DIR") and self.models.dir is None and "models.dir" not in changes:
            changes["models.dir"] = env["OCRFORGE_MODEL_DIR"]
        return self.with_(**changes) if changes else self

    def with_(self, **changes: Any) -> EngineConfig:
        """A copy with changes: flat names (``det_limit_side``), dotted paths (``det.limit_side``)
        or whole sections (``det={"limit_side": 960}``). Unknown keys and bad values raise
        ConfigError naming the key."""
        data = self.model_dump()
        for key, value in changes.items():
            if key in SECTIONS and isinstance(value, (dict, BaseModel)):
                v = value.model_dump() if isinstance(value, BaseModel) else value
                for k2, v2 in v.items():
                    _set_path(data, f"{key}.{k2}", v2)
                continue
            _set_path(data, FLAT_KEYS.get(key, key), value)
        _gpu_defaults(data, {FLAT_KEYS.get(k, k) for k in changes} | set(changes))
        try:
            return EngineConfig.model_validate(data)
        except ValidationError as e:
            raise ConfigError(_explain(e)) from None

    def flat(self) -> dict[str, Any]:
        """The config as old-style flat keys (for tables and logs)."""
        out: dict[str, Any] = {}
        d = self.model_dump(mode="json")
        for flat_key, path in FLAT_KEYS.items():
            sec, name = path.split(".")
            out[flat_key] = d[sec][name]
        return out


class ReadOptions(_Section):
    """Per-call options (the server takes them per request). Only what can change without
    building new networks; ``det_limit_side`` is rounded up to a DET_LIMIT_BUCKETS value."""

    det_limit_side: int | None = Field(None, ge=32, le=8192)
    drop_score: float | None = Field(None, ge=0, le=1)
    use_cls: bool | None = None
    layout: bool | None = None

    def det_limit_bucket(self) -> int | None:
        if self.det_limit_side is None:
            return None
        return bucket_det_limit(self.det_limit_side)


def bucket_det_limit(limit: int) -> int:
    for b in DET_LIMIT_BUCKETS:
        if limit <= b:
            return b
    return DET_LIMIT_BUCKETS[-1]


class ConfigError(ValueError):
    """A configuration key or value that cannot be used; the message names the key."""


SECTIONS = tuple(EngineConfig.model_fields)
SECTION_NAMES = frozenset(SECTIONS)

# flat names of the first version -> section.field
FLAT_KEYS: dict[str, str] = {
    "model_set": "models.name", "model_dir": "models.dir",
    "det_precision": "det.precision", "rec_precision": "rec.precision",
    "cls_precision": "cls.precision",
    "runtime": "runtime.backend", "device": "runtime.device",
    "torch_precision": "runtime.torch_precision", "torch_compile": "runtime.compile",
    "cuda_graphs": "runtime.cuda_graphs", "providers": "runtime.providers",
    "intra_op_threads": "runtime.intra_op_threads", "inter_op_threads": "runtime.inter_op_threads",
    "graph_optimization": "runtime.graph_optimization",
    "execution_mode": "runtime.execution_mode", "enable_mem_pattern": "runtime.enable_mem_pattern",
    "enable_cpu_mem_arena": "runtime.enable_cpu_mem_arena",
    "allow_spinning": "runtime.allow_spinning",
    "det_threads": "det.threads", "rec_threads": "rec.threads",
    "det_limit_side": "det.limit_side", "det_limit_type": "det.limit_type",
    "det_min_side": "det.min_side", "det_max_upscale": "det.max_upscale",
    "det_thresh": "det.thresh", "det_box_thresh": "det.box_thresh",
    "det_unclip_ratio": "det.unclip_ratio", "det_max_candidates": "det.max_candidates",
    "det_min_size": "det.min_size", "det_batch_size": "det.batch_size",
    "use_cls": "cls.enabled", "cls_thresh": "cls.thresh", "cls_batch_size": "cls.batch_size",
    "page_orientation": "cls.page_orientation",
    "rec_batch_size": "rec.batch_size", "rec_max_width": "rec.max_width",
    "rec_width_step": "rec.width_step", "rec_min_width": "rec.min_width",
    "drop_score": "rec.drop_score", "crop_fallback": "rec.crop_fallback",
    "max_pixels": "limits.max_pixels", "pdf_dpi": "limits.pdf_dpi",
    "max_pdf_pages": "limits.max_pdf_pages", "pages": "limits.pages",
    "workers": "pipeline.workers", "queue_size": "pipeline.queue_size",
    "batch_pages": "pipeline.batch_pages", "use_layout": "layout.enabled",
}
# "pipeline" as a flat boolean (first version) means pipeline.enabled
_BOOL_SECTION_ALIASES = {"pipeline": "pipeline.enabled", "layout": "layout.enabled"}


def _gpu_defaults(data: dict[str, Any], named: set[str]) -> None:
    """``device="cuda"`` alone means the GPU engine users want: runtime torch, FP16, CUDA
    graphs (each only where the same change did not name it). The FP16 CER is within 0.3
    points of FP32 (docs/BENCHMARKS.md)."""
    rt = data["runtime"]
    if not str(rt.get("device", "cpu")).startswith("cuda") or rt.get("backend") not in ("onnxruntime", "auto"):
        return
    if {"runtime", "runtime.backend"} & named or "runtime.device" not in named:
        return
    rt["backend"] = "torch"
    if "runtime.torch_precision" not in named:
        rt["torch_precision"] = "fp16"
    if "runtime.cuda_graphs" not in named:
        rt["cuda_graphs"] = True


def _set_path(data: dict[str, Any], key: str, value: Any) -> None:
    if key in _BOOL_SECTION_ALIASES and isinstance(value, bool):
        key = _BOOL_SECTION_ALIASES[key]
    sec, dot, name = key.partition(".")
    if not dot:
        raise ConfigError(f"unknown config key {key!r} (sections: {', '.join(SECTIONS)}; "
                          f"or a flat name such as det_limit_side)")
    if sec not in data or not isinstance(data[sec], dict):
        raise ConfigError(f"unknown config section {sec!r} in {key!r} "
                          f"(sections: {', '.join(SECTIONS)})")
    if name not in data[sec]:
        known = ", ".join(sorted(data[sec]))
        raise ConfigError(f"unknown config key {key!r} (known in {sec}: {known})")
    if isinstance(value, BaseModel):
        value = value.model_dump()
    data[sec][name] = value


def _explain(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg} (got {err.get('input')!r})" if loc else msg)
    return "invalid config: " + "; ".join(parts)


def _parse_env_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


# ---------------------------------------------------------------------- profiles
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
        raise ConfigError(f"profile {p} is not valid JSON: {e}") from None
    try:
        return EngineConfig.from_dict(data.get("config", data))
    except ConfigError as e:
        raise ConfigError(f"profile {p}: {e}") from None


# ---------------------------------------------------------------------- atomic writes
def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write to a temp file in the same folder, then rename: never a half-written file.
    The file gets the mode a plain open() would give it (0666 minus the umask). Any OSError
    is an ``OutputError`` naming ``path``; temp files a killed writer left for ``path`` are
    removed."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.",
                                   suffix=TEMP_SUFFIX)
    except OSError as e:
        raise OutputError(path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise OutputError(path, e) from None
        raise
    remove_stale_temps(path)


def remove_stale_temps(path: Path) -> int:
    """Delete ``.NAME.PID.XXXX.tmp`` files next to ``path`` whose writer is gone (killed)."""
    n = 0
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*{TEMP_SUFFIX}"):
        pid = tmp.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and _alive(int(pid)):  # a writer still at work
            continue
        try:
            tmp.unlink()
            n += 1
        except OSError:
            pass
    return n


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _read_umask() -> int:
    # os.umask can only be read by setting it: done once at import, before any threads
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()
