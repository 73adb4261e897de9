"""Several GPU streams (each its own engine, e.g. one per child process: stream_process.py)
behind one ``submit``: each page goes to the stream with the fewest pages in hand.

Why: one engine's driver thread bounds what one stream reads (the stream alone read 110-137
pages/s at concurrency 64 on an H100 while the card was not full, docs/BENCHMARKS.md); two
engines on one card each have a driver thread of their own, as ``gpu.processes`` gives
``read_many``.

Same interface as GpuStream (``submit`` -> Future, ``close``, ``alive``). When one stream
dies, its pages fail (as they would with it alone) and the set is no longer ``alive``: the
caller closes it and starts another, as for a single stream.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any


class StreamSet:
    def __init__(self, streams: Sequence[Any]):
        if not streams:
            raise ValueError("a stream set needs at least one stream")
        self.streams = list(streams)
        self.info: dict[str, Any] = {
            "pids": [getattr(st, "pid", None) for st in self.streams],
            "warmup_shapes": max(int(getattr(st, "info", {}).get("warmup_shapes", 0))
                                 for st in self.streams),
        }
        self.submitted = [0] * len(self.streams)  # pages each stream was given
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return all(st.alive for st in self.streams)

    @property
    def pending(self) -> int:
        return sum(st.pending for st in self.streams)

    def submit(self, image: Any) -> Future:
        """One page, to the stream with the fewest pages in hand (the first on a tie)."""
        with self._lock:
            k = min(range(len(self.streams)), key=lambda i: self.streams[i].pending)
            self.submitted[k] += 1
        return self.streams[k].submit(image)

    def close(self, timeout: float | None = None) -> None:
        """Each stream finishes what it was given, side by side, then ends."""
        closers = [threading.Thread(target=st.close, args=(timeout,), daemon=True)
                   for st in self.streams]
        for t in closers:
            t.start()
        for t in closers:
            t.join()


__all__ = ["StreamSet"]
