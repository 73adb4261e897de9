"""The HTTP service: FastAPI app, request handling, limits and the demo page.

Request path of ``POST /v1/ocr``: read the body (bounded per request, 413, and over all
requests, 429) -> probe kind, page count and page sizes (no pixels decoded) -> admit by work:
pages and the estimated time to finish (429 with a computed Retry-After) -> decode pages one
at a time in a thread pool (4xx on bad input), each holding one of a bounded number of page
slots -> dynamic batcher (engine threads) -> JSON envelope / text / Markdown. The event loop
never runs decode or inference.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hmac
import logging
import math
import os
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers, MutableHeaders, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartParser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ocrforge.config import bucket_det_limit
from ocrforge.io.exporters import get_exporter
from ocrforge.io.inputs import PageImage
from ocrforge.server.admission import (
    PAGE_OVERHEAD,
    Admission,
    ByteBudget,
    Overloaded,
    Stopped,
    TooMuchWork,
    page_units,
)
from ocrforge.server.apidocs import add_offline_docs
from ocrforge.server.batcher import Batcher, run_engine
from ocrforge.server.decoding import PageStream, is_pdf, probe
from ocrforge.server.errors import ApiError
from ocrforge.server.formats import FORMATS, envelope, render
from ocrforge.server.metrics import Metrics
from ocrforge.server.settings import ServerSettings
from ocrforge.version import __version__

log = logging.getLogger("ocrforge.server")

STATIC_DIR = Path(__file__).parent / "static"
PUBLIC_PATHS = {"/healthz", "/readyz"}
FORM_FIELDS = {"file", "format", "det_limit", "cls", "timeout"}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_SAFE_NAME = re.compile(r"[^\w.\- ()\[\]+,@]")

OCR_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "An image (PNG, JPEG, TIFF, BMP, WebP, GIF, PNM) or a PDF, either as "
        "multipart/form-data field `file` or as the raw request body. The type is taken from "
        "the content, never from the file name or Content-Type.",
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "format": {"type": "string", "enum": list(FORMATS)},
                        "det_limit": {"type": "integer"},
                        "cls": {"type": "boolean"},
                        "timeout": {"type": "number"},
                    },
                }
            },
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "image/*": {"schema": {"type": "string", "format": "binary"}},
            "application/pdf": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "Corrupt or empty input, malformed request or bad parameter"},
    401: {"description": "API key missing or wrong"},
    408: {"description": "The upload was not received within the request timeout"},
    413: {"description": "Upload larger than the server's limit"},
    415: {"description": "Not an image or PDF (content sniffed)"},
    422: {"description": "Too many pixels (decompression bomb), too many PDF pages, image too "
          "small, or more work than the request timeout allows even on an idle server"},
    429: {"description": "Too much work queued to finish this request within its timeout, "
          "or too many pages or upload bytes in flight; retry after the Retry-After header's "
          "seconds (estimated from the queue)"},
    503: {"description": "Models still loading, failed to load, or shutting down"},
    504: {"description": "Not finished within the request timeout"},
}


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


# ---------------------------------------------------------------------- engines
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


def load_engines(state: ServiceState) -> None:
    """Build one engine per device, warm each up, start the batcher (runs in a thread)."""
    from ocrforge.engine import OCR

    s = state.settings
    try:
        devices = s.engine_devices
        engines, cls_rts = [], []
        unit_s = 0.0  # engine seconds per work unit, measured on the warm-up page
        for dev in devices:
            cfg = s.engine.with_(device=dev, max_pixels=s.max_pixels, max_pdf_pages=s.max_pdf_pages)
            if dev == "cpu" and cfg.runtime.intra_op_threads == 0 and len(devices) > 1:
                cfg = cfg.with_(intra_op_threads=max(1, (os.cpu_count() or 1) // len(devices)))
            eng = OCR(cfg)
            cls_rt = None
            try:
                cls_rt = eng.runner.cls_runtime()  # opened now so cls=on requests never wait
            except Exception as e:  # cls=on requests will get a clear 400
                log.warning("orientation classifier unavailable: %s", e)
            if s.warmup:
                gpu = s.gpu_pipeline and cfg.runtime.backend == "torch" and dev.startswith("cuda")
                if gpu:  # buckets and CUDA graphs of the GPU scheduler
                    eng.gpu_scheduler()
                key = (cfg.det.limit_side, False)
                page = _warmup_image()
                for _ in range(2):
                    t = time.perf_counter()
                    run_engine(eng, [page], key, s.gpu_pipeline)
                units = page_units(page.width, page.height, cfg.det.limit_side,
                                   cfg.det.min_side, cfg.det.max_upscale)
                unit_s = max(unit_s, (time.perf_counter() - t) / units)
            engines.append(eng)
            cls_rts.append(cls_rt)
        state.cls_available = all(c is not None for c in cls_rts)
        admission = Admission(max_pages=s.queue_size, engines=len(engines),
                              safety=s.admission_safety, unit_s=unit_s or 1.0)
        batcher = Batcher(engines, max_batch_pages=s.max_batch_pages, max_wait_ms=s.max_wait_ms,
                          max_batch_ms=s.max_batch_ms, admission=admission, max_decoded_pages=s.max_decoded_pages or None,
                          on_batch=state.metrics.on_batch, gpu_pipeline=s.gpu_pipeline)
        batcher.start()
        cfg = engines[0].config
        state.info = {
            "version": __version__,
            "model_set": cfg.models.name,
            "runtime": cfg.runtime.backend,
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
        }
        state.metrics.info.info(state.info)
        state.metrics.bind_queue(batcher, lambda: state.admitted_requests, s.queue_size)
        state.batcher = batcher
        state.metrics.ready.set(1)
        log.info("ocrforge: ready (%d engine(s) on %s)", len(engines), ",".join(devices))
    except Exception as e:
        state.load_error = f"{type(e).__name__}: {e}"
        log.error("ocrforge: engines failed to load: %s", state.load_error)


# ---------------------------------------------------------------------- middleware
def _json_error(err: ApiError, request_id: str | None) -> JSONResponse:
    return JSONResponse(err.body(request_id), status_code=err.status, headers=err.headers)


class ServiceMiddleware:
    """Request id, API key, metrics, and a JSON 500 for anything unexpected."""

    def __init__(self, app: ASGIApp, state: ServiceState):
        self.app = app
        self.state = state

    def _authorized(self, headers: Headers) -> bool:
        key = self.state.settings.api_key
        if not key:
            return True
        given = headers.get("x-api-key")
        auth = headers.get("authorization", "")
        if given is None and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        elif given is None and auth[:6].lower() == "basic ":
            try:  # browsers: any user name, the key as password
                given = base64.b64decode(auth[6:].strip()).decode("utf-8").partition(":")[2]
            except Exception:
                given = None
        return given is not None and hmac.compare_digest(given.encode(), key.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        headers = Headers(scope=scope)
        rid = headers.get("x-request-id", "")
        if not _REQUEST_ID.match(rid):
            rid = uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        path = scope.get("path", "")
        status = [500]
        started = [False]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                started[0] = True
                MutableHeaders(scope=message)["X-Request-ID"] = rid
            await send(message)

        metrics = self.state.metrics
        try:
            if path not in PUBLIC_PATHS and not self._authorized(headers):
                err = ApiError(401, "unauthorized", "missing or wrong API key: send it as "
                               "'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
                               {"WWW-Authenticate": 'Basic realm="ocrforge", charset="UTF-8"'})
                metrics.errors.labels(err.kind).inc()
                await _json_error(err, rid)(scope, receive, send_wrapper)
                return
            await self.app(scope, receive, send_wrapper)
        except Exception:
            log.exception("unhandled error in %s (request %s)", path, rid)
            metrics.errors.labels("internal").inc()
            if not started[0]:
                err = ApiError(500, "internal", "internal server error; the log has details "
                               f"under request id {rid}")
                await _json_error(err, rid)(scope, receive, send_wrapper)
        finally:
            metrics.observe_http(path, status[0], time.perf_counter() - t0)


# ---------------------------------------------------------------------- request parsing
def _request_id(request: Request) -> str:
    return request.scope.get("state", {}).get("request_id", "")


def _safe_name(name: str | None) -> str:
    if not name:
        return "upload"
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = _SAFE_NAME.sub("_", name)[:120].strip()
    return name or "upload"


class UploadHold:
    """Upload bytes this request holds in the server-wide budget (429 when it is spent)."""

    def __init__(self, budget: ByteBudget, retry_after: int):
        self.budget = budget
        self.retry_after = retry_after
        self.held = 0

    def take(self, n: int) -> None:
        if not self.budget.take(n):
            raise ApiError(429, "overloaded", f"uploads in flight hold the server's limit of "
                           f"{self.budget.limit:,} bytes; retry after {self.retry_after} s",
                           {"Retry-After": str(self.retry_after)})
        self.held += n

    def release(self) -> None:
        self.budget.give(self.held)
        self.held = 0


async def _drain(stream: AsyncIterator[bytes], cap: int) -> None:
    """Read and drop the rest of a body (up to ``cap``) so the client can read our answer."""
    n = 0
    async for more in stream:
        n += len(more)
        if n > cap:
            break


async def _limited(stream: AsyncIterator[bytes], limit: int,
                   hold: UploadHold | None = None) -> AsyncIterator[bytes]:
    n = 0
    async for chunk in stream:
        n += len(chunk)
        if hold is not None and n > hold.held:
            try:
                hold.take(n - hold.held)
            except ApiError:
                await _drain(stream, 4 * limit)
                raise
        if n > limit:
            # read and drop the rest (up to a cap) so the client is able to read our answer
            async for more in stream:
                n += len(more)
                if n > 4 * limit:
                    break
            raise ApiError(413, "payload_too_large",
                           f"upload is over the server's limit of {limit:,} bytes")
        yield chunk


async def read_upload(request: Request, limit: int,
                      hold: UploadHold | None = None) -> tuple[bytes, str, dict[str, str]]:
    """(data, source name, form fields) from a multipart upload or a raw body; the bytes read
    are taken from ``hold``'s budget (all of Content-Length at once when it is given)."""
    clen = request.headers.get("content-length", "")
    if clen.isdigit() and int(clen) > limit:
        if int(clen) <= 4 * limit:
            await _drain(request.stream(), 4 * limit)
        raise ApiError(413, "payload_too_large",
                       f"upload of {int(clen):,} bytes is over the server's limit of {limit:,} bytes")
    if hold is not None and clen.isdigit():
        try:
            hold.take(int(clen))
        except ApiError:
            await _drain(request.stream(), 4 * limit)
            raise
    ctype = request.headers.get("content-type", "").lower()
    stream = _limited(request.stream(), limit, hold)
    if not ctype.startswith("multipart/form-data"):
        # any other body is the file itself (curl --data-binary sends form-urlencoded)
        data = b"".join([c async for c in stream])
        return data, "upload", {}
    parser = MultiPartParser(request.headers, stream, max_files=1, max_fields=len(FORM_FIELDS),
                             max_part_size=64 * 1024)
    try:
        form = await parser.parse()
    except ApiError:
        raise
    except Exception as e:
        raise ApiError(400, "bad_request", f"malformed multipart body ({e})") from None
    try:
        fields: dict[str, str] = {}
        upload: UploadFile | None = None
        for name, value in form.multi_items():
            if name not in FORM_FIELDS:
                raise ApiError(400, "bad_request", f"unknown form field {name!r}; expected "
                               f"{', '.join(sorted(FORM_FIELDS))}")
            if name == "file":
                if not isinstance(value, UploadFile):
                    raise ApiError(400, "bad_request", "form field 'file' must be a file upload "
                                   "(the server never reads paths or fetches URLs)")
                upload = value
            elif isinstance(value, str):
                fields[name] = value
            else:
                raise ApiError(400, "bad_request", f"form field {name!r} must be a plain value")
        if upload is None:
            raise ApiError(400, "bad_request", "no file: send the image or PDF as multipart "
                           "field 'file' or as the raw request body")
        data = await upload.read()
        return data, _safe_name(upload.filename), fields
    finally:
        await form.close()


