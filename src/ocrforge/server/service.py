"""The service's state and engine start-up: one engine per device, warmed up, behind one
batcher; the measured warm-up speed seeds admission's engine seconds per work unit."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import Request

from ocrforge.config import ReadOptions
from ocrforge.io.inputs import PageImage
from ocrforge.runtimes.choice import cpu_backend
from ocrforge.runtimes.cpu_budget import usable_cpus
from ocrforge.server.admission import Admission, ByteBudget, page_units
from ocrforge.server.batcher import Batcher, run_engine, streams_to_gpu
from ocrforge.server.metrics import Metrics
from ocrforge.server.settings import ServerSettings
from ocrforge.version import __version__

log = logging.getLogger("ocrforge.server")


class ServiceState:
    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.metrics = Metrics()
        self.batcher: Batcher | None = None
        self.uploads = ByteBudget(settings.max_inflight_upload_bytes)
        self.admitted_requests = 0
        self.decode_pool: ThreadPoolExecutor | None = None
        self.load_error: str | None = None
        self.cls_available = False
        self.info: dict[str, Any] = {}
        self.started = time.time()

    @property
    def ready(self) -> bool:
        return self.batcher is not None


def service(request: Request) -> ServiceState:
    return request.app.state.service


def _warmup_image() -> PageImage:
    """A small page with real text, so detection and recognition both run."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("RGB", (480, 160), "white")
    d = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=28) if hasattr(ImageFont, "load_default") else None
    d.text((20, 30), "ocrforge warm-up 2026", fill="black", font=font)
    d.text((20, 90), "Hello world 12345", fill="black", font=font)
    return PageImage("warm-up", 0, np.ascontiguousarray(np.asarray(img)[:, :, ::-1]))


