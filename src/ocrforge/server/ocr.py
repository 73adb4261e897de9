"""``POST /v1/ocr``, step by step: receive the upload (bounded, 408/413/429) -> options ->
probe kind, page count and page sizes (no pixels decoded) -> admit by work (429 with a
computed Retry-After, 422) -> decode pages one at a time in the decode pool, each holding a
page slot, into the dynamic batcher (a one-page JPEG or PNG for an engine in a child process
goes on undecoded: the child decodes it) -> the JSON envelope or an exporter's body. The event
loop never runs decode or inference."""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import Response

from ocrforge.config import bucket_det_limit
from ocrforge.io.exporters import get_exporter
from ocrforge.result import Page
from ocrforge.server.admission import (
    PAGE_OVERHEAD,
    Overloaded,
    Reservation,
    Stopped,
    TooMuchWork,
    page_units,
)
from ocrforge.server.batcher import Batcher, EngineKey, Job, UnreadablePage
from ocrforge.server.decoding import (
    ENCODED_KINDS,
    EncodedPage,
    EncodedPages,
    PageStream,
    Probe,
    is_pdf,
    probe,
)
from ocrforge.server.errors import ApiError
from ocrforge.server.formats import envelope, json_body, render
from ocrforge.server.service import ServiceState
from ocrforge.server.upload import UploadHold, read_upload, request_options


@dataclass
class Upload:
    data: bytes
    source: str
    fields: dict[str, str]
    received: float  # perf_counter when the body was in


@dataclass
class Outcome:
    pages: list[Page]
    decode_s: list[float] = field(default_factory=list)
    images: list = field(default_factory=list)  # decoded images, for formats that draw pages


async def receive(request: Request, state: ServiceState, hold: UploadHold) -> Upload:
    s = state.settings
    try:
        async with asyncio.timeout(s.request_timeout_s):
            data, source, fields = await read_upload(request, s.max_upload_bytes, hold)
    except TimeoutError:
        raise ApiError(408, "upload_timeout", "the upload was not received within "
                       f"{s.request_timeout_s:g} s") from None
    return Upload(data, source, fields, time.perf_counter())


async def probe_upload(state: ServiceState, batcher: Batcher, data: bytes) -> Probe:
    lim = batcher.engines[0].config.limits
    look = functools.partial(probe, data, dpi=lim.pdf_dpi, max_pages=lim.max_pdf_pages)
    if not is_pdf(data):  # image headers are read in microseconds
        return look()
    return await asyncio.get_running_loop().run_in_executor(state.decode_pool, look)


def admit(batcher: Batcher, found: Probe, key: EngineKey, time_left_s: float,
          source: str) -> Reservation:
    engine = batcher.engines[0]
    units = [page_units(w, h, engine.det_shape(w, h, key[0])) if w and h
             else PAGE_OVERHEAD + 1.0 for w, h in found.sizes[:engine.config.limits.max_pdf_pages]]
    try:
        return batcher.admit(units, time_left_s)
    except Overloaded as e:
        raise ApiError(429, "overloaded", str(e), {"Retry-After": str(e.retry_after)}) from None
    except TooMuchWork as e:
        raise ApiError(422, "too_much_work", f"{source}: {e}") from None
    except Stopped as e:
        raise ApiError(503, "shutting_down", str(e)) from None


def page_stream(batcher: Batcher, key: EngineKey, found: Probe, upload: Upload,
                keep_images: bool) -> PageStream | EncodedPages:
    """The upload's pages: decoded here one at a time, or (one JPEG/PNG page within the
    limits, for an engine that decodes in its own process) its bytes as they came. Why: the
    parent then neither decodes nor sends ~6 MB of pixels a page to the child; anything the
    header check cannot vouch for is decoded here, so its errors are the usual ones."""
    limits = batcher.engines[0].config.limits
    (w, h) = found.sizes[0]
    if (found.kind in ENCODED_KINDS and found.pages == 1 and 0 < w * h <= limits.max_pixels
            and limits.pages is None and not keep_images and batcher.takes_encoded(key)):
        return EncodedPages(upload.data, upload.source)
    return PageStream(batcher.engines[0].decode(upload.data), upload.data, found.kind,
                      upload.source)


async def feed_pages(state: ServiceState, batcher: Batcher, job: Job,
                     stream: PageStream | EncodedPages, keep_images: bool) -> Outcome:
    """Decode pages one at a time into the batcher (each first takes a page slot), then wait
    for the engines' results."""
    loop = asyncio.get_running_loop()
    out = Outcome([])
    while not job.future.done():  # done early: an engine call failed
        await batcher.acquire_slot()
        page = None
        try:
            t = time.perf_counter()
            page = await loop.run_in_executor(state.decode_pool, stream.next)
            if page is None:
                break
            if not isinstance(page, EncodedPage):  # else the engine times its own decode
                out.decode_s.append(time.perf_counter() - t)
            if keep_images:
                out.images.append(page.image)
            batcher.put(job, page)
        finally:
            if page is None:  # the slot's page never reached the queue
                batcher.release_slot()
    batcher.finish(job)
    out.pages = await job.future
    return out


