"""OCR: the public facade. Opens the runtimes (never builds), owns one PageRunner, picks the
scheduler for many pages; no stage logic of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ocrforge.config import EngineConfig, ReadOptions, load_profile
from ocrforge.core import PageRunner
from ocrforge.io.inputs import InputError, PageImage, decode_pages, describe
from ocrforge.models.artifacts import artifact_path
from ocrforge.models.registry import resolve_models
from ocrforge.result import Page
from ocrforge.runtimes.base import Runtime
from ocrforge.runtimes.factory import open_onnx, open_torch
from ocrforge.stages.detect import normalization
from ocrforge.stages.recognize import space_class

REC_KERNEL_CACHE = 3000  # OpenVINO kernels kept for recognition (per node and shape)

if TYPE_CHECKING:
    from ocrforge.scheduling.multi_device import DevicePool


class OCR:
    """A ready-to-use OCR engine.

    >>> ocr = OCR()                      # default model set, ONNX Runtime on the CPU
    >>> page = ocr.read("receipt.jpg")   # path, bytes, numpy array (BGR) or PIL image
    >>> print(page.text)

    ``OCR(config)``, ``OCR(profile="fast.json")`` or ``OCR(det_limit_side=960, use_cls=True)``
    (flat names or dotted paths, see ocrforge.config). Constructing an engine only opens
    model files: an INT8/FP16 variant that has not been built is an error naming the
    ``ocrforge build`` command.
    """

    def __init__(self, config: EngineConfig | None = None, *, profile: str | None = None,
                 **overrides: Any):
        cfg = load_profile(profile) if profile else (config or EngineConfig.from_env())
        if overrides:
            cfg = cfg.with_(**overrides)
        self.config = cfg
        self.models = resolve_models(cfg.models.name, cfg.models.dir)
        self._graph_share: Any = None  # runtime.shared_graph_pool: the first torch runtime's
        self._share_graphs = cfg.runtime.shared_graph_pool
        det_rt = self._open("det", cfg.det.precision, cfg.det.threads)
        rec_rt = self._open("rec", cfg.rec.precision, cfg.rec.threads)
        self.runner = PageRunner(cfg, self.models, det_rt, rec_rt,
                                 lambda: self._open("cls", cfg.cls.precision, None))
        if cfg.cls.enabled:
            self.runner.cls_runtime()
        self._gpu: dict[int, Any] = {}  # GPU scheduler per detection-limit bucket (bounded)
        self._gpu_lock = threading.Lock()
        self._pool: Any = None  # engine processes of read_many (scheduling/processes.py)
        self._gpu_pool: Any = None  # GPU engine processes of read_many (engine_process.py)

    def _open(self, role: str, precision: str, threads: int | None) -> Runtime:
        cfg = self.config
        path = getattr(self.models, role)
        if cfg.runtime.backend == "torch":
            from ocrforge.models.native import build_native

            if precision != "fp32":
                raise ValueError(f"{role}.precision {precision!r} is an ONNX Runtime artifact; "
                                 "with runtime torch use runtime.torch_precision (fp16/bf16)")
            rt = open_torch(build_native(self.models.model_set, role, path), cfg.runtime,
                            name=role, share=self._graph_share)
            if self._share_graphs:
                self._graph_share = self._graph_share or getattr(rt, "graph_share", None)
            return rt
        if precision != "fp32":
            path = artifact_path(role, path, precision, cfg.models.name)
        rc = cfg.runtime
        if rc.shrink_arena is None:
            rc = rc.model_copy(update={"shrink_arena": role != "det"})
        # recognition: only the CTC argmax, its score and the space class leave the network
        top1 = None
        if role == "rec":
            space = space_class(self.models.characters())
            top1 = () if space is None else (space,)
        # detection, one page per call: OpenVINO takes the resized uint8 page and normalises it
        u8 = None
        if role == "det" and cfg.det_batch() == 1:
            scale, offset = normalization(self.models.model_set.det_constants)
            u8 = (tuple(scale.tolist()), tuple(offset.tolist()))
        # recognition's shapes (10 widths x batches of 16, 8, 4, 2, 1 lines) recur: OpenVINO
        # keeps their kernels (+50-100 MiB peak RSS on the dev set, BENCHMARKS.md)
        cache = REC_KERNEL_CACHE if role == "rec" else 100
        return open_onnx(path, rc, precision=precision, threads=threads, top1=top1, u8_input=u8,
                         kernel_cache=cache)

    # ------------------------------------------------------------------ layout switch
    @property
    def layout(self) -> dict[str, Any] | None:
        """Keyword options of ``ocrforge.layout.analyze`` when the layout stage is on, else None.
        Setting it switches the stage (``engine.layout = {}``: on with defaults)."""
        return dict(self.runner.layout_options) if self.config.layout.enabled else None

    @layout.setter
    def layout(self, options: dict[str, Any] | None) -> None:
        self.config = self.config.with_(use_layout=options is not None)
        self.runner.config = self.config
        self.runner.layout_options = dict(options or {})

    # ------------------------------------------------------------------ compatibility views
    @property
    def det_rt(self) -> Runtime:
        return self.runner.det_rt

    @property
    def rec_rt(self) -> Runtime:
        return self.runner.rec_rt

    @property
    def det_prep(self) -> Any:
        return self.runner.det_prep

    @property
    def det_decode(self) -> Any:
        return self.runner.det_decode

    @property
    def rec_prep(self) -> Any:
        return self.runner.rec_prep

    @property
    def ctc(self) -> Any:
        return self.runner.ctc

    # ------------------------------------------------------------------ public API
    def read(self, item: Any, *, rgb: bool = False, options: ReadOptions | None = None) -> Page:
        """OCR a single image (path, bytes, BGR numpy array, or PIL image).

        Raises InputError for unreadable input and for multi-page inputs (use read_pages).
        Set ``rgb=True`` when a numpy array is in RGB order.
        """
        t0 = time.perf_counter()
        pages = list(self.decode(item, rgb=rgb, max_pages=2))
        if len(pages) != 1:
            raise InputError(describe(item), "has more than one page; use read_pages()")
        decode_s = time.perf_counter() - t0
        page = self.runner.run(pages, options)[0]
        page.timings["decode"] = decode_s
        return page

    def read_pages(self, item: Any, *, rgb: bool = False,
                   options: ReadOptions | None = None) -> list[Page]:
        """OCR every page of one input (a PDF, a multi-page TIFF, or a single image)."""
        out: list[Page] = []
        batch: list[PageImage] = []
        for p in self.decode(item, rgb=rgb):
            batch.append(p)
            if len(batch) >= self.config.pipeline.batch_pages:
                out += self.runner.run(batch, options)
                batch = []
        return out + self.runner.run(batch, options)

    def read_many(self, items: Iterable[Any], *, options: ReadOptions | None = None,
                  batch_pages: int | None = None) -> Iterator[Page]:
        """OCR many inputs, yielding one Page per page in input order.

        A bad input does not stop the job: it yields a Page whose ``error`` names the input
        and the reason (``page.ok`` is False). Pages stream through bounded queues: memory
        stays flat however long the job or a PDF is.
        """
        cfg = self.config
        s = self.runner.settings(options)
        if cfg.runtime.backend == "torch" and cfg.runtime.on_gpu and not s.use_cls:
            gpus = self.gpu_pool()
            if gpus is not None:
                yield from gpus.read_many(items, options=options, batch_pages=batch_pages)
                return
            yield from self.gpu_scheduler(s.det_limit).run(items, options)
            return
        from ocrforge.scheduling.pipeline import run_pipeline

        bp = batch_pages or cfg.pipeline.batch_pages
        pool = self.process_pool()
        if pool is not None:
            yield from pool.run(items, options, bp, lambda item: run_pipeline(
                self.runner, self.decode, [item], options=options, batch_pages=bp))
            return
        yield from run_pipeline(self.runner, self.decode, items, options=options, batch_pages=bp)

    def process_pool(self) -> Any:
        """The engine processes of ``read_many`` on a many-core CPU (started on first use and
        kept), or None where one process is best: GPU, torch, fewer than 4 CPUs."""
        cfg = self.config
        if cfg.runtime.backend == "torch" or any(
                p.lower() not in ("cpu", "cpuexecutionprovider") for p in cfg.runtime.providers):
            return None
        import multiprocessing

        from ocrforge.scheduling import processes as procs

        if multiprocessing.current_process().daemon:  # a daemonic process may not start any
            return None
        n = cfg.pipeline.processes or procs.auto_processes(_usable_cpus(),
                                                           cfg.pipeline.process_threads)
        if n <= 1:
            return None
        with self._gpu_lock:
            if self._pool is None:
                self._pool = procs.ProcessPool(type(self), cfg, n, cfg.pipeline.process_threads)
            return self._pool

    def gpu_pool(self) -> DevicePool | None:
        """Engine processes of ``read_many`` on this GPU (``gpu.processes``; started on first
        use and kept), or None where this process's own scheduler is best."""
        from ocrforge.scheduling import engine_process as ep

        # None means 1 for now: 3 processes read 49 pages/s against 69 in one on the H200
        # (2026-12-04, docs/BENCHMARKS.md); ep.auto_gpu_processes is the rule once they win
        n = self.config.gpu.processes or 1
        if n <= 1:  # (a child engine's config says 1)
            return None
        with self._gpu_lock:
            if self._gpu_pool is None:
                from ocrforge.scheduling.multi_device import DevicePool

                cfg = ep.child_config(self.config, n, _usable_cpus())
                self._gpu_pool = DevicePool(ep.start_engines(type(self), cfg, n))
            return self._gpu_pool

    def ocr_images(self, pages: list[PageImage], options: ReadOptions | None = None) -> list[Page]:
        """OCR decoded pages (one batch through the runner)."""
        return self.runner.run(pages, options)

    def decode(self, item: Any, *, rgb: bool = False, max_pages: int | None = None) -> Iterator[PageImage]:
        """Pages of one input, lazily, with the engine's limits (one decode step for all)."""
        lim = self.config.limits
        return decode_pages(item, max_pixels=lim.max_pixels, pdf_dpi=lim.pdf_dpi,
                            max_pdf_pages=lim.max_pdf_pages, pages=lim.pages, rgb=rgb,
                            max_pages=max_pages)

    def det_shape(self, width: int, height: int, det_limit: int | None = None) -> tuple[int, int]:
        """Detector input (height, width) for a page of ``width`` x ``height`` pixels: how
        much work detection does on it (``det_limit`` overrides the long-side cap)."""
        return self.runner.det_prep.shape(max(1, height), max(1, width), det_limit)

    def gpu_scheduler(self, det_limit: int | None = None) -> Any:
        """The GPU scheduler for one detection-limit bucket (created once, kept; at most
        len(DET_LIMIT_BUCKETS) of them)."""
        # callers pass limits already bucketed by ReadOptions (or the engine's own limit)
        limit = det_limit or self.config.det.limit_side
        with self._gpu_lock:
            sch = self._gpu.get(limit)
            if sch is None:
                from ocrforge.scheduling.gpu import GpuScheduler

                sch = self._gpu[limit] = GpuScheduler(self.runner, self.decode, det_limit=limit)
            return sch

    def close(self) -> None:
        for sch in self._gpu.values():
            sch.close()
        self._gpu.clear()
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._gpu_pool is not None:
            self._gpu_pool.close()
            self._gpu_pool = None