def _options(fields: dict[str, str], fmt: str | None, det_limit: int | None, cls: bool | None,
             timeout: float | None, s: ServerSettings) -> tuple[str, int | None, bool | None, float]:
    """Query parameters win over form fields; every value checked with a clear message."""
    def bad(name: str, msg: str) -> ApiError:
        return ApiError(400, "invalid_parameter", f"parameter {name!r}: {msg}")

    if fmt is None:
        fmt = fields.get("format", "json").strip().lower() or "json"
    if fmt == "md":
        fmt = "markdown"
    if fmt not in FORMATS:
        raise bad("format", f"must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if det_limit is None and fields.get("det_limit", "").strip():
        try:
            det_limit = int(fields["det_limit"])
        except ValueError:
            raise bad("det_limit", f"must be an integer, not {fields['det_limit']!r}") from None
    if det_limit is not None and not 32 <= det_limit <= s.max_det_limit:
        raise bad("det_limit", f"must be between 32 and {s.max_det_limit}, not {det_limit}")
    if cls is None and fields.get("cls", "").strip():
        v = fields["cls"].strip().lower()
        if v not in ("1", "0", "true", "false", "on", "off", "yes", "no"):
            raise bad("cls", f"must be on or off, not {fields['cls']!r}")
        cls = v in ("1", "true", "on", "yes")
    if timeout is None and fields.get("timeout", "").strip():
        try:
            timeout = float(fields["timeout"])
        except ValueError:
            raise bad("timeout", f"must be a number of seconds, not {fields['timeout']!r}") from None
    if timeout is not None and not timeout > 0:
        raise bad("timeout", "must be > 0 seconds")
    limit = s.request_timeout_s if timeout is None else min(timeout, s.request_timeout_s)
    return fmt, det_limit, cls, limit


# ---------------------------------------------------------------------- the app
def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """The ASGI app; engines load in a background thread at startup (see /readyz)."""
    settings = settings or ServerSettings()
    settings.validate()
    state = ServiceState(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.decode_pool = ThreadPoolExecutor(settings.decode_threads,
                                               thread_name_prefix="ocrforge-decode")
        threading.Thread(target=load_engines, args=(state,), name="ocrforge-load",
                         daemon=True).start()
        try:
            yield
        finally:
            # uvicorn has already waited for in-flight requests; finish anything still queued
            if state.batcher is not None:
                await asyncio.to_thread(state.batcher.stop, 30.0)
            state.decode_pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="ocrforge",
        version=__version__,
        description="Fast local OCR (Chinese and English). POST an image or PDF to /v1/ocr. "
        "Requests arriving together are batched into one engine call.",
        lifespan=lifespan,
        docs_url=None,  # served from local files by add_offline_docs, never from a CDN
        redoc_url=None,
    )
    app.state.service = state
    app.add_middleware(ServiceMiddleware, state=state)
    add_offline_docs(app)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        state.metrics.errors.labels(exc.kind).inc()
        return _json_error(exc, _request_id(request))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e.get("loc", ())[1:]) or "request"
            parts.append(f"parameter {loc!r}: {e.get('msg', 'invalid')}")
        err = ApiError(400, "invalid_parameter", "; ".join(parts))
        state.metrics.errors.labels(err.kind).inc()
        return _json_error(err, _request_id(request))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        err = ApiError(exc.status_code, kind, str(exc.detail), dict(exc.headers or {}))
        return _json_error(err, _request_id(request))

    @app.get("/healthz", tags=["service"], summary="Liveness: the process is up")
    async def healthz() -> JSONResponse:
        if state.load_error:
            return JSONResponse({"status": "failed", "error": state.load_error}, status_code=503)
        return JSONResponse({"status": "ok", "uptime_s": round(time.time() - state.started, 1)})

    @app.get("/readyz", tags=["service"], summary="Readiness: models loaded and warmed up")
    async def readyz() -> JSONResponse:
        if state.ready:
            return JSONResponse({"ready": True, **state.info})
        status = "failed" if state.load_error else "loading"
        return JSONResponse({"ready": False, "status": status, "error": state.load_error},
                            status_code=503, headers={"Retry-After": "2"})

    @app.get("/metrics", tags=["service"], summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=Metrics.CONTENT_TYPE)

    @app.get("/v1/info", tags=["ocr"], summary="Engine configuration and request limits")
    async def info() -> JSONResponse:
        return JSONResponse({
            "ready": state.ready,
            "engine": state.info,
            "cls_available": state.cls_available,
            "limits": {
                "max_upload_bytes": settings.max_upload_bytes,
                "max_pixels": settings.max_pixels,
                "max_pdf_pages": settings.max_pdf_pages,
                "max_det_limit": settings.max_det_limit,
                "request_timeout_s": settings.request_timeout_s,
                "queue_size": settings.queue_size,
                "queue_size_unit": "pages",
                "max_inflight_upload_bytes": settings.max_inflight_upload_bytes,
            },
            "batching": {"max_batch_pages": settings.max_batch_pages,
                         "max_wait_ms": settings.max_wait_ms,
                         "max_batch_ms": settings.max_batch_ms,
                         "max_decoded_pages": (state.batcher.max_decoded_pages
                                               if state.batcher else None)},
        })

    @app.post("/v1/ocr", tags=["ocr"], summary="OCR an image or a PDF",
              responses={200: {"description": "ocrforge.response/1 JSON envelope (format=json), "
                               "or text/plain, or text/markdown",
                               "content": {"text/plain": {}, "text/markdown": {}}},
                         **ERROR_RESPONSES},
              openapi_extra=OCR_OPENAPI)
    async def ocr(
        request: Request,
        format: str | None = Query(
            None, description="json (default), text, markdown, hocr, alto or pdf"),
        det_limit: int | None = Query(
            None, description="detection: long side limit in pixels, rounded up to one of "
            "320, 480, 640, 800, 960, 1280, 1600, 2048, 2560, 3200, 4096 (default: server's)"),
        cls: bool | None = Query(None, description="0/180 orientation classifier on/off"),
        timeout: float | None = Query(
            None, description="seconds; capped by the server's request timeout"),
    ) -> Response:
        t0 = time.perf_counter()
        batcher = state.batcher
        if batcher is None:
            if state.load_error:
                raise ApiError(503, "unavailable", f"engines failed to load: {state.load_error}")
            raise ApiError(503, "not_ready", "models are still loading; retry shortly",
                           {"Retry-After": "2"})
        hold = UploadHold(state.uploads, max(1, math.ceil(batcher.admission.drain_s())))
        try:
            return await _serve(request, batcher, hold, t0, format, det_limit, cls, timeout)
        finally:
            hold.release()

    async def _serve(request: Request, batcher: Batcher, hold: UploadHold, t0: float,
                     fmt: str | None, det_limit: int | None, cls: bool | None,
                     timeout: float | None) -> Response:
        try:
            async with asyncio.timeout(settings.request_timeout_s):
                data, source, fields = await read_upload(request, settings.max_upload_bytes, hold)
        except TimeoutError:
            raise ApiError(408, "upload_timeout", "the upload was not received within "
                           f"{settings.request_timeout_s:g} s") from None
        t_recv = time.perf_counter()
        fmt, det_limit, use_cls, limit_s = _options(fields, fmt, det_limit, cls, timeout, settings)
        if use_cls and not state.cls_available:
            raise ApiError(400, "invalid_parameter", "parameter 'cls': the orientation "
                           "classifier is not available on this server")
        default_limit, default_cls = batcher.default_key()
        # per-request limits are bucketed: a bounded set of batch keys / GPU schedulers
        key = (bucket_det_limit(det_limit) if det_limit else default_limit,
               default_cls if use_cls is None else use_cls)
        engine = batcher.engines[0]
        lim = engine.config.limits
        loop = asyncio.get_running_loop()
        look = functools.partial(probe, data, dpi=lim.pdf_dpi, max_pages=lim.max_pdf_pages)
        # image headers are read in microseconds; a PDF's page table may take longer
        found = await loop.run_in_executor(state.decode_pool, look) if is_pdf(data) else look()
        det = engine.config.det
        units = [page_units(w, h, key[0], det.min_side, det.max_upscale) if w and h
                 else PAGE_OVERHEAD + 1.0 for w, h in found.sizes[:lim.max_pdf_pages]]
        try:
            reservation = batcher.admit(units, limit_s - (time.perf_counter() - t0))
        except Overloaded as e:
            raise ApiError(429, "overloaded", str(e),
                           {"Retry-After": str(e.retry_after)}) from None
        except TooMuchWork as e:
            raise ApiError(422, "too_much_work", f"{source}: {e}") from None
        except Stopped as e:
            raise ApiError(503, "shutting_down", str(e)) from None
        state.admitted_requests += 1
        stream = PageStream(engine.decode(data), data, found.kind, source)
        del data
        job = batcher.open(key, reservation)
        decode_s: list[float] = []
        # only formats that draw the page (pdf) keep the decoded images until the answer
        images: list = []
        keep_images = fmt != "json" and get_exporter(fmt).needs_images
        answered = False
        try:
            async with asyncio.timeout(max(0.0, limit_s - (time.perf_counter() - t0))):
                while not job.future.done():  # done early: an engine call failed
                    await batcher.acquire_slot()
                    page = None
                    try:
                        t = time.perf_counter()
                        page = await loop.run_in_executor(state.decode_pool, stream.next)
                        if page is None:
                            break
                        decode_s.append(time.perf_counter() - t)
                        if keep_images:
                            images.append(page.image)
                        batcher.put(job, page)
                    finally:
                        if page is None:  # the slot's page never reached the queue
                            batcher.release_slot()
                batcher.finish(job)
                pages = await job.future
                answered = True
        except TimeoutError:
            raise ApiError(504, "timeout", f"{source}: not finished within {limit_s:g} s "
                           "(server busy or input large); retry later") from None
        except ApiError:
            raise
        except Exception as e:
            raise ApiError(500, "engine_error", f"{source}: the engine failed "
                           f"({type(e).__name__}: {e})") from None
        finally:  # also when the task is cancelled (client gone, server stopping)
            if not answered:
                batcher.cancel(job)  # drops its queued pages and gives their slots back
            state.admitted_requests -= 1
            reservation.release()
            try:
                state.decode_pool.submit(stream.close)  # after any decode step still running
            except RuntimeError:  # the pool is shut down: the server is exiting
                pass
        for p, d in zip(pages, decode_s, strict=False):
            p.timings["decode"] = d
        state.metrics.observe_pages(pages)
        t_end = time.perf_counter()
        timings = {
            "receive": (t_recv - t0) * 1000, "decode": sum(decode_s) * 1000,
            "queue": job.queue_s * 1000, "inference": job.infer_s * 1000,
            "first_page": ((job.first_done or t_end) - t0) * 1000,
            "total": (t_end - t0) * 1000,
        }
        headers = {"Server-Timing": ", ".join(f"{k};dur={v:.1f}" for k, v in timings.items())}
        if fmt != "json":
            body, media_type = await asyncio.get_running_loop().run_in_executor(
                state.decode_pool, render, pages, fmt, images,
                settings.engine.limits.pdf_dpi if found.kind == "pdf" else None)
            return Response(body, media_type=media_type, headers=headers)
        body = envelope(_request_id(request), source, found.kind, pages, timings,
                        {"pages": job.batch_pages, "requests": job.batch_requests})
        return JSONResponse(body, headers=headers)

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
