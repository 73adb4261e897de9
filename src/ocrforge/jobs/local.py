"""Resumable batch OCR on one machine (``ocrforge batch``).

Pages go to the engine's ``read_many`` one by one as decoded images, and each finished page
is written at once (``jobs.store``). A killed job run again skips what the manifest says is
done with the same input bytes and config, so the output folder ends up as after one
uninterrupted run.

Every page is read with ``batch_pages=1``: with cross-page recognition batches a page's
lines are padded and batched together with its neighbours' lines, which changes scores (and
rarely text) in the last digits, so a resumed run, whose neighbours differ, would not
reproduce an uninterrupted one. One page per batch makes each page a function of its bytes
and the config alone: the property the resume rule (content hash + config hash) relies on.
"""

from __future__ import annotations

import os
import queue
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import closing
from typing import Any

import numpy as np
from rich.console import Console

from ocrforge.io.inputs import expand_paths
from ocrforge.jobs.naming import config_hash, input_root, relative_name
from ocrforge.jobs.pages import InputFailed, PageTask, count_pages, input_events, read_input
from ocrforge.jobs.progress import JobProgress
from ocrforge.jobs.recorder import JobRecorder, JobSummary
from ocrforge.jobs.store import PageStore
from ocrforge.paths import printable


def run_job(sources: Sequence[str | os.PathLike[str]], output_dir: str | os.PathLike[str], *,
            config: Any = None, engine: Any = None, progress: bool = True,
            console: Console | None = None) -> JobSummary:
    """OCR every page of ``sources`` (files and folders) into ``output_dir``, resumably.

    Pass an engine config (``config``) or a built ``ocrforge.engine.OCR`` (``engine``).
    Returns a JobSummary; inputs that fail are in ``summary.failures`` and do not stop the job.
    """
    from ocrforge.engine import OCR

    srcs = [os.fspath(s) for s in sources]
    files = expand_paths(srcs)
    if not files:
        raise ValueError("no input files found in " + ", ".join(srcs))
    root = input_root(srcs)
    if engine is None:
        engine = OCR(config) if config is not None else OCR()
    cfg = engine.config
    limits = dict(pdf_dpi=cfg.limits.pdf_dpi, max_pixels=cfg.limits.max_pixels, max_pdf_pages=cfg.limits.max_pdf_pages)
    with PageStore(output_dir, config_hash(cfg)) as store:
        expected = {f: count_pages(f) for f in files}
        events: queue.Queue = queue.Queue()
        pending: deque[PageTask] = deque()

        def images() -> Iterator[np.ndarray]:
            # runs in the engine's producer thread: decode overlaps OCR; only the main thread
            # writes (events and pending hand everything over in order)
            for f in files:
                data = read_input(f)
                if isinstance(data, InputFailed):
                    events.put(data)
                    continue
                for ev in input_events(data, f, relative_name(f, root),
                                       page_done=store.page_done, input_done=store.input_done,
                                       **limits):
                    if isinstance(ev, PageTask):
                        image, ev.image = ev.image, None
                        pending.append(ev)
                        yield image
                    else:
                        events.put(ev)

        bar = JobProgress(sum(expected.values()), enabled=progress, console=console)
        rec = JobRecorder(store, bar, expected)
        # closing: an error in a write (disk full) stops the engine's threads before it
        # reaches the caller, never at interpreter exit
        with bar, closing(engine.read_many(images(), batch_pages=1)) as stream:
            for page in stream:
                _drain(events, rec)
                task = pending.popleft()
                if page.ok:
                    page.source, page.page_index = task.source, task.page
                    rec.on_page(source=task.source, rel=task.rel, page=task.page,
                                sha256=task.sha256, doc=page.to_dict(), text=page.text)
                else:
                    rec.on_page_error(source=task.source, rel=task.rel, page=task.page,
                                      sha256=task.sha256, error=page.error or "failed")
            _drain(events, rec)
        return rec.finish(bar.elapsed)


def _drain(events: queue.Queue, rec: JobRecorder) -> None:
    while True:
        try:
            ev = events.get_nowait()
        except queue.Empty:
            return
        rec.on_event(ev)


def format_summary(s: JobSummary) -> str:
    """A few lines for people: counts, rate, then every failure."""
    lines = [f"{s.pages_read} page(s) read, {s.pages_skipped} already done (skipped), "
             f"{len(s.failures)} failure(s); {s.pages_per_s:.2f} pages/s; output in {printable(s.output_dir)}"]
    if s.temp_files_removed:
        lines.append(f"removed {s.temp_files_removed} temp file(s) left by an interrupted job")
    if s.duplicates:
        lines.append(f"{s.duplicates} duplicate result(s) from retried tasks ignored")
    for f in s.failures:
        where = f" [page {f['page'] + 1}]" if f.get("page") is not None else ""
        lines.append(f"error: {printable(f['source'])}{where}: {printable(f['error'])}")
    return "\n".join(lines)


__all__ = ["JobSummary", "format_summary", "run_job"]