def on_devices(devices: Sequence[str], config: EngineConfig | None = None,
               **overrides: Any) -> DevicePool:
    """One engine per device behind one ``read_many`` (``scheduling.multi_device``): pages are
    spread over ``devices`` ("cuda:0", "cuda:1"; "cpu" twice splits the cores) by a shared
    queue, come back in input order, and a device that fails has its pages read by the others.
    """

    from ocrforge.scheduling.multi_device import DevicePool

    cfg = config or EngineConfig.from_env()
    if overrides:
        cfg = cfg.with_(**overrides)
    on_cpu = sum(d == "cpu" for d in devices)
    engines = []
    for d in devices:
        c = cfg.with_(device=d)
        if d == "cpu" and on_cpu > 1 and c.runtime.intra_op_threads == 0:
            c = c.with_(intra_op_threads=max(1, _usable_cpus() // on_cpu))
        engines.append(OCR(c))
    return DevicePool(engines)


def _usable_cpus() -> int:
    from ocrforge.runtimes.cpu_budget import usable_cpus

    return usable_cpus()


def read(item: Any, **overrides: Any) -> Page:
    """One-liner: OCR a single image with the default engine (cached per options)."""
    key = tuple(sorted(overrides.items()))
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = OCR(**overrides)
    return eng.read(item)


_ENGINES: dict[tuple, OCR] = {}
