"""DB box extraction (contours, box scores, unclip) in worker processes over shared memory.

The per-box part of DBDecoder is Python (numpy, cv2, pyclipper calls per box) and holds the
GIL for most of its ~8 ms per document page (measured on the 2-core dev machine, 36 boxes),
so threads alone cap a pipeline at roughly 1 / 8 ms per page. Worker processes scale it over
the cores. Pages travel through a ring of shared-memory slots, not pipes: the probability map
as uint8 (prob * 255, rounded: box scores move by at most 1/510), the bitmap binarised on
the GPU and, when given, the grey page at detector size (``DetInput.gray``: where boxes are
split at cell gaps); only the boxes come back pickled.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import shared_memory

import numpy as np

from ocrforge.scheduling.parent_watch import exit_with_parent

_W: dict = {}


def _init(names: list[str], slot_bytes: int, params: tuple, parent: int) -> None:
    import cv2

    from ocrforge.stages.detect import DBDecoder

    exit_with_parent(parent)  # a pool whose owner was killed outright ends with it

    # one page per process at a time: cv2's own pool (a thread per core in each of up to 12
    # processes) only oversubscribes the host
    cv2.setNumThreads(1)

    _W["shm"] = [shared_memory.SharedMemory(name=n) for n in names]
    _W["slot_bytes"] = slot_bytes
    _W["dec"] = DBDecoder(*params)


def _work(slot: int, rh: int, rw: int, h: int, w: int, has_gray: bool = False) -> list[np.ndarray]:
    from ocrforge.stages.detect import DetInput

    buf = _W["shm"][slot].buf
    n = rh * rw
    # one pass to float (not astype, then a scaled copy); the planes are read in place: the
    # slot is released only when this returns, and nothing here keeps them or writes to them
    prob = np.multiply(np.frombuffer(buf, np.uint8, n, 0).reshape(rh, rw), np.float32(1.0 / 255.0),
                       dtype=np.float32)
    bitmap = np.frombuffer(buf, np.uint8, n, n).reshape(rh, rw)
    gray = np.frombuffer(buf, np.uint8, n, 2 * n).reshape(rh, rw) if has_gray else None
    d = DetInput(np.empty((1, 3, rh, rw), np.float32), rh / h, rw / w, h, w, gray)
    return _W["dec"](prob, d, bitmap)


class ShmDBPool:
    """``submit(prob_u8, bitmap, h, w, gray) -> Future[list of quads]`` executed in processes."""

    def __init__(self, processes: int, max_side: int, decoder_params: tuple, slots: int | None = None):
        self.slot_bytes = 3 * max_side * max_side
        n = slots or processes * 2
        self.shm = [shared_memory.SharedMemory(create=True, size=self.slot_bytes) for _ in range(n)]
        self.free = list(range(n))
        self.cv = threading.Condition()
        # spawn: the parent has CUDA initialised; forked children must not inherit that
        self.pool = ProcessPoolExecutor(processes, mp_context=mp.get_context("spawn"),
                                        initializer=_init,
                                        initargs=([s.name for s in self.shm], self.slot_bytes,
                                                  decoder_params, os.getpid()))

    def submit(self, prob_u8: np.ndarray, bitmap: np.ndarray, h: int, w: int,
               gray: np.ndarray | None = None) -> Future:
        rh, rw = prob_u8.shape
        if 3 * rh * rw > self.slot_bytes:
            raise ValueError(f"page map {rh}x{rw} larger than the shared-memory slots")
        with self.cv:
            while not self.free:
                self.cv.wait()
            slot = self.free.pop()
        buf = self.shm[slot].buf
        n = rh * rw
        np.frombuffer(buf, np.uint8, n, 0).reshape(rh, rw)[:] = prob_u8
        np.frombuffer(buf, np.uint8, n, n).reshape(rh, rw)[:] = bitmap
        if gray is not None:
            np.frombuffer(buf, np.uint8, n, 2 * n).reshape(rh, rw)[:] = gray
        fut = self.pool.submit(_work, slot, rh, rw, h, w, gray is not None)

        def release(_f: Future, slot: int = slot) -> None:
            with self.cv:
                self.free.append(slot)
                self.cv.notify()

        fut.add_done_callback(release)
        return fut

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for s in self.shm:
            s.close()
            try:
                s.unlink()
            except FileNotFoundError:
                pass
