"""CPU throughput scheduler for many pages: decides what runs when; the runner does the work.

Three threads hand pages over through bounded queues, so memory stays flat however many pages
a job (or one PDF) has, and results come out in input order:

  decode (pages of each input, one at a time) -> runner.detect (+ crops) ->
  runner.recognize (lines of ``batch_pages`` pages together) -> the caller.

ONNX Runtime releases the GIL while a network runs, so detection of page N+1 overlaps
recognition of page N. On few cores the two sessions compete for them: ``det.threads`` /
``rec.threads`` and ``runtime.allow_spinning`` decide how they share (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ocrforge.config import ReadOptions
from ocrforge.core import Detected
from ocrforge.io.inputs import InputError, describe
from ocrforge.result import Page

if TYPE_CHECKING:
    from ocrforge.engine import OCR

_END = object()


def error_page(err: InputError) -> Page:
    return Page([], 0, 0, source=err.source, error=err.reason)


def decoded(engine: OCR, item: Any) -> Iterator[tuple[Any, float]]:
    """(PageImage, decode seconds) for each page of one input, or one InputError, lazily."""
    t0 = time.perf_counter()
    try:
        for p in engine.decode(item):
            yield p, time.perf_counter() - t0
            t0 = time.perf_counter()
    except InputError as e:
        yield e, 0.0
    except Exception as e:  # anything else in a decoder is still this input's failure
        yield InputError(describe(item), f"cannot read ({type(e).__name__}: {e})"), 0.0


def run_pipeline(engine: OCR, items: Iterable[Any], *, options: ReadOptions | None = None,
                 batch_pages: int = 4) -> Iterator[Page]:
    runner = engine.runner
    s = runner.settings(options)
    cfg = engine.config
    if not cfg.pipeline.enabled:
        yield from _run_serial(engine, items, s, batch_pages)
        return
    depth = max(2, cfg.pipeline.queue_size)
    det_q: queue.Queue = queue.Queue(maxsize=depth)
    rec_q: queue.Queue = queue.Queue(maxsize=2)
    out_q: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()

    def producer() -> None:
        try:
            for item in items:
                for got in decoded(engine, item):
                    if stop.is_set():
                        return
                    _put(det_q, got, stop)
        except BaseException as e:  # the items iterator itself raised: surface it
            _put(det_q, (e, 0.0), stop)
        finally:
            _put(det_q, _END, stop)

    def detector() -> None:
        group: list[Detected | InputError] = []
        try:
            while True:
                got = det_q.get()
                if got is _END:
                    break
                page, decode_s = got
                if isinstance(page, BaseException) and not isinstance(page, InputError):
                    _put(rec_q, page, stop)
                    return
                if _add(runner, group, page, decode_s, s) >= batch_pages:
                    _put(rec_q, group, stop)
                    group = []
            if group:
                _put(rec_q, group, stop)
        except BaseException as e:
            _put(rec_q, e, stop)
        finally:
            _put(rec_q, _END, stop)

    def recogniser() -> None:
        try:
            while True:
                got = rec_q.get()
                if got is _END:
                    break
                if isinstance(got, BaseException):
                    _put(out_q, got, stop)
                    return
                _put(out_q, _recognise_group(runner, got, s), stop)
        except BaseException as e:
            _put(out_q, e, stop)
        finally:
            _put(out_q, _END, stop)

    threads = [threading.Thread(target=producer, daemon=True, name="ocrforge-decode"),
               threading.Thread(target=detector, daemon=True, name="ocrforge-detect"),
               threading.Thread(target=recogniser, daemon=True, name="ocrforge-recognise")]
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


def _add(runner: Any, group: list, page: Any, decode_s: float, s: Any) -> int:
    """Detect a decoded page (an InputError keeps its place) into the group; returns how many
    detected pages the group holds."""
    if isinstance(page, InputError):
        group.append(page)
    else:
        d = runner.detect([page], s)[0]
        d.timings["decode"] = decode_s
        group.append(d)
    return sum(isinstance(g, Detected) for g in group)


def _recognise_group(runner: Any, group: list, s: Any) -> list[Page]:
    """Recognise the detected pages of a group together; error pages keep their place."""
    pages = iter(runner.recognize([g for g in group if isinstance(g, Detected)], s))
    return [error_page(g) if isinstance(g, InputError) else next(pages) for g in group]


def _put(q: queue.Queue, obj: Any, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            q.put(obj, timeout=0.1)
            return
        except queue.Full:
            continue


def _run_serial(engine: OCR, items: Iterable[Any], s: Any, batch_pages: int) -> Iterator[Page]:
    runner = engine.runner
    group: list = []
    for item in items:
        for page, decode_s in decoded(engine, item):
            if _add(runner, group, page, decode_s, s) >= batch_pages:
                yield from _recognise_group(runner, group, s)
                group = []
    if group:
        yield from _recognise_group(runner, group, s)