async def run_pages(state: ServiceState, batcher: Batcher, job: Job,
                    stream: PageStream | EncodedPages, keep_images: bool, t0: float,
                    limit_s: float, source: str) -> Outcome:
    """``feed_pages`` within the request's time; the job is cancelled on any failure (also
    when the task is cancelled: client gone, server stopping)."""
    answered = False
    try:
        async with asyncio.timeout(max(0.0, limit_s - (time.perf_counter() - t0))):
            out = await feed_pages(state, batcher, job, stream, keep_images)
            answered = True
            return out
    except TimeoutError:
        raise ApiError(504, "timeout", f"{source}: not finished within {limit_s:g} s "
                       "(server busy or input large); retry later") from None
    except ApiError:
        raise
    except UnreadablePage as e:  # "<source>: <why>", from the decode in the engine's process
        raise ApiError(400, "corrupt_input", str(e)) from None
    except Exception as e:
        raise ApiError(500, "engine_error", f"{source}: the engine failed "
                       f"({type(e).__name__}: {e})") from None
    finally:
        if not answered:
            batcher.cancel(job)  # drops its queued pages and gives their slots back
        try:
            state.decode_pool.submit(stream.close)  # after any decode step still running
        except RuntimeError:  # the pool is shut down: the server is exiting
            pass


async def respond(request: Request, state: ServiceState, job: Job, out: Outcome,
                  upload: Upload, kind: str, fmt: str, t0: float) -> Response:
    for p, d in zip(out.pages, out.decode_s, strict=False):
        p.timings["decode"] = d
    state.metrics.observe_pages(out.pages)
    t_end = time.perf_counter()
    timings = {
        "receive": (upload.received - t0) * 1000, "decode": sum(out.decode_s) * 1000,
        "queue": job.queue_s * 1000, "inference": job.infer_s * 1000,
        "first_page": ((job.first_done or t_end) - t0) * 1000,
        "total": (t_end - t0) * 1000,
    }
    headers = {"Server-Timing": ", ".join(f"{k};dur={v:.1f}" for k, v in timings.items())}
    if fmt != "json":
        body, media_type = await asyncio.get_running_loop().run_in_executor(
            state.decode_pool, render, out.pages, fmt, out.images,
            state.settings.engine.limits.pdf_dpi if kind == "pdf" else None)
        return Response(body, media_type=media_type, headers=headers)
    rid = request.scope.get("state", {}).get("request_id", "")
    body = envelope(rid, upload.source, kind, out.pages, timings,
                    {"pages": job.batch_pages, "requests": job.batch_requests})
    return Response(json_body(body), media_type="application/json", headers=headers)


async def serve_ocr(request: Request, state: ServiceState, batcher: Batcher, hold: UploadHold,
                    t0: float, fmt: str | None, det_limit: int | None, cls: bool | None,
                    timeout: float | None) -> Response:
    upload = await receive(request, state, hold)
    fmt, det_limit, use_cls, limit_s = request_options(upload.fields, fmt, det_limit, cls,
                                                       timeout, state.settings)
    if use_cls and not state.cls_available:
        raise ApiError(400, "invalid_parameter", "parameter 'cls': the orientation "
                       "classifier is not available on this server")
    default_limit, default_cls = batcher.default_key()
    # per-request limits are bucketed: a bounded set of batch keys / GPU schedulers
    key = (bucket_det_limit(det_limit) if det_limit else default_limit,
           default_cls if use_cls is None else use_cls)
    found = await probe_upload(state, batcher, upload.data)
    max_pages = batcher.engines[0].config.limits.max_pdf_pages
    if found.kind == "pdf" and found.pages > max_pages:  # before admission: waiting cannot help
        raise ApiError(422, "too_many_pages", f"{upload.source}: PDF has {found.pages} pages, "
                       f"over the limit of {max_pages}")
    reservation = admit(batcher, found, key, limit_s - (time.perf_counter() - t0), upload.source)
    state.admitted_requests += 1
    try:
        keep_images = fmt != "json" and get_exporter(fmt).needs_images
        stream = page_stream(batcher, key, found, upload, keep_images)
        upload.data = b""
        job = batcher.open(key, reservation)
        out = await run_pages(state, batcher, job, stream, keep_images, t0, limit_s,
                              upload.source)
    finally:
        state.admitted_requests -= 1
        reservation.release()
    return await respond(request, state, job, out, upload, found.kind, fmt, t0)
