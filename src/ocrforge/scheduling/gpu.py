"""GPU scheduler: decides which pages and lines go into which device batch; the runner's stages
do the work (on device tensors) and the runner's ``assemble`` builds every Page.

    decode       CPU threads read files / decode non-JPEG pages and pin them;
                 plain JPEGs go to the GPU thread as bytes (batched nvJPEG decode there)
    detect       pages resized + normalised into a fixed set of page buckets (DetPreprocessor.
                 prepare_torch), DB network (CUDA graph per bucket), binarised on the device
    boxes        contours, box scores, unclip: CPU worker threads / processes
    crop         all lines of a page in one grid_sample (stages.crop.crop_lines_torch),
                 each line padded to its width bucket (RecPreprocessor.bucket, as on the CPU)
    recognize    batches of one width bucket (CUDA graph per bucket); ctc_head_torch on the
                 device; only indices and scores come back; CTCDecoder.collapse on the CPU

Every device operation is issued by one thread (the GPU driver thread), so all GPU work is
ordered on one stream: nothing decoded or copied is used before it is ready. Shapes come from
fixed buckets that are captured once (``warmup``), never per page. Results come out in input
order. An out-of-memory error on a batch halves that stage's batch size and retries.

It also runs on the CPU (slowly), which is how CI compares it with the ONNX Runtime engine.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ocrforge.config import ReadOptions
from ocrforge.core import looks_like_crop
from ocrforge.io.inputs import InputError, PageImage, describe
from ocrforge.result import Page
from ocrforge.runtimes.base import DeviceRuntime
from ocrforge.scheduling.threads import Workers
from ocrforge.stages.crop import crop_lines_torch
from ocrforge.stages.detect import DetInput
from ocrforge.stages.recognize import ctc_head_torch

if TYPE_CHECKING:
    from ocrforge.engine import OCR

_END = object()


def page_buckets_for(limit: int, fractions: list[tuple[float, float]]) -> list[tuple[int, int]]:
    """Detection page shapes (H, W), multiples of 32, from fractions of the limit."""
    def r32(v: float) -> int:
        return max(32, int(math.ceil(v * limit / 32)) * 32)

    return sorted({(r32(a), r32(b)) for a, b in fractions}, key=lambda b: (b[0] * b[1], b))


@dataclass
class _Page:
    seq: int
    source: str
    index: int
    h: int = 0
    w: int = 0
    dpi: float | None = None
    rotation: int = 0  # whole-page orientation applied on the host (runner.upright_pages)
    host: torch.Tensor | None = None  # H x W x 3 uint8 (pinned on CUDA), before upload
    jpeg: bytes | None = None  # plain JPEG for the device decoder
    img: torch.Tensor | None = None  # 3 x H x W uint8 on the device (BGR)
    rh: int = 0
    rw: int = 0
    quads: list[np.ndarray] = field(default_factory=list)
    texts: list[tuple[str, float] | None] = field(default_factory=list)
    pending: int = 0
    whole: bool = False  # quads[-1] is the whole image (crop-like input)
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def height(self) -> int:
        return self.h

    @property
    def width(self) -> int:
        return self.w


@dataclass
class SchedulerStats:
    pages: int = 0
    lines: int = 0
    det_batches: int = 0
    rec_batches: int = 0
    det_s: float = 0.0  # GPU-thread wall time in each stage (launch + any sync)
    crop_s: float = 0.0
    rec_s: float = 0.0
    decode_s: float = 0.0  # GPU-thread time decoding JPEGs and uploading pages
    post_s: float = 0.0  # CPU worker time in contour extraction (summed over threads)
    oom_retries: int = 0
    warmup_s: float = 0.0


class GpuScheduler:
    """Many pages through the engine's runner on a device. One per engine and det-limit bucket."""

    def __init__(self, engine: OCR, *, det_limit: int | None = None):
        runner = engine.runner
        if not isinstance(runner.det_rt, DeviceRuntime) or not isinstance(runner.rec_rt, DeviceRuntime):
            raise ValueError("the GPU scheduler needs an engine with runtime.backend='torch'")
        cfg = engine.config
        g = cfg.gpu
        self.engine = engine
        self.runner = runner
        self.det = runner.det_rt
        self.rec = runner.rec_rt
        self.dev = self.det.dev
        self.cuda = self.dev.type == "cuda"
        self.det_batch = cfg.det_batch()
        self.rec_batch = cfg.rec_batch()
        self.limit = det_limit or cfg.det.limit_side
        self.page_buckets = page_buckets_for(self.limit, g.page_buckets)
        self.post_workers = g.post_workers
        post = g.post_processes
        if post is None:
            # ~100 pages/s per process for document pages (benchmarks/gpu_host_costs.py);
            # leave a few cores to the GPU driver thread and the decoders
            post = min(12, max(1, (os.cpu_count() or 2) - 4)) if self.cuda else 0
        self.post_processes = post
        self._dbpool: Any = None
        self.gpu_decode = g.decode and self.cuda and _has_nvjpeg()
        self.max_inflight = g.max_inflight
        self.thresh = float(runner.det_decode.thresh)
        self.stats = SchedulerStats()
        self._warm = False
        self._decode_stream = torch.cuda.Stream(self.dev) if self.cuda else None
        self._lock = threading.Lock()  # one run at a time per scheduler
        if g.warmup and self.cuda:
            self.warmup()

    # ------------------------------------------------------------------ buckets
    def det_batch_for(self, bucket: tuple[int, int]) -> int:
        """Pages per detection call in this bucket: det batch size at up to 1024 x 1024 pixels,
        fewer for bigger buckets (same pixels per call: bounded memory and capture time)."""
        return max(1, min(self.det_batch, (self.det_batch * 1024 * 1024) // (bucket[0] * bucket[1])))

    def page_bucket(self, rh: int, rw: int) -> tuple[int, int]:
        for b in self.page_buckets:
            if rh <= b[0] and rw <= b[1]:
                return b
        return (int(math.ceil(rh / 32) * 32), int(math.ceil(rw / 32) * 32))

    def rec_shapes(self) -> list[int]:
        rp = self.runner.rec_prep
        if rp.widths:
            return list(rp.widths)
        return list(range(rp.bucket(1), rp.max_width + 1, rp.width_step))

    def warmup(self) -> float:
        """Capture / compile every bucket shape now (det: each page bucket at the det batch and
        at 1; rec: each width bucket at both rec batch shapes); seconds spent."""
        t0 = time.perf_counter()
        with torch.inference_mode():
            for hb, wb in self.page_buckets:
                for n in sorted({1, self.det_batch_for((hb, wb))}):
                    self.det.forward(torch.zeros((n, 3, hb, wb), device=self.dev))
            for wb in self.rec_shapes():
                for n in sorted({self._rec_small(), self.rec_batch_for(wb)}):
                    self.rec.forward(torch.zeros((n, 3, self.runner.rec_prep.height, wb),
                                                 device=self.dev))
        if self.cuda:
            torch.cuda.synchronize(self.dev)
        self._warm = True
        self.stats.warmup_s = time.perf_counter() - t0
        return self.stats.warmup_s

    def _rec_small(self) -> int:
        return max(1, self.rec_batch // 8)

    def rec_batch_for(self, width: int) -> int:
        """Lines per recognition call at this width bucket: the rec batch size up to 1280 px
        wide, fewer for wider buckets (same pixels per call: bounded memory and capture time)."""
        return max(self._rec_small(), min(self.rec_batch, self.rec_batch * 1280 // max(width, 1)))

    # ------------------------------------------------------------------ device pieces
    def _upload(self, p: _Page) -> None:
        """On the GPU thread: the page onto the device (decode JPEG bytes there)."""
        if p.host is not None:
            t = p.host.to(self.dev, non_blocking=True) if self.cuda else p.host
            p.img = t.permute(2, 0, 1)
            p.host = None

    def _decode_jpegs(self, pages: list[_Page]) -> None:
        """Batched nvJPEG decode on the GPU thread (stream-ordered with everything after it)."""
        import torchvision.io as tvio

        datas = [torch.frombuffer(bytearray(p.jpeg or b""), dtype=torch.uint8) for p in pages]
        # torchvision allocates the outputs on the caller's current stream but writes them on
        # its own stream without waiting for that stream's pending kernels: called on the main
        # stream, a decoded page can land in memory that queued kernels still use (the race
        # that garbled pages). A stream of our own holds only these outputs; the main stream
        # waits for it, and record_stream keeps the memory until main is done with it.
        main = torch.cuda.current_stream(self.dev)
        try:
            with torch.cuda.stream(self._decode_stream):
                outs = tvio.decode_jpeg(datas, mode=tvio.ImageReadMode.RGB, device=self.dev)
            main.wait_stream(self._decode_stream)
            for t in outs:
                t.record_stream(main)
        except Exception:
            outs = [None] * len(pages)
        for p, t in zip(pages, outs, strict=True):
            if t is None:  # the device decoder refused it: the CPU decoder reads it
                self._cpu_decode_into(p, p.jpeg or b"")
                self._upload(p)
            else:
                p.img = t.flip(0)  # RGB -> BGR, as the CPU decoders deliver
                p.h, p.w = int(t.shape[1]), int(t.shape[2])
            p.jpeg = None

    def _cpu_decode_into(self, p: _Page, data: bytes) -> None:
        try:
            pg = next(iter(self.engine.decode(data)))
            p.h, p.w = pg.image.shape[:2]
            p.host = torch.from_numpy(np.ascontiguousarray(pg.image))
        except Exception as e:
            p.error = f"cannot read ({type(e).__name__}: {e})"

    def _run_det(self, pages: list[_Page], hb: int, wb: int) -> tuple:
        nb = self.det_batch_for((hb, wb))
        n = nb if len(pages) > 1 else 1
        n = max(n, len(pages))
        x = torch.zeros((n, 3, hb, wb), device=self.dev, dtype=torch.float32)
        dp = self.runner.det_prep
        for k, p in enumerate(pages):
            dp.prepare_torch(p.img, p.rh, p.rw, x[k])
        prob = self.det.forward(x)[: len(pages), 0]
        bitmap = (prob > self.thresh).to(torch.uint8)
        if self.post_processes:
            prob = (prob * 255.0).round_().to(torch.uint8)  # what the shared-memory slots carry
        return self._to_host(prob, bitmap)

    def _rec_chunk(self, chunk: list, wb: int) -> tuple:
        n = len(chunk)
        small = self._rec_small()
        npad = small if n <= small else self.rec_batch_for(wb)
        x = torch.zeros((npad, 3, self.runner.rec_prep.height, wb), device=self.dev,
                        dtype=self.rec.dtype)
        i = 0
        while i < n:  # one copy per run of consecutive rows of one page's crop tensor
            _, _, crops, r0 = chunk[i]
            j = i + 1
            while j < n and chunk[j][2] is crops and chunk[j][3] == r0 + (j - i):
                j += 1
            x[i:j] = crops[r0 : r0 + (j - i), :, :, :wb]
            i = j
        idx, conf = ctc_head_torch(self.rec.forward(x))
        idx, conf = idx[:n], conf[:n]
        return (chunk, *self._to_host(idx, conf))

    def _to_host(self, *tensors: torch.Tensor) -> tuple:
        """Asynchronous copies into fresh pinned host tensors plus the event that marks them
        done (on the CPU: plain copies and no event). Copies, not views: CUDA-graph outputs
        are overwritten by the next replay."""
        if not self.cuda:
            return (*(t.clone() for t in tensors), None)
        out = []
        for t in tensors:
            h = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            h.copy_(t, non_blocking=True)
            out.append(h)
        ev = torch.cuda.Event()
        ev.record()
        return (*out, ev)

    # ------------------------------------------------------------------ CPU piece
    def _post(self, pages: list[_Page], prob: torch.Tensor, bitmap: torch.Tensor, ev: Any) -> list[_Page]:
        t0 = time.perf_counter()
        if ev is not None:
            ev.synchronize()
        pn = prob.numpy()
        bn = bitmap.numpy()
        if self._dbpool is not None:
            futs = [self._dbpool.submit(pn[k, : p.rh, : p.rw], bn[k, : p.rh, : p.rw], p.h, p.w)
                    for k, p in enumerate(pages)]
            for p, f in zip(pages, futs, strict=True):
                p.quads = f.result()
        else:
            dec = self.runner.det_decode
            for k, p in enumerate(pages):
                d = DetInput(np.empty((1, 3, 1, 1), np.float32), p.rh / p.h, p.rw / p.w, p.h, p.w)
                p.quads = dec(pn[k, : p.rh, : p.rw], d, bn[k, : p.rh, : p.rw])
        self.stats.post_s += time.perf_counter() - t0
        return pages

    # ------------------------------------------------------------------ driver
    def _with_oom_retry(self, what: str, fn: Any, items: list, *args: Any) -> list:
        """Run fn on items; on CUDA OOM split the batch in halves (and remember the size)."""
        try:
            return [fn(items, *args)]
        except torch.OutOfMemoryError:
            if len(items) == 1:
                raise
            torch.cuda.empty_cache()
            self.stats.oom_retries += 1
            if what == "det":
                self.det_batch = max(1, self.det_batch // 2)
            else:
                self.rec_batch = max(1, self.rec_batch // 2)
            half = len(items) // 2
            return (self._with_oom_retry(what, fn, items[:half], *args)
                    + self._with_oom_retry(what, fn, items[half:], *args))

    def close(self) -> None:
        if self._dbpool is not None:
            self._dbpool.close()
            self._dbpool = None

    def run(self, items: Iterable[Any], options: ReadOptions | None = None) -> Iterator[Page]:
        """OCR every page of every input, in input order; bad inputs yield error pages."""
        with self._lock:
            yield from self._run(items, options)

    def _run(self, items: Iterable[Any], options: ReadOptions | None) -> Iterator[Page]:
        s = self.runner.settings(options)
        s.det_limit = self.limit
        if self.post_processes and self._dbpool is None:
            from ocrforge.scheduling.db_workers import ShmDBPool

            dd = self.runner.det_decode
            self._dbpool = ShmDBPool(self.post_processes, max(max(b) for b in self.page_buckets),
                                     (dd.thresh, dd.box_thresh, dd.unclip_ratio,
                                      dd.max_candidates, dd.min_size))
        w = Workers("ocrforge-gpu")  # closing the run stops and joins its threads (threads.py)
        out_q = w.queue(self.max_inflight * 2)
        in_q = w.queue(self.max_inflight)
        stop = w.stop
        pool = ThreadPoolExecutor(self.post_workers, thread_name_prefix="ocrforge-gpu-post")
        decoders = ThreadPoolExecutor(max(2, self.post_workers // 2),
                                      thread_name_prefix="ocrforge-gpu-decode")

        def producer() -> None:
            seq = 0
            window: deque[Future] = deque()
            try:
                for item in items:
                    if stop.is_set():
                        return
                    window.append(decoders.submit(self._decode, item))
                    while len(window) >= self.max_inflight // 2:
                        for pg in window.popleft().result():
                            pg.seq = seq
                            seq += 1
                            in_q.put(pg)
                while window:
                    for pg in window.popleft().result():
                        pg.seq = seq
                        seq += 1
                        in_q.put(pg)
            except BaseException as e:  # the items iterator itself failed
                in_q.put(e)
            finally:
                in_q.put(_END)

        gpu_err: list[BaseException] = []

        def gpu() -> None:
            try:
                with torch.inference_mode():
                    self._gpu_loop(in_q, out_q, pool, stop, s)
            except BaseException as e:
                gpu_err.append(e)
            finally:
                out_q.put(_END)

        w.start("producer", producer)
        w.start("driver", gpu)
        done: dict[int, Page] = {}
        nxt = 0
        try:
            while True:
                got = out_q.get()
                if got is _END:
                    break
                if isinstance(got, BaseException):
                    raise got
                seq, page = got
                done[seq] = page
                while nxt in done:
                    yield done.pop(nxt)
                    nxt += 1
            if gpu_err:
                raise gpu_err[0]
            for k in sorted(done):
                yield done[k]
        finally:
            w.close()
            pool.shutdown(wait=True)
            decoders.shutdown(wait=True)

    def _decode(self, item: Any) -> list[_Page]:
        """Decoder thread: host work only (read, sniff, CPU decode, pin). No device calls."""
        t0 = time.perf_counter()
        src = describe(item)
        out: list[_Page] = []
        try:
            # page orientation looks at the host image, so it takes the CPU decoder
            if self.gpu_decode and not self.engine.config.cls.page_orientation:
                data = _plain_jpeg(item)
                if data is not None:
                    p = _Page(0, src, 0, jpeg=data)
                    p.timings["decode"] = time.perf_counter() - t0
                    return [p]
            for pg in self.engine.decode(item):
                out.append(self._host_page(self.runner.upright_pages([pg])[0]))
        except InputError as e:
            out.append(_Page(0, e.source, 0, error=e.reason))
        except Exception as e:
            out.append(_Page(0, src, 0, error=f"cannot read ({type(e).__name__}: {e})"))
        dt = (time.perf_counter() - t0) / max(len(out), 1)
        for p in out:
            p.timings["decode"] = dt
        return out

    def _host_page(self, pg: PageImage) -> _Page:
        h, w = pg.image.shape[:2]
        t = torch.from_numpy(np.ascontiguousarray(pg.image))
        if self.cuda:
            t = t.pin_memory()
        return _Page(0, pg.source, pg.index, h, w, dpi=pg.dpi,
                     rotation=getattr(pg, "rotation", 0), host=t)

    def _gpu_loop(self, in_q: queue.Queue, out_q: queue.Queue, pool: ThreadPoolExecutor,
                  stop: threading.Event, s: Any) -> None:
        dp = self.runner.det_prep
        waiting: dict[tuple[int, int], list[_Page]] = {}
        post: deque[Future] = deque()
        rec_q: dict[int, list[tuple[_Page, int, torch.Tensor, int]]] = {}
        rec_out: deque = deque()
        n_waiting = 0  # pages waiting for detection
        live = [0]  # pages taken in and not yet emitted
        inputs_done = False
        runner = self.runner
        fallback = self.engine.config.rec.crop_fallback

        def emit(p: _Page) -> None:
            live[0] -= 1
            p.img = None
            if p.error is not None:
                out_q.put((p.seq, Page([], 0, 0, source=p.source, page_index=p.index,
                                       error=p.error)))
                return
            page = runner.assemble(p, p.quads, p.texts, [0] * len(p.quads), s, p.timings,
                                   whole_image=p.whole)
            self.stats.pages += 1
            self.stats.lines += len(page.lines)
            out_q.put((p.seq, page))

        def launch_det(bucket: tuple[int, int], group: list[_Page]) -> None:
            t0 = time.perf_counter()
            res = self._with_oom_retry("det", lambda g: (g, *self._run_det(g, *bucket)), group)
            for g, prob, bm, ev in res:
                post.append(pool.submit(self._post, g, prob, bm, ev))
            self.stats.det_batches += len(res)
            self.stats.det_s += time.perf_counter() - t0

        def launch_rec(wb: int, force: bool) -> None:
            lst = rec_q.get(wb, [])
            nb = self.rec_batch_for(wb)
            while len(lst) >= nb or (force and lst):
                t0 = time.perf_counter()
                chunk, lst = lst[:nb], lst[nb:]
                res = self._with_oom_retry("rec", self._rec_chunk, chunk, wb)
                rec_out.extend(res)
                self.stats.rec_batches += len(res)
                self.stats.rec_s += time.perf_counter() - t0
            rec_q[wb] = lst

        def drain_rec(block: bool) -> None:
            while rec_out and (block or rec_out[0][3] is None or rec_out[0][3].query()):
                chunk, idx, conf, ev = rec_out.popleft()
                if ev is not None:
                    ev.synchronize()
                texts = runner.ctc.collapse(idx.numpy(), conf.numpy())
                for (p, li, _, _), tx in zip(chunk, texts, strict=True):
                    p.texts[li] = tx
                    p.pending -= 1
                    if p.pending == 0:
                        emit(p)

        def admit(batch: list[_Page]) -> None:
            nonlocal n_waiting
            t0 = time.perf_counter()
            jpegs = [p for p in batch if p.jpeg is not None]
            if jpegs:
                self._decode_jpegs(jpegs)
            for p in batch:
                if p.error is None:
                    self._upload(p)
            self.stats.decode_s += time.perf_counter() - t0
            for p in batch:
                if p.error is not None:
                    emit(p)
                    continue
                p.rh, p.rw = dp.shape(p.h, p.w, self.limit)
                waiting.setdefault(self.page_bucket(p.rh, p.rw), []).append(p)
                n_waiting += 1

        while not stop.is_set():
            # 1. take new pages (block only when nothing else is in flight)
            busy = bool(post or rec_out or any(rec_q.values()) or n_waiting)
            progress = False
            taken: list[_Page] = []
            while not inputs_done and live[0] < self.max_inflight:
                try:
                    got = in_q.get(timeout=0.05) if not (busy or taken) else in_q.get_nowait()
                except queue.Empty:
                    break
                if got is _END:
                    inputs_done = True
                    break
                if isinstance(got, BaseException):
                    raise got
                live[0] += 1
                taken.append(got)
            if taken:
                admit(taken)
                progress = True
            # 2. detection on full buckets (all buckets once the input is exhausted or idle)
            for b in list(waiting):
                g = waiting[b]
                nb = self.det_batch_for(b)
                while len(g) >= nb or (g and (inputs_done or len(post) == 0)):
                    chunk, g = g[:nb], g[nb:]
                    n_waiting -= len(chunk)
                    launch_det(b, chunk)
                    progress = True
                waiting[b] = g
            # 3. finished contour jobs -> crops on the device -> rec queues
            while post and (post[0].done() or (not rec_out and not n_waiting)):
                progress = True
                for p in post.popleft().result():
                    if fallback and looks_like_crop(p.h, p.w, len(p.quads)):
                        p.quads.append(np.array([[0, 0], [p.w, 0], [p.w, p.h], [0, p.h]], np.float32))
                        p.whole = True
                    if not p.quads:
                        emit(p)
                        continue
                    t0 = time.perf_counter()
                    p.texts = [None] * len(p.quads)
                    p.pending = len(p.quads)
                    crops, rows = crop_lines_torch(p.img, np.stack(p.quads), runner.rec_prep,
                                                   self.rec.dtype)
                    for li, wb, row in rows:
                        rec_q.setdefault(wb, []).append((p, li, crops, row))
                    p.img = None
                    self.stats.crop_s += time.perf_counter() - t0
                for wb in list(rec_q):
                    launch_rec(wb, force=False)
            # 4. flush partial rec batches when nothing else will fill them soon
            if not post and not n_waiting:
                for wb in list(rec_q):
                    if rec_q[wb]:
                        launch_rec(wb, force=True)
                        progress = True
            before = len(rec_out)
            drain_rec(block=False)
            progress = progress or len(rec_out) != before
            if inputs_done and not post and not n_waiting and not any(rec_q.values()):
                drain_rec(block=True)
                if not rec_out:
                    return
            if not progress:
                time.sleep(0.0002)  # waiting on the GPU or the CPU workers; leave them the GIL


def _has_nvjpeg() -> bool:
    try:
        import torchvision.io  # noqa: F401
    except Exception:
        return False
    return True


def _plain_jpeg(item: Any) -> bytes | None:
    """The bytes of a plain JPEG input (no EXIF orientation to apply), else None."""
    if isinstance(item, (bytes, bytearray)):
        data = bytes(item)
    elif isinstance(item, str) or hasattr(item, "__fspath__"):
        try:
            with open(item, "rb") as f:
                data = f.read()
        except OSError:
            return None
    else:
        return None
    if data[:3] != b"\xff\xd8\xff" or b"Exif" in data[:65536]:
        return None
    return data