def _open_engine(s: ServerSettings, dev: str, n_devices: int) -> tuple[Any, Any]:
    """(engine, its orientation classifier runtime or None) for one device."""
    from ocrforge.engine import OCR

    cfg = s.engine.with_(device=dev, max_pixels=s.max_pixels, max_pdf_pages=s.max_pdf_pages)
    if dev == "cpu" and cfg.runtime.intra_op_threads == 0 and n_devices > 1:
        cfg = cfg.with_(intra_op_threads=max(1, usable_cpus() // n_devices))
    eng = OCR(cfg)
    cls_rt = None
    try:
        cls_rt = eng.runner.cls_runtime()  # opened now so cls=on requests never wait
    except Exception as e:  # cls=on requests will get a clear 400
        log.warning("orientation classifier unavailable: %s", e)
    return eng, cls_rt


def _warm_up(s: ServerSettings, eng: Any) -> tuple[float, int]:
    """Run the warm-up page twice, by the path requests will take (the GPU scheduler that the
    stream feeds, or ``run_engine``), then on a GPU capture the common shapes
    (``warmup_s``): engine seconds per work unit of the second run, and shapes captured."""
    key = (eng.config.det.limit_side, False)
    page = _warmup_image()
    gpu = streams_to_gpu(eng, s.gpu_pipeline)
    for _ in range(2):
        t = time.perf_counter()
        if gpu:
            list(eng.gpu_scheduler(key[0]).run([page.image], ReadOptions(det_limit_side=key[0])))
        else:
            run_engine(eng, [page], key)
    units = page_units(page.width, page.height, eng.det_shape(page.width, page.height))
    unit_s = (time.perf_counter() - t) / units
    captured = 0
    if gpu and s.warmup_s > 0:
        captured = _capture_common_shapes(eng.gpu_scheduler(key[0]), s.warmup_s)
    return unit_s, captured


def _in_child(s: ServerSettings, eng: Any) -> bool:
    """Whether this engine's pages go to a GPU stream whose engine runs in a child process
    (``--engine-process``)."""
    return s.engine_process > 0 and streams_to_gpu(eng, s.gpu_pipeline)


def _child_streams(s: ServerSettings) -> Any:
    """``--engine-process N``: each GPU stream's engine in N child processes (their driver
    threads then share no interpreter lock with the request handling), started side by side.
    The first set warms up as this process would have (the warm-up page, then ``warmup_s`` of
    captures); an engine's later ones (another detection limit, or after a child died) only
    run the warm-up page."""
    from ocrforge.engine import OCR
    from ocrforge.scheduling.stream_process import ProcessStream
    from ocrforge.scheduling.stream_set import StreamSet

    warmed: set[int] = set()  # engines (one per device) whose first children captured the plan

    def start(eng: Any, limit: int) -> Any:
        warmup_s = s.warmup_s if s.warmup and id(eng) not in warmed else 0.0
        warmed.add(id(eng))
        streams = [ProcessStream(OCR, eng.config, limit, ReadOptions(det_limit_side=limit),
                                 warm_page=_warmup_image().image if s.warmup else None,
                                 warmup_s=warmup_s, name=f"ocrforge-stream-{limit}-{k}")
                   for k in range(s.engine_process)]
        try:
            for st in streams:
                info = st.wait_ready()
                log.info("ocrforge: engine process %s ready (%s shapes captured)", info["pid"],
                         info["warmup_shapes"])
        except BaseException:
            for st in streams:  # one did not start: the others end with it
                st.close(5.0)
            raise
        return streams[0] if len(streams) == 1 else StreamSet(streams)

    return start


def _first_child_page(batcher: Batcher, eng: Any) -> tuple[float, int]:
    """Start the engine's child stream and time the warm-up page through it: engine seconds
    per work unit (admission's estimate), and the shapes the child captured."""
    limit = eng.config.det.limit_side
    st = batcher.stream_for(eng, limit)
    page = _warmup_image()
    t = time.perf_counter()
    st.submit(page.image).result()
    units = page_units(page.width, page.height, eng.det_shape(page.width, page.height))
    return (time.perf_counter() - t) / units, int(st.info.get("warmup_shapes", 0))


def _capture_common_shapes(gp: Any, budget_s: float) -> int:
    """The CUDA graphs of the bucket shapes requests will meet, most used first, before the
    server says ready: a fresh server otherwise made its first requests wait for each new
    shape's first run and capture (64 requests one at a time: p95 5.4 s, H100, 2026-12-07)."""
    n0, t0 = gp.stats.warmup_shapes, time.perf_counter()
    try:
        gp.warmup(budget_s=budget_s)
    except Exception as e:  # noqa: BLE001 - pages capture their shapes as they come instead
        log.warning("ocrforge: capturing the common shapes stopped: %s: %s", type(e).__name__, e)
    n, spent = gp.stats.warmup_shapes - n0, time.perf_counter() - t0
    log.info("ocrforge: %d bucket shapes captured in %.1f s before ready", n, spent)
    return n


def _engine_info(engines: list[Any], devices: list[str], s: ServerSettings,
                 batcher: Batcher) -> dict[str, str]:
    cfg = engines[0].config
    return {
        "version": __version__,
        "model_set": cfg.models.name,
        "runtime": cpu_backend(cfg.runtime),  # the backend, with "auto" resolved
        "runtime_name": str(getattr(engines[0].det_rt, "name", cfg.runtime.backend)),
        "devices": ",".join(devices),
        "engines": str(len(engines)),
        "precision": f"det={cfg.det.precision},rec={cfg.rec.precision},torch={cfg.runtime.torch_precision}",
        "det_limit_side": str(cfg.det.limit_side),
        "max_batch_pages": str(s.max_batch_pages),
        "max_wait_ms": str(s.max_wait_ms),
        "max_batch_ms": str(s.max_batch_ms),
        "queue_size": str(s.queue_size),
        "max_decoded_pages": str(batcher.max_decoded_pages),
        # requests' pages join one long-lived run of the GPU scheduler (--gpu-pipeline, torch)
        "gpu_stream": "on" if batcher.streaming(engines[0]) else "off",
        "engine_process": "on" if _in_child(s, engines[0]) else "off",
        "engine_processes": str(s.engine_process if _in_child(s, engines[0]) else 0),
    }


def load_engines(state: ServiceState) -> None:
    """Build one engine per device, warm each up, start the batcher (runs in a thread)."""
    s = state.settings
    try:
        devices = s.engine_devices
        engines, cls_rts = [], []
        unit_s = 0.0  # engine seconds per work unit, measured on the warm-up page
        captured = 0  # CUDA graphs captured before ready
        t0 = time.perf_counter()
        for dev in devices:
            eng, cls_rt = _open_engine(s, dev, len(devices))
            if s.warmup and not _in_child(s, eng):  # a child engine warms itself up
                u, n = _warm_up(s, eng)
                unit_s, captured = max(unit_s, u), captured + n
            engines.append(eng)
            cls_rts.append(cls_rt)
        state.cls_available = all(c is not None for c in cls_rts)
        admission = Admission(max_pages=s.queue_size, engines=len(engines),
                              safety=s.admission_safety, unit_s=unit_s or 1.0)
        batcher = Batcher(engines, max_batch_pages=s.max_batch_pages, max_wait_ms=s.max_wait_ms,
                          max_batch_ms=s.max_batch_ms, admission=admission,
                          max_decoded_pages=s.max_decoded_pages or None,
                          on_batch=state.metrics.on_batch, gpu_pipeline=s.gpu_pipeline,
                          stream_factory=_child_streams(s) if s.engine_process else None)
        for eng in engines:
            if _in_child(s, eng):  # started and warmed up before ready
                u, n = _first_child_page(batcher, eng)
                unit_s, captured = max(unit_s, u), captured + n
        if unit_s:
            admission.unit_s = unit_s
        batcher.start()
        state.info = _engine_info(engines, devices, s, batcher)
        state.info.update(warmup_shapes=str(captured), start_s=f"{time.perf_counter() - t0:.1f}")
        state.metrics.info.info(state.info)
        state.metrics.bind_queue(batcher, lambda: state.admitted_requests, s.queue_size)
        state.batcher = batcher
        state.metrics.ready.set(1)
        log.info("ocrforge: ready (%d engine(s) on %s)", len(engines), ",".join(devices))
    except Exception as e:
        state.load_error = f"{type(e).__name__}: {e}"
        log.error("ocrforge: engines failed to load: %s", state.load_error)
