"""The writing side of a batch job, shared by the local and the Ray backends.

Fed with the events of ``jobs.pages`` and with finished pages (in any order, possibly twice
when a distributed task is retried), it writes each page once, records failures, closes an
input with a ``complete`` record once all its pages are written, and keeps the progress bar
and the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ocrforge.jobs.naming import page_name
from ocrforge.jobs.pages import InputEnd, InputFailed, InputSkipped, PageSkipped
from ocrforge.jobs.progress import JobProgress
from ocrforge.jobs.store import PageStore


@dataclass
class JobSummary:
    """What a batch job did. ``failures`` holds ``{"source", "page", "error"}`` dicts."""

    output_dir: str
    pages_read: int = 0
    pages_skipped: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0
    temp_files_removed: int = 0
    duplicates: int = 0  # results that arrived twice (distributed retries); written once
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)  # Ray: per actor

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def pages_per_s(self) -> float:
        return self.pages_read / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"output_dir": self.output_dir, "pages_read": self.pages_read,
                "pages_skipped": self.pages_skipped, "failures": self.failures,
                "elapsed_s": round(self.elapsed_s, 3), "pages_per_s": round(self.pages_per_s, 3),
                "temp_files_removed": self.temp_files_removed, "duplicates": self.duplicates,
                "workers": self.workers}


class JobRecorder:
    def __init__(self, store: PageStore, progress: JobProgress, expected_pages: dict[str, int]):
        self.store = store
        self.progress = progress
        self.expected = expected_pages  # source -> header page count (for the progress total)
        self.summary = JobSummary(str(store.root), temp_files_removed=store.removed_temp_files)
        self._written: set[str] = set()  # page names written by this run
        self._per_input: dict[str, int] = {}  # rel -> pages written by this run
        self._ends: dict[str, InputEnd] = {}
        self._failed_inputs: set[str] = set()

    # ------------------------------------------------------------------ events
    def on_event(self, ev: Any) -> None:
        if isinstance(ev, PageSkipped):
            self.summary.pages_skipped += 1
            self.progress.pages_skipped(1)
        elif isinstance(ev, InputSkipped):
            self.summary.pages_skipped += ev.pages
            self._fix_total(ev.source, ev.pages)
            self.progress.pages_skipped(ev.pages)
        elif isinstance(ev, InputFailed):
            self._fail(ev.source, ev.page, ev.sha256, ev.error)
            self._failed_inputs.add(ev.source)
            # pages the header promised after the failing one will never come
            self.progress.pages_lost(self.expected.get(ev.source, 1) - (ev.page or 0))
        elif isinstance(ev, InputEnd):
            self._fix_total(ev.source, ev.pages)
            self._ends[ev.rel] = ev
            self._maybe_complete(ev.rel)
        else:
            raise TypeError(f"unknown job event {ev!r}")

    def on_page(self, *, source: str, rel: str, page: int, sha256: str,
                doc: dict[str, Any], text: str) -> None:
        name = page_name(rel, page, self.expected.get(source, 1))
        if name in self._written:
            self.summary.duplicates += 1
            return
        self.store.write_page(name, source=source, page=page, sha256=sha256, doc=doc, text=text)
        self._written.add(name)
        self._per_input[rel] = self._per_input.get(rel, 0) + 1
        self.summary.pages_read += 1
        self.progress.page_read()
        self._maybe_complete(rel)

    def on_page_error(self, *, source: str, rel: str, page: int, sha256: str, error: str) -> None:
        name = page_name(rel, page, self.expected.get(source, 1))
        if name in self._written:
            self.summary.duplicates += 1
            return
        self._written.add(name)
        self._failed_inputs.add(source)
        self._fail(source, page, sha256, error)
        self.progress.pages_lost(1)

    def finish(self, elapsed_s: float) -> JobSummary:
        self.summary.elapsed_s = elapsed_s
        return self.summary

    # ------------------------------------------------------------------ helpers
    def _fail(self, source: str, page: int | None, sha256: str | None, error: str) -> None:
        self.store.record_error(source=source, page=page, sha256=sha256, error=error)
        self.summary.failures.append({"source": source, "page": page, "error": error})

    def _fix_total(self, source: str, pages: int) -> None:
        diff = pages - self.expected.get(source, pages)
        if diff > 0:
            self.progress.grow(diff)
        elif diff < 0:
            self.progress.pages_lost(-diff)
        self.expected[source] = pages

    def _maybe_complete(self, rel: str) -> None:
        end = self._ends.get(rel)
        if end is None or end.source in self._failed_inputs:
            return
        if self._per_input.get(rel, 0) >= end.emitted:
            self.store.record_complete(rel=rel, source=end.source, sha256=end.sha256,
                                       pages=end.pages)
            del self._ends[rel]
