"""Admission by work, not by request: a request is let in only if its pages fit the page budget
and the queue ahead of it plus its own pages can be finished before its deadline.

Work is counted in *units*, a cost model of one page: a fixed share per page, the megapixels
detection will see (after the engine's resize to the request's det_limit), and a share for the
text recognition will find, guessed from the page's own size (capped). A measured exponential
moving average of engine seconds per unit (``unit_s``) turns queued work into time:

    pending_units * unit_s / engines + own_units * unit_s <= time_left * safety

for the new request and for every request already admitted (the batcher shares the engines
between requests, so all of them must be able to wait for all the work). ``Retry-After`` is
the estimated time until that holds.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

# The constants were fitted on the 2-core VM with benchmarks/serve_cost_model.py (a 480x160
# warm-up page, a one-line 320x104 image, a three-line 900x232 image and a twelve-line 1700x2200
# letter page, each at det_limit 640, 960 and 2048): engine seconds per unit then spread 2.2x
# (max/min) over the 12 cases on the loaded machine, where the same work repeated spread 1.7x;
# counting detection pixels alone spread 4.7x (recognising a page's lines does not shrink with
# det_limit).
PAGE_OVERHEAD = 0.05  # units per page
# recognition: the number of text lines grows about with the page's linear size (a one-line
# crop and a letter page both hold ~6 lines per sqrt(megapixel)), not with its area
TEXT_PER_SQRT_MPX = 0.7  # units per sqrt(megapixels of the page itself) ...
TEXT_MPX_CAP = 4.0  # ... counted up to this many megapixels (a phone photo holds no more text)
EMA_WEIGHT = 0.2  # weight of the newest batch in unit_s


def page_units(width: int, height: int, det_shape: tuple[int, int]) -> float:
    """Work units of one page of width x height whose detector input is ``det_shape`` (h, w),
    as the engine answers it (``OCR.det_shape``) for the request's det_limit."""
    text = TEXT_PER_SQRT_MPX * math.sqrt(min(width * height / 1e6, TEXT_MPX_CAP))
    return PAGE_OVERHEAD + det_shape[0] * det_shape[1] / 1e6 + text


class Overloaded(Exception):
    """Not admitted now; retry after ``retry_after`` seconds (an integer >= 1)."""

    def __init__(self, retry_after: int, reason: str):
        super().__init__(reason)
        self.retry_after = retry_after


class TooMuchWork(Exception):
    """The request alone is estimated to take longer than its timeout: waiting cannot help."""

    def __init__(self, estimate_s: float, time_left_s: float, pages: int):
        super().__init__(f"{pages} page(s) are estimated at {estimate_s:.0f} s of engine time at "
                         f"the measured speed, over the {time_left_s:.0f} s left of the request "
                         "timeout; send fewer pages (or smaller ones), or use a longer timeout")
        self.estimate_s = estimate_s


class Stopped(Exception):
    """The server is shutting down and takes no new work."""


@dataclass
class Reservation:
    """The pages and units one admitted request holds; each page is given back once."""

    admission: Admission
    units: list[float]  # per page, in decode order
    deadline: float  # time.monotonic() by which the request must be answered
    seq: int = 0  # admission order
    returned: set[int] = field(default_factory=set)

    @property
    def pages(self) -> int:
        return len(self.units)

    def page_done(self, index: int) -> None:
        """Page ``index`` finished (or was dropped): its share leaves the queue."""
        self.admission._give_back(self, [index])

    def release(self, first: int = 0) -> None:
        """Give back every page from ``first`` on not yet given back (idempotent)."""
        self.admission._give_back(self, range(first, len(self.units)))


