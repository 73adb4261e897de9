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

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ocrforge.config import ReadOptions
from ocrforge.core import Detected, PageRunner
from ocrforge.io.inputs import InputError, describe
from ocrforge.result import Page
from ocrforge.scheduling.heap import release_free_heap
from ocrforge.scheduling.threads import Stopped, Workers

Decode = Callable[[Any], Iterable[Any]]  # one input -> its decoded pages (io.inputs.PageImage)
_END = object()


def error_page(err: InputError) -> Page:
    return Page([], 0, 0, source=err.source, error=err.reason)


def decoded(decode: Decode, item: Any) -> Iterator[tuple[Any, float]]:
    """(PageImage, decode seconds) for each page of one input, or one InputError, lazily."""
    t0 = time.perf_counter()
    try:
        for p in decode(item):
            yield p, time.perf_counter() - t0
            t0 = time.perf_counter()
    except InputError as e:
        yield e, 0.0
    except Exception as e:  # anything else in a decoder is still this input's failure
        yield InputError(describe(item), f"cannot read ({type(e).__name__}: {e})"), 0.0


def pipelined(enabled: bool | None) -> bool:
    """pipeline.enabled, with None resolved from the CPUs this process may use."""
    if enabled is not None:
        return enabled
    from ocrforge.runtimes.cpu_budget import usable_cpus

    return usable_cpus() > 2


def run_pipeline(runner: PageRunner, decode: Decode, items: Iterable[Any], *,
                 options: ReadOptions | None = None, batch_pages: int = 4) -> Iterator[Page]:
    """Pages of every input through the runner: decode, detect and recognise threads over
    bounded queues (or one page group after the other where that is faster), in input order."""
    s = runner.settings(options)
    cfg = runner.config
    if not pipelined(cfg.pipeline.enabled):
        yield from _run_serial(runner, decode, items, s, batch_pages, cfg.pipeline.trim_heap)
        return
    trim = cfg.pipeline.trim_heap
    depth = max(2, cfg.pipeline.queue_size)
    w = Workers("ocrforge")
    det_q = w.queue(depth)
    rec_q = w.queue(2)
    out_q = w.queue(2)

    def producer() -> None:
        try:
            for item in items:
                for got in decoded(decode, item):
                    if not w.put(det_q, got):
                        return
        except BaseException as e:  # the items iterator itself raised: surface it
            w.put(det_q, (e, 0.0))
        finally:
            w.put(det_q, _END)

    def detector() -> None:
        group: list[Detected | InputError] = []
        size = 1  # the first page goes out alone: its result comes after one page's work
        try:
            while (got := w.get(det_q)) is not _END:
                page, decode_s = got
                if isinstance(page, BaseException) and not isinstance(page, InputError):
                    w.put(rec_q, page)
                    return
                if _add(runner, group, page, decode_s, s) >= size:
                    w.put(rec_q, group)
                    group, size = [], batch_pages
            if group:
                w.put(rec_q, group)
        except Stopped:
            return
        except BaseException as e:
            w.put(rec_q, e)
        finally:
            w.put(rec_q, _END)

    def recogniser() -> None:
        try:
            while (got := w.get(rec_q)) is not _END:
                if isinstance(got, BaseException):
                    w.put(out_q, got)
                    return
                w.put(out_q, _recognise_group(runner, got, s, trim))
        except Stopped:
            return
        except BaseException as e:
            w.put(out_q, e)
        finally:
            w.put(out_q, _END)

    w.start("decode", producer)
    w.start("detect", detector)
    w.start("recognise", recogniser)
    try:
        while (got := out_q.get()) is not _END:
            if isinstance(got, BaseException):
                raise got
            yield from got
    finally:
        w.close()  # a loop left early (break, exception, Ctrl-C) stops and joins the threads


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


def _recognise_group(runner: Any, group: list, s: Any, trim: bool) -> list[Page]:
    """Recognise the detected pages of a group together; error pages keep their place."""
    pages = iter(runner.recognize([g for g in group if isinstance(g, Detected)], s))
    out = [error_page(g) if isinstance(g, InputError) else next(pages) for g in group]
    if trim:
        group.clear()  # the group's images and crops are garbage now: let their pages go too
        release_free_heap()
    return out


def _run_serial(runner: PageRunner, decode: Decode, items: Iterable[Any], s: Any,
                batch_pages: int, trim: bool) -> Iterator[Page]:
    group: list = []
    size = 1  # the first page goes out alone (see detector() above)
    for item in items:
        for page, decode_s in decoded(decode, item):
            if _add(runner, group, page, decode_s, s) >= size:
                yield from _recognise_group(runner, group, s, trim)
                group, size = [], batch_pages
    if group:
        yield from _recognise_group(runner, group, s, trim)
