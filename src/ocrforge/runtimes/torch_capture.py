"""CUDA graph captures off the caller's thread.

A captured shape replays in ~0.1 ms of host time; capturing it costs 0.3-1.5 s (two warm-up
runs, cuDNN/cuBLAS choices, the capture). Done on the GPU scheduler's driver thread, every new
shape stalled the whole engine for that long (up to 5 s in one pass of the real-page mix, H100,
2026-12-05). Here one worker thread per runtime takes capture requests and installs each graph
when it is ready; until then the caller runs that shape eagerly, so pages keep flowing.

The worker exists only while requests are queued, so it keeps no runtime alive once idle.
Captures use CUDA's thread-local capture mode (other threads may launch, allocate and pin
meanwhile) and the runtime's one capture stream; the graphs' shared memory pool is safe because
graphs only ever replay on the caller's stream, one after another.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch


class BackgroundCapture:
    """Capture requests for one runtime, served by a worker thread started on demand."""

    def __init__(self, capture: Callable[[tuple, torch.Tensor, Any], None], device: torch.device):
        self._capture = capture  # (key, template input, fn) -> installs the graph
        self._dev = device
        self._todo: deque[tuple[tuple, tuple, tuple, torch.dtype, Any]] = deque()
        self._queued: set[tuple] = set()
        self._failed: set[tuple] = set()  # never asked again: the shape stays eager
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None
        self.errors: list[BaseException] = []

    def pending(self) -> int:
        return len(self._queued)

    def request(self, key: tuple, x: torch.Tensor, fn: Any) -> None:
        """Capture ``fn`` for inputs shaped (and strided) like ``x`` soon; once per key."""
        with self._lock:
            if key in self._queued or key in self._failed:
                return
            self._queued.add(key)
            self._todo.append((key, tuple(x.shape), tuple(x.stride()), x.dtype, fn))
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="ocrforge-graph-capture",
                                                daemon=True)
                self._worker.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every queued capture is done; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._worker is None, timeout)

    @torch.inference_mode()
    def _work(self) -> None:
        with torch.cuda.device(self._dev) if self._dev.type == "cuda" else nullcontext():
            while True:
                with self._lock:
                    if not self._todo:
                        self._worker = None
                        self._idle.notify_all()
                        return
                    key, shape, stride, dtype, fn = self._todo.popleft()
                try:
                    x = torch.empty_strided(shape, stride, dtype=dtype, device=self._dev).zero_()
                    self._capture(key, x, fn)
                except Exception as e:  # the shape keeps running eagerly
                    self.errors.append(e)
                    with self._lock:
                        self._failed.add(key)
                finally:
                    with self._lock:
                        self._queued.discard(key)