class Admission:
    """Thread-safe accounting of admitted work and the measured engine speed.

    The batcher shares the engines between admitted requests (a request that has had fewer
    pages read goes first), so no request is promised a place in a line. What holds whatever
    the order is that every admitted request is answered once all admitted work is done; a
    request is therefore admitted only if all of it (its own pages included) can be done
    within the time left to *every* admitted request, with the safety margin."""

    def __init__(self, *, max_pages: int, engines: int = 1, safety: float = 0.8,
                 unit_s: float = 1.0):
        if max_pages < 1 or engines < 1 or not 0 < safety <= 1 or unit_s <= 0:
            raise ValueError("admission: max_pages and engines >= 1, 0 < safety <= 1, unit_s > 0")
        self.max_pages = max_pages
        self.engines = engines
        self.safety = safety
        self.unit_s = unit_s
        self._lock = threading.Lock()
        self.pending_pages = 0
        self.pending_units = 0.0
        self.stopping = False
        self._active: dict[int, Reservation] = {}  # by seq: requests with pages not given back
        self._seq = 0

    # ------------------------------------------------------------------ measurement
    def observe(self, units: float, seconds: float) -> None:
        """One engine call took ``seconds`` for pages worth ``units``."""
        if units <= 0 or seconds <= 0:
            return
        with self._lock:
            self.unit_s += EMA_WEIGHT * (seconds / units - self.unit_s)

    def drain_s(self) -> float:
        """Seconds until the admitted work is done, at the measured speed."""
        return self.pending_units / self.engines * self.unit_s

    def _finish_s(self, units: float) -> float:
        """Seconds until all admitted work plus a request of ``units`` is done (its pages
        counted as if on one engine: a request's pages may not spread over all of them)."""
        return (self.pending_units / self.engines + units) * self.unit_s

    # ------------------------------------------------------------------ admit / release
    def admit(self, units: list[float], time_left_s: float) -> Reservation:
        """Reserve room for one request's pages, or raise Overloaded (wait and retry),
        TooMuchWork (it would not finish in time even alone) or Stopped.

        A request that fits its timeout is always admitted into an empty server, even when it
        is over the page limit or the safety margin."""
        own = sum(units)
        now = time.monotonic()
        with self._lock:
            if self.stopping:
                raise Stopped("server is shutting down")
            if own * self.unit_s > time_left_s:
                raise TooMuchWork(own * self.unit_s, time_left_s, len(units))
            if self.pending_pages > 0:
                over_pages = self.pending_pages + len(units) > self.max_pages
                finish = self._finish_s(own)
                tightest = min([time_left_s] + [r.deadline - now for r in self._active.values()])
                over_time = finish > tightest * self.safety
                if over_pages or over_time:
                    wait = self._retry_after(len(units), own, time_left_s, now)
                    if over_pages:
                        why = (f"{self.pending_pages} pages queued; {len(units)} more would pass "
                               f"the limit of {self.max_pages}")
                    else:
                        why = (f"the work queued ({self.pending_pages} pages, about "
                               f"{self.drain_s():.0f} s) and these {len(units)} page(s) would "
                               f"not all finish within {tightest:.0f} s")
                    raise Overloaded(wait, f"{why}; retry after {wait} s")
            self.pending_pages += len(units)
            self.pending_units += own
            self._seq += 1
            r = Reservation(self, list(units), now + time_left_s, self._seq)
            self._active[r.seq] = r
        return r

    def retry_after(self, pages: int, units: float, time_left_s: float) -> int:
        with self._lock:
            return self._retry_after(pages, units, time_left_s, time.monotonic())

    def _retry_after(self, pages: int, units: float, time_left_s: float, now: float) -> int:
        """Estimated seconds until this request would be admitted: enough queued work must
        drain for it to fit its own timeout, and requests whose deadlines are too close for it
        to be added must have been answered."""
        s = self.safety
        wait = self._finish_s(units) - s * time_left_s  # the queue drains 1 s per second
        for r in self._active.values():
            left = r.deadline - now
            if self._finish_s(units) > s * left:
                # binds until it is answered (at the latest when the work admitted now is done,
                # or by its deadline) or until enough work has drained: drain - t <= s*(left - t)
                relax = (self._finish_s(units) - s * left) / max(1 - s, 1e-9)
                wait = max(wait, min(left, self.drain_s(), relax))
        extra_pages = self.pending_pages + pages - self.max_pages
        if extra_pages > 0 and self.pending_pages:
            per_page = self.pending_units / self.pending_pages
            wait = max(wait, extra_pages * per_page * self.unit_s / self.engines)
        return max(1, math.ceil(wait))

    def _give_back(self, r: Reservation, indices) -> None:
        with self._lock:
            for i in indices:
                if i < len(r.units) and i not in r.returned:
                    r.returned.add(i)
                    self.pending_pages -= 1
                    self.pending_units -= r.units[i]
            if len(r.returned) >= len(r.units):
                self._active.pop(r.seq, None)
            if self.pending_pages == 0:
                self.pending_units = 0.0  # no float drift once the queue is empty

    def stop(self) -> None:
        with self._lock:
            self.stopping = True


class ByteBudget:
    """Upload bytes held in memory at once, over all requests, counted as they are *received*
    (not as Content-Length announces them: a slow client announcing a large body holds only
    what it has sent).

    When a chunk does not fit, uploads that started later and are still being received give
    their bytes back (``evicted``; their requests are answered 429), so the oldest upload
    always progresses and concurrent uploads cannot starve each other half-way. One upload is
    always let in, whatever its size (``max_upload_bytes`` bounds it)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()
        self._seq = 0
        self._receiving: dict[int, UploadShare] = {}

    def open(self) -> UploadShare:
        with self._lock:
            self._seq += 1
            share = UploadShare(self._seq)
            self._receiving[share.seq] = share
            return share

    def take(self, share: UploadShare, n: int) -> bool:
        """Add ``n`` received bytes to ``share``; False if they do not fit (or it was evicted)."""
        with self._lock:
            if share.evicted:
                return False
            younger = sorted((s for s in self._receiving.values()
                              if s.seq > share.seq and s.held), key=lambda s: -s.seq)
            while self.used + n > self.limit and self.used > share.held and younger:
                victim = younger.pop(0)
                self.used -= victim.held
                victim.held = 0
                victim.evicted = True
                self._receiving.pop(victim.seq, None)
            if self.used + n > self.limit and self.used > share.held:
                return False
            self.used += n
            share.held += n
            return True

    def received(self, share: UploadShare) -> bool:
        """The whole body is in: its bytes stay held but can no longer be evicted. False if it
        was evicted before that."""
        with self._lock:
            self._receiving.pop(share.seq, None)
            return not share.evicted

    def release(self, share: UploadShare) -> None:
        with self._lock:
            self._receiving.pop(share.seq, None)
            self.used -= share.held
            share.held = 0


@dataclass
class UploadShare:
    """One request's part of a ByteBudget."""

    seq: int
    held: int = 0
    evicted: bool = False
