"""Progress of a batch job on stderr: pages done of all pages, pages/s and ETA.

The rate counts pages read in this run only; pages skipped because an earlier run finished
them move the bar but not the rate, so a resumed job's ETA is not fooled by them.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn


class JobProgress:
    def __init__(self, total_pages: int, *, enabled: bool = True, console: Console | None = None):
        self.read = 0
        self.skipped = 0
        self.failed = 0
        self._t0: float | None = None
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("pages  {task.fields[rate]}  ETA {task.fields[eta]}"),
            console=console or Console(stderr=True), disable=not enabled, transient=False,
        )
        self._task = self._progress.add_task("OCR", total=total_pages, rate="-", eta="-")

    def __enter__(self) -> JobProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def started(self) -> None:
        """Call when the first page goes to the engine (engine start-up is not in the rate)."""
        if self._t0 is None:
            self._t0 = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return 0.0 if self._t0 is None else time.perf_counter() - self._t0

    @property
    def rate(self) -> float:
        e = self.elapsed
        return self.read / e if e > 0 else 0.0

    def page_read(self) -> None:
        self.started()
        self.read += 1
        self._advance(1)

    def pages_skipped(self, n: int = 1) -> None:
        self.skipped += n
        self._advance(n)

    def pages_lost(self, n: int) -> None:
        """Pages counted in the total that will never come (their input failed)."""
        if n > 0:
            t = self._progress.tasks[0]
            self._progress.update(self._task, total=max(t.completed, (t.total or 0) - n))
        self._advance(0)

    def grow(self, n: int) -> None:
        """More pages than the header count said (a damaged count): raise the total."""
        t = self._progress.tasks[0]
        self._progress.update(self._task, total=(t.total or 0) + n)

    def _advance(self, n: int) -> None:
        t = self._progress.tasks[0]
        rate = self.rate
        remaining = max(0.0, (t.total or 0) - t.completed - n)
        eta = _fmt(remaining / rate) if rate > 0 else "-"
        self._progress.update(self._task, advance=n, rate=f"{rate:.2f}/s" if rate else "-", eta=eta)


def _fmt(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
