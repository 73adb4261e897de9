"""Admission by work, not by request: a request is let in only if its pages fit the page budget
and the queue ahead of it plus its own pages can be finished before its deadline.

Work is counted in *units*, a cost model of one page: a fixed share per page, the megapixels
detection will see (after the engine's resize to the request's det_limit), and a share for the
text recognition will find, guessed from the page's own size (capped). A measured exponential
moving average of engine seconds per unit (``unit_s``) turns queued work into time:

    pending_units * unit_s / engines + own_units * unit_s <= time_left * safety

``Retry-After`` is the time until enough of the queue has drained for that to hold.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from ocrforge.stages.detect import resize_shape

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


def page_units(width: int, height: int, det_limit: int, min_side: int = 0,
               max_upscale: float = 1.0) -> float:
    """Work units of one page of width x height read at ``det_limit``."""
    h, w = resize_shape(max(1, height), max(1, width), det_limit, "max", min_side, max_upscale)
    text = TEXT_PER_SQRT_MPX * math.sqrt(min(width * height / 1e6, TEXT_MPX_CAP))
    return PAGE_OVERHEAD + h * w / 1e6 + text


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
    """Thread-safe accounting of admitted work and the measured engine speed."""

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

    def estimate_s(self, units: float) -> float:
        """Seconds until a request of ``units`` admitted now would be finished."""
        return (self.pending_units / self.engines + units) * self.unit_s

    # ------------------------------------------------------------------ admit / release
    def admit(self, units: list[float], time_left_s: float) -> Reservation:
        """Reserve room for one request's pages, or raise Overloaded (wait and retry),
        TooMuchWork (it would not finish in time even alone) or Stopped.

        A request that fits its timeout is always admitted into an empty server, even when it
        is over the page limit or the safety margin."""
        own = sum(units)
        with self._lock:
            if self.stopping:
                raise Stopped("server is shutting down")
            if own * self.unit_s > time_left_s:
                raise TooMuchWork(own * self.unit_s, time_left_s, len(units))
            if self.pending_pages > 0:
                over_pages = self.pending_pages + len(units) > self.max_pages
                over_time = self.estimate_s(own) > time_left_s * self.safety
                if over_pages or over_time:
                    wait = self._retry_after(len(units), own, time_left_s)
                    if over_pages:
                        why = (f"{self.pending_pages} pages queued; {len(units)} more would pass "
                               f"the limit of {self.max_pages}")
                    else:
                        why = (f"the queue ahead ({self.pending_pages} pages, about "
                               f"{self.pending_units / self.engines * self.unit_s:.0f} s of work) "
                               f"would not let these {len(units)} page(s) finish within "
                               f"{time_left_s:.0f} s")
                    raise Overloaded(wait, why)
            self.pending_pages += len(units)
            self.pending_units += own
        return Reservation(self, list(units))

    def retry_after(self, pages: int, units: float, time_left_s: float) -> int:
        with self._lock:
            return self._retry_after(pages, units, time_left_s)

    def _retry_after(self, pages: int, units: float, time_left_s: float) -> int:
        """Seconds until enough queued work drains for this request to be admitted."""
        rate = self.engines / self.unit_s  # units finished per second
        allowed = (time_left_s * self.safety / self.unit_s - units) * self.engines
        excess = self.pending_units - max(0.0, allowed)  # all of it when the request is too big
        wait = excess / rate
        extra_pages = self.pending_pages + pages - self.max_pages
        if extra_pages > 0 and self.pending_pages:
            per_page = self.pending_units / self.pending_pages
            wait = max(wait, extra_pages * per_page / rate)
        return max(1, math.ceil(wait))

    def _give_back(self, r: Reservation, indices) -> None:
        with self._lock:
            for i in indices:
                if i < len(r.units) and i not in r.returned:
                    r.returned.add(i)
                    self.pending_pages -= 1
                    self.pending_units -= r.units[i]
            if self.pending_pages == 0:
                self.pending_units = 0.0  # no float drift once the queue is empty

    def stop(self) -> None:
        with self._lock:
            self.stopping = True


class ByteBudget:
    """Upload bytes held in memory at once, over all requests (event-loop side)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit and self.used > 0:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n
