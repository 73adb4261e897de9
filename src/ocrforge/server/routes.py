"""The HTTP routes: service probes, metrics, info, the demo page and ``POST /v1/ocr`` (whose
steps are in ``ocr.py``)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from ocrforge.server.errors import ApiError
from ocrforge.server.formats import FORMATS
from ocrforge.server.metrics import Metrics
from ocrforge.server.ocr import serve_ocr
from ocrforge.server.service import service
from ocrforge.server.upload import UploadHold

STATIC_DIR = Path(__file__).parent / "static"
router = APIRouter()

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


@router.get("/healthz", tags=["service"], summary="Liveness: the process is up")
async def healthz(request: Request) -> JSONResponse:
    state = service(request)
    if state.load_error:
        return JSONResponse({"status": "failed", "error": state.load_error}, status_code=503)
    return JSONResponse({"status": "ok", "uptime_s": round(time.time() - state.started, 1)})


@router.get("/readyz", tags=["service"], summary="Readiness: models loaded and warmed up")
async def readyz(request: Request) -> JSONResponse:
    state = service(request)
    if state.ready:
        return JSONResponse({"ready": True, **state.info})
    status = "failed" if state.load_error else "loading"
    return JSONResponse({"ready": False, "status": status, "error": state.load_error},
                        status_code=503, headers={"Retry-After": "2"})


@router.get("/metrics", tags=["service"], summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    return Response(service(request).metrics.render(), media_type=Metrics.CONTENT_TYPE)


@router.get("/v1/info", tags=["ocr"], summary="Engine configuration and request limits")
async def info(request: Request) -> JSONResponse:
    state = service(request)
    s = state.settings
    return JSONResponse({
        "ready": state.ready,
        "engine": state.info,
        "cls_available": state.cls_available,
        "limits": {
            "max_upload_bytes": s.max_upload_bytes,
            "max_pixels": s.max_pixels,
            "max_pdf_pages": s.max_pdf_pages,
            "max_det_limit": s.max_det_limit,
            "request_timeout_s": s.request_timeout_s,
            "queue_size": s.queue_size,
            "queue_size_unit": "pages",
            "max_inflight_upload_bytes": s.max_inflight_upload_bytes,
        },
        "batching": {"max_batch_pages": s.max_batch_pages,
                     "max_wait_ms": s.max_wait_ms,
                     "max_batch_ms": s.max_batch_ms,
                     "max_decoded_pages": (state.batcher.max_decoded_pages
                                           if state.batcher else None)},
    })


@router.post("/v1/ocr", tags=["ocr"], summary="OCR an image or a PDF",
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
    state = service(request)
    batcher = state.batcher
    if batcher is None:
        if state.load_error:
            raise ApiError(503, "unavailable", f"engines failed to load: {state.load_error}")
        raise ApiError(503, "not_ready", "models are still loading; retry shortly",
                       {"Retry-After": "2"})
    hold = UploadHold(state.uploads, max(1, math.ceil(batcher.admission.drain_s())))
    try:
        return await serve_ocr(request, state, batcher, hold, t0, format, det_limit, cls, timeout)
    finally:
        hold.release()


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")
