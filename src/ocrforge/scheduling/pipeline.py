"""Throughput pipeline for many pages.

Four stages run concurrently and hand work over through bounded queues, so memory stays
flat however many pages a job has and results come out in input order:

  decode (thread pool, lookahead bounded) -> detect + DB decode + crop (thread) ->
  orient + recognise + CTC decode (thread, crops of ``batch_pages`` pages batched together
  by width) -> the caller, who only receives finished pages.

ONNX Runtime releases the GIL while a network runs, so detection of page N+1 overlaps
recognition of page N. On few cores the two sessions compete for them: ``det_threads`` /
``rec_threads`` and ``allow_spinning`` in EngineConfig decide how they share
(docs/BENCHMARKS.md, "CPU acceleration", has the measurements).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ocrforge.io.inputs import InputError, PageImage, describe, iter_pages
from ocrforge.result import Page

if TYPE_CHECKING:
    from ocrforge.engine import OCR

_END = object()


def _decode(item: Any, engine: OCR) -> tuple[list[PageImage], float] | InputError:
    t0 = time.perf_counter()
    try:
        cfg = engine.config
        pages = list(iter_pages(item, max_pixels=cfg.max_pixels, pdf_dpi=cfg.pdf_dpi,
                                max_pdf_pages=cfg.max_pdf_pages))
    except InputError as e:
        return e
    except Exception as e:  # anything else in a decoder is still this input's failure
        return InputError(describe(item), f"cannot read ({type(e).__name__}: {e})")
    return pages, time.perf_counter() - t0


def _error_page(err: InputError) -> Page:
    return Page([], 0, 0, source=err.source, error=err.reason)


def run_pipeline(engine: OCR, items: Iterable[Any], *, batch_pages: int = 4) -> Iterator[Page]:
    cfg = engine.config
    if not cfg.pipeline:
        yield from _run_serial(engine, items, batch_pages)
        return
    workers = max(1, cfg.workers)
    depth = max(2, cfg.queue_size)
    det_q: queue.Queue = queue.Queue(maxsize=depth)
    rec_q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def producer() -> None:
        # submit decodes with bounded lookahead, pass futures on in input order
        with ThreadPoolExecutor(workers, thread_name_prefix="ocrforge-decode") as pool:
            inflight: list[Future] = []
            try:
                for item in items:
                    if stop.is_set():
                        return
                    inflight.append(pool.submit(_decode, item, engine))
                    if len(inflight) >= depth:
                        _put(det_q, inflight.pop(0).result(), stop)
                for f in inflight:
                    _put(det_q, f.result(), stop)
            except BaseException as e:  # iterator of items raised: surface it to the caller
                _put(det_q, e, stop)
            finally:
                _put(det_q, _END, stop)

    def detector() -> None:
        group: list[tuple[PageImage, float, list[np.ndarray], dict]] = []
        try:
            while True:
                got = det_q.get()
                if got is _END:
                    break
                if isinstance(got, BaseException) and not isinstance(got, InputError):
                    _put(rec_q, got, stop)
                    return
                if isinstance(got, InputError):
                    if group:
                        _put(rec_q, group, stop)
                        group = []
                    _put(rec_q, got, stop)
                    continue
                pages, decode_s = got
                for p in pages:
                    tm: dict[str, float] = {}
                    quads = engine.detect([p.image], [tm])[0]
                    t0 = time.perf_counter()
                    crops = [_crop(p.image, q) for q in quads]
                    tm["crop"] = time.perf_counter() - t0
                    tm["decode"] = decode_s / len(pages)
                    group.append((p, 0.0, list(zip(quads, crops, strict=True)), tm))
                    if len(group) >= batch_pages:
                        _put(rec_q, group, stop)
                        group = []
            if group:
                _put(rec_q, group, stop)
        except BaseException as e:
            _put(rec_q, e, stop)
        finally:
            _put(rec_q, _END, stop)

    out_q: queue.Queue = queue.Queue(maxsize=depth)

    def recogniser() -> None:
        try:
            while True:
                got = rec_q.get()
                if got is _END:
                    break
                if isinstance(got, InputError):
                    _put(out_q, [_error_page(got)], stop)
                elif isinstance(got, BaseException):
                    _put(out_q, got, stop)
                    return
                else:
                    _put(out_q, _recognise_group(engine, got), stop)
        except BaseException as e:
            _put(out_q, e, stop)
        finally:
            _put(out_q, _END, stop)

    threads = [threading.Thread(target=producer, daemon=True, name="ocrforge-producer"),
               threading.Thread(target=detector, daemon=True, name="ocrforge-detector"),
               threading.Thread(target=recogniser, daemon=True, name="ocrforge-recogniser")]
    for t in threads:
        t.start()
    try:
        while True:
            got = out_q.get()
            if got is _END:
                break
            if isinstance(got, BaseException):
                raise got
            yield from got
    finally:
        stop.set()
        for q in (det_q, rec_q, out_q):  # unblock producers waiting on a full queue
            try:
                while True:
                    q.get_nowait()
            except queue.Empty:
                pass
        for t in threads:
            t.join(timeout=5)


def _crop(img: np.ndarray, q: np.ndarray) -> np.ndarray:
    from ocrforge.stages.crop import crop_quad

    return crop_quad(img, q)


def _put(q: queue.Queue, obj: Any, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            q.put(obj, timeout=0.1)
            return
        except queue.Full:
            continue


def _recognise_group(engine: OCR, group: list) -> list[Page]:
    from ocrforge.result import Line

    crops = [c for _, _, qc, _ in group for _, c in qc]
    t0 = time.perf_counter()
    angles = engine.orient(crops)
    cls_s = time.perf_counter() - t0
    texts, rec_tm = engine.recognize(crops)
    total = max(len(crops), 1)
    out = []
    k = 0
    drop = engine.config.drop_score
    for p, _, qc, tm in group:
        lines = []
        for q, _ in qc:
            text, score = texts[k]
            if score >= drop and text.strip():
                lines.append(Line(text, q.tolist(), score, angles[k]))
            k += 1
        share = len(qc) / total
        tm["cls"] = cls_s * share
        for name, v in rec_tm.items():
            tm[name] = v * share
        h, w = p.image.shape[:2]
        out.append(Page(lines, w, h, p.source, p.index, tm))
    return out


def _run_serial(engine: OCR, items: Iterable[Any], batch_pages: int) -> Iterator[Page]:
    for item in items:
        got = _decode(item, engine)
        if isinstance(got, InputError):
            yield _error_page(got)
            continue
        pages, decode_s = got
        for start in range(0, len(pages), batch_pages):
            res = engine.ocr_images(pages[start : start + batch_pages])
            for r in res:
                r.timings["decode"] = decode_s / len(pages)
            yield from res
