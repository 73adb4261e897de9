"""GPU throughput path: pages stream through det -> crop -> rec with batches across pages.

    decode (CPU threads, or nvJPEG on the GPU)        -> uint8 page on the GPU
    resize + normalise + pad to a page bucket (GPU)   -> det batch (CUDA graph per bucket)
    DB binarisation (GPU) -> bitmap + prob to pinned host memory
    contours, box scores, unclip (CPU worker threads, cv2)
    perspective crops: one grid_sample per page from the page already on the GPU
    recognition in width buckets x fixed batch size (CUDA graph per bucket)
    CTC argmax + per-step confidence on the GPU; only indices and scores come back

One thread drives the GPU (so every launch is on one stream, in order); CPU work runs in a
thread pool and overlaps with it. Results come out in input order. An out-of-memory error on
a batch halves that stage's batch size and retries.

Used by OCR.read_many when runtime="torch" and the device is CUDA; it also runs on the CPU
(slowly), which is how CI tests it.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from ocrforge.io.inputs import InputError, describe, iter_pages
from ocrforge.result import Line, Page
from ocrforge.stages.crop import VERTICAL_RATIO
from ocrforge.stages.detect import DetInput, resize_shape

if TYPE_CHECKING:
    from ocrforge.engine import OCR

# page buckets for detection as fractions (H, W) of det_limit_side: a page is resized as the
# engine does (long side <= limit, multiples of 32) and zero-padded into the smallest bucket
# that holds it (A4 portrait at limit 1280 is 1280 x 896 -> the (1, 0.7) bucket, no padding)
PAGE_BUCKET_FRACTIONS = ((1, 1), (1, 0.7), (0.7, 1), (1, 0.5625), (0.5625, 1), (1, 0.375),
                         (0.375, 1), (0.75, 0.75), (0.5, 0.5), (0.25, 0.25))
DEFAULT_PAGE_BUCKETS = "auto"
# recognition width buckets (height 48); narrower steps where lines are common
DEFAULT_REC_WIDTHS = (320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1920, 2560, 3200)


def page_buckets_for(limit: int) -> tuple[tuple[int, int], ...]:
    def r32(v: float) -> int:
        return max(32, int(math.ceil(v * limit / 32)) * 32)

    return tuple(sorted({(r32(a), r32(b)) for a, b in PAGE_BUCKET_FRACTIONS}))
_END = object()


@dataclass
class _Page:
    seq: int
    source: str
    index: int
    h: int
    w: int
    img: torch.Tensor | None = None  # 3 x H x W uint8 on the device (BGR)
    rh: int = 0
    rw: int = 0
    quads: list[np.ndarray] = field(default_factory=list)
    texts: list[tuple[str, float] | None] = field(default_factory=list)
    pending: int = 0
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class PipelineStats:
    pages: int = 0
    lines: int = 0
    det_batches: int = 0
    rec_batches: int = 0
    det_s: float = 0.0  # GPU-thread wall time in each stage (launch + any sync)
    crop_s: float = 0.0
    rec_s: float = 0.0
    post_s: float = 0.0  # CPU worker time in contour extraction (summed over threads)
    oom_retries: int = 0


class GpuPipeline:
    def __init__(self, engine: OCR, *, det_batch: int = 8, rec_batch: int = 64,
                 page_buckets: tuple[tuple[int, int], ...] | str | None = DEFAULT_PAGE_BUCKETS,
                 rec_widths: tuple[int, ...] = DEFAULT_REC_WIDTHS, post_workers: int = 8,
                 gpu_decode: bool = True, sample_mode: str = "bilinear", max_inflight: int = 128,
                 post_processes: int | None = None):
        from ocrforge.runtimes.torch import TorchRuntime

        if not isinstance(engine.det_rt, TorchRuntime) or not isinstance(engine.rec_rt, TorchRuntime):
            raise ValueError("GpuPipeline needs an engine built with runtime='torch'")
        cfg = engine.config
        self.engine = engine
        self.det = engine.det_rt
        self.rec = engine.rec_rt
        # same weights, CTC head: argmax index + its probability come out of the network call
        self.rec_ctc = TorchRuntime("rec_ctc", self.rec.path, cfg, module=self.rec.net)
        self.dev = self.det.dev
        self.cuda = self.dev.type == "cuda"
        self.dtype = self.det.dtype
        self.det_batch = det_batch
        self.rec_batch = rec_batch
        limit = cfg.det_limit_side
        if page_buckets == "auto":
            page_buckets = page_buckets_for(limit)
        # None: no padding, one det shape per distinct resized page size (exact engine parity)
        self.page_buckets = (None if page_buckets is None else
                             sorted({b for b in page_buckets if max(b) <= max(limit, 32)}
                                    or {(limit, limit)}, key=lambda b: b[0] * b[1]))
        self.rec_widths = tuple(sorted(rec_widths))
        self.post_workers = post_workers
        # DB box extraction in processes (GIL-free scaling); 0 = in the worker threads
        if post_processes is None:
            # ~100 pages/s per process for document pages (benchmarks/gpu_host_costs.py);
            # leave a few cores to the GPU driver thread and the decoders
            post_processes = min(12, max(1, (os.cpu_count() or 2) - 4)) if self.cuda else 0
        self.post_processes = post_processes
        self._dbpool = None
        self.gpu_decode = gpu_decode and self.cuda and _has_nvjpeg()
        self.sample_mode = sample_mode
        self.max_inflight = max_inflight
        ms = engine.models.model_set
        self.det_mean = torch.tensor(ms.det_constants.mean, device=self.dev).view(1, 3, 1, 1) * 255.0
        self.det_std = torch.tensor(ms.det_constants.std, device=self.dev).view(1, 3, 1, 1) * 255.0
        rc = ms.rec_constants
        self.rec_h = rc.height
        self.rec_mean, self.rec_std = rc.mean * 255.0, rc.std * 255.0
        self.rec_min_w = rc.width
        self.max_w = cfg.rec_max_width
        self.thresh = float(cfg.resolved_det()["thresh"])
        self.drop = cfg.drop_score
        self.ctc = engine.ctc
        self.stats = PipelineStats()

    # ------------------------------------------------------------------ buckets
    def page_bucket(self, rh: int, rw: int) -> tuple[int, int]:
        for b in self.page_buckets or ():
            if rh <= b[0] and rw <= b[1]:
                return b
        return (int(math.ceil(rh / 32) * 32), int(math.ceil(rw / 32) * 32))

    def rec_bucket(self, tw: int) -> int:
        w = max(tw, self.rec_min_w)
        for b in self.rec_widths:
            if w <= b:
                return b
        return int(math.ceil(w / 32) * 32)

    def warmup(self, page_shapes: Iterable[tuple[int, int]] | None = None,
               rec_widths: Iterable[int] | None = None) -> float:
        """Compile and capture the det/rec shapes the pipeline will use; seconds spent."""
        t0 = time.perf_counter()
        for hb, wb in page_shapes or self.page_buckets or ():
            self.det.forward(torch.zeros((self.det_batch, 3, hb, wb), device=self.dev))
        for wb in rec_widths or self.rec_widths:
            self._rec_forward(torch.zeros((self.rec_batch, 3, self.rec_h, wb), device=self.dev))
        if self.cuda:
            torch.cuda.synchronize(self.dev)
        return time.perf_counter() - t0

    # ------------------------------------------------------------------ GPU pieces
    def _upload(self, img: np.ndarray) -> torch.Tensor:
        """BGR uint8 HWC (host) -> 3xHxW uint8 on the device (pinned, asynchronous copy)."""
        t = torch.from_numpy(np.ascontiguousarray(img))
        if self.cuda:
            t = t.pin_memory().to(self.dev, non_blocking=True)
        return t.permute(2, 0, 1)

    def _to_dev(self, a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t.pin_memory().to(self.dev, non_blocking=True) if self.cuda else t

    def _det_input(self, pages: list[_Page], hb: int, wb: int, n: int) -> torch.Tensor:
        x = torch.zeros((n, 3, hb, wb), device=self.dev, dtype=torch.float32)
        for k, p in enumerate(pages):
            r = p.img.unsqueeze(0).float()
            if (p.rh, p.rw) != (p.h, p.w):
                r = F.interpolate(r, size=(p.rh, p.rw), mode="bilinear", align_corners=False)
            x[k : k + 1, :, : p.rh, : p.rw] = (r - self.det_mean) / self.det_std
        return x

    def _run_det(self, pages: list[_Page], hb: int, wb: int):
        n = self.det_batch if len(pages) > 1 or self.det_batch == 1 else 1
        n = max(n, len(pages))
        x = self._det_input(pages, hb, wb, n)
        prob = self.det.forward(x)[: len(pages), 0]
        bitmap = (prob > self.thresh).to(torch.uint8)
        if self.post_processes:
            prob = (prob * 255.0).round_().to(torch.uint8)  # what the shared-memory slots carry
        if self.cuda:
            # one pinned copy per batch, then the CPU workers slice their page out
            hp = torch.empty(prob.shape, dtype=prob.dtype, pin_memory=True)
            hb_ = torch.empty(bitmap.shape, dtype=torch.uint8, pin_memory=True)
            hp.copy_(prob, non_blocking=True)
            hb_.copy_(bitmap, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            return hp, hb_, ev
        return prob.clone(), bitmap.clone(), None

    def _crop_page(self, p: _Page) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
        """All text lines of a page as normalised rec inputs in one tensor (k x 3 x 48 x Wmax,
        zero right of each line's width), rows sorted by width bucket so that the lines of one
        bucket are contiguous; returns it and [(line index, bucket width, row)]."""
        H, W = p.h, p.w
        hs = self.rec_h
        q = np.stack(p.quads).astype(np.float32)  # k x 4 x 2 (tl, tr, br, bl)
        nrm = np.linalg.norm
        w = np.maximum(np.maximum(nrm(q[:, 0] - q[:, 1], axis=1), nrm(q[:, 2] - q[:, 3], axis=1)).astype(np.int64), 1)
        h = np.maximum(np.maximum(nrm(q[:, 0] - q[:, 3], axis=1), nrm(q[:, 1] - q[:, 2], axis=1)).astype(np.int64), 1)
        mats = _perspective(w, h, q)  # crop pixel -> page pixel, k x 3 x 3
        vert = h / w >= VERTICAL_RATIO
        cw_, ch_ = np.where(vert, h, w), np.where(vert, w, h)  # size of the (turned) crop
        tws = np.clip(np.ceil(hs * cw_ / np.maximum(ch_, 1)).astype(np.int64), 1, self.max_w)
        buckets = np.array([self.rec_bucket(int(t)) for t in tws])
        order = np.argsort(buckets, kind="stable")
        k = len(order)
        wmax = int(buckets.max())
        dev = self.dev
        m = self._to_dev(mats[order].astype(np.float32))
        info = self._to_dev(np.stack([w, h, tws, vert], axis=1)[order].astype(np.float32))
        w_, h_, tw_, v_ = (info[:, i].view(k, 1, 1) for i in range(4))
        u = torch.arange(wmax, device=dev, dtype=torch.float32).view(1, 1, wmax)
        vv = torch.arange(hs, device=dev, dtype=torch.float32).view(1, hs, 1)
        cw = torch.where(v_ > 0, h_, w_)
        ch = torch.where(v_ > 0, w_, h_)
        # rec pixel (u, v) -> (turned) crop pixel, as cv2.resize INTER_LINEAR maps centres
        bx = (u + 0.5) * cw / tw_ - 0.5
        by = (vv + 0.5) * ch / hs - 0.5
        # undo np.rot90 for vertical crops: turned (x', y') = crop (w - 1 - y', x')
        cx = torch.where(v_ > 0, w_ - 1 - by, bx)
        cy = torch.where(v_ > 0, bx, by)
        mm = [m[:, i, j].view(k, 1, 1) for i in range(3) for j in range(3)]
        den = mm[6] * cx + mm[7] * cy + mm[8]
        sx = (mm[0] * cx + mm[1] * cy + mm[2]) / den
        sy = (mm[3] * cx + mm[4] * cy + mm[5]) / den
        grid = torch.stack([(2 * sx + 1) / W - 1, (2 * sy + 1) / H - 1], dim=-1)
        # all crops of the page in one call: stack their grids vertically (1 x k*48 x W)
        src = p.img.unsqueeze(0).float()
        crops = F.grid_sample(src, grid.reshape(1, k * hs, wmax, 2), mode=self.sample_mode,
                              padding_mode="border", align_corners=False)
        crops = crops.view(3, k, hs, wmax).transpose(0, 1)
        crops = (crops - self.rec_mean) / self.rec_std
        crops = crops * (u < tw_).unsqueeze(1).to(crops.dtype)  # zero right of the text
        crops = crops.to(self.rec.dtype).contiguous()
        return crops, [(int(li), int(buckets[li]), row) for row, li in enumerate(order)]

    def _rec_forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, 3, 48, W) -> argmax index (int32) and its probability per CTC step."""
        idx, conf = self.rec_ctc.forward(x)
        return idx, conf

    def _ctc(self, idx: np.ndarray, conf: np.ndarray) -> list[tuple[str, float]]:
        """Greedy CTC collapse of (argmax, probability): the engine's CTCDecoder."""
        return self.ctc.collapse(idx, conf)

    # ------------------------------------------------------------------ CPU piece
    def _post(self, pages: list[_Page], prob, bitmap, ev) -> list[_Page]:
        t0 = time.perf_counter()
        if ev is not None:
            ev.synchronize()
        pn = prob.numpy()
        bn = bitmap.numpy()
        dec = self.engine.det_decode
        if self._dbpool is not None:
            futs = [self._dbpool.submit(pn[k, : p.rh, : p.rw], bn[k, : p.rh, : p.rw], p.h, p.w)
                    for k, p in enumerate(pages)]
            for p, f in zip(pages, futs, strict=True):
                p.quads = f.result()
            self.stats.post_s += time.perf_counter() - t0
            return pages
        for k, p in enumerate(pages):
            d = DetInput(np.empty((1, 3, p.rh, p.rw), np.float32), p.rh / p.h, p.rw / p.w, p.h, p.w)
            p.quads = dec(pn[k, : p.rh, : p.rw], d, bn[k, : p.rh, : p.rw])
        self.stats.post_s += time.perf_counter() - t0
        return pages

    # ------------------------------------------------------------------ driver
    def _with_oom_retry(self, what: str, fn, items: list, *args):
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

    def run(self, items: Iterable[Any]) -> Iterator[Page]:
        """OCR every page of every input, in input order; bad inputs yield error pages."""
        if self.post_processes and self._dbpool is None:
            from ocrforge.scheduling.db_workers import ShmDBPool

            dp, dd = self.engine.det_prep, self.engine.det_decode
            side = dp.limit if dp.limit_type == "max" else 4000
            self._dbpool = ShmDBPool(self.post_processes, side, (
                dd.thresh, dd.box_thresh, dd.unclip_ratio, dd.max_candidates, dd.min_size))
            weakref.finalize(self, self._dbpool.close)
        out_q: queue.Queue = queue.Queue(maxsize=self.max_inflight * 2)
        in_q: queue.Queue = queue.Queue(maxsize=self.max_inflight)
        stop = threading.Event()
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
                    self._gpu_loop(in_q, out_q, pool, stop)
            except BaseException as e:
                gpu_err.append(e)
            finally:
                out_q.put(_END)

        threads = [threading.Thread(target=producer, daemon=True, name="ocrforge-gpu-producer"),
                   threading.Thread(target=gpu, daemon=True, name="ocrforge-gpu-driver")]
        for t in threads:
            t.start()
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
            stop.set()
            for q in (in_q, out_q):
                try:
                    while True:
                        q.get_nowait()
                except queue.Empty:
                    pass
            for t in threads:
                t.join(timeout=5)
            pool.shutdown(wait=True)
            decoders.shutdown(wait=True)

    def _decode(self, item: Any) -> list[_Page]:
        cfg = self.engine.config
        t0 = time.perf_counter()
        src = describe(item)
        try:
            if self.gpu_decode:
                t = _nvjpeg_decode(item, self.dev)
                if t is not None:
                    _, h, w = t.shape
                    p = _Page(0, src, 0, h, w, img=t)
                    p.timings["decode"] = time.perf_counter() - t0
                    return [p]
            pages = list(iter_pages(item, max_pixels=cfg.max_pixels, pdf_dpi=cfg.pdf_dpi,
                                    max_pdf_pages=cfg.max_pdf_pages))
        except InputError as e:
            return [_Page(0, e.source, 0, 0, 0, error=e.reason)]
        except Exception as e:
            return [_Page(0, src, 0, 0, 0, error=f"cannot read ({type(e).__name__}: {e})")]
        dt = (time.perf_counter() - t0) / max(len(pages), 1)
        out = []
        for pg in pages:
            h, w = pg.image.shape[:2]
            p = _Page(0, pg.source, pg.index, h, w, img=self._upload(pg.image))
            p.timings["decode"] = dt
            out.append(p)
        return out

    def _gpu_loop(self, in_q: queue.Queue, out_q: queue.Queue, pool: ThreadPoolExecutor,
                  stop: threading.Event) -> None:
        dp = self.engine.det_prep  # resize exactly as the engine's detector preprocessing does
        limit, ltype = dp.limit, dp.limit_type
        rs_kw = {k: getattr(dp, k) for k in ("min_side", "max_upscale") if hasattr(dp, k)}
        waiting: dict[tuple[int, int], list[_Page]] = {}
        post: deque[Future] = deque()
        rec_q: dict[int, list[tuple[_Page, int, torch.Tensor]]] = {}
        rec_out: deque = deque()
        n_waiting = 0  # pages waiting for detection
        live = [0]  # pages taken in and not yet emitted
        inputs_done = False

        def emit(p: _Page) -> None:
            live[0] -= 1
            if p.error is not None:
                out_q.put((p.seq, Page([], 0, 0, source=p.source, page_index=p.index,
                                       error=p.error)))
                return
            lines = []
            for q, tx in zip(p.quads, p.texts, strict=True):
                text, score = tx if tx is not None else ("", 0.0)
                if score >= self.drop and text.strip():
                    lines.append(Line(text, q.tolist(), score, 0))
            self.stats.pages += 1
            self.stats.lines += len(lines)
            p.img = None
            out_q.put((p.seq, Page(lines, p.w, p.h, p.source, p.index, p.timings)))

        def launch_det(bucket: tuple[int, int], group: list[_Page]) -> None:
            t0 = time.perf_counter()
            res = self._with_oom_retry("det", lambda g: (g, *self._run_det(g, *bucket)), group)
            for g, prob, bm, ev in res:
                post.append(pool.submit(self._post, g, prob, bm, ev))
            self.stats.det_batches += len(res)
            self.stats.det_s += time.perf_counter() - t0

        def launch_rec(wb: int, force: bool) -> None:
            lst = rec_q.get(wb, [])
            while len(lst) >= self.rec_batch or (force and lst):
                t0 = time.perf_counter()
                chunk, lst = lst[: self.rec_batch], lst[self.rec_batch :]
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
                texts = self._ctc(idx.numpy(), conf.numpy())
                for (p, li, _, _), tx in zip(chunk, texts, strict=True):
                    p.texts[li] = tx
                    p.pending -= 1
                    if p.pending == 0:
                        emit(p)

        while not stop.is_set():
            # 1. take new pages (block only when nothing else is in flight)
            busy = bool(post or rec_out or any(rec_q.values()) or n_waiting)
            progress = False
            while not inputs_done and live[0] < self.max_inflight:
                try:
                    got = in_q.get(timeout=0.05) if not busy else in_q.get_nowait()
                except queue.Empty:
                    break
                if got is _END:
                    inputs_done = True
                    break
                if isinstance(got, BaseException):
                    raise got
                p: _Page = got
                live[0] += 1
                progress = True
                if p.error is not None:
                    emit(p)
                    continue
                p.rh, p.rw = resize_shape(p.h, p.w, limit, ltype, **rs_kw)
                b = self.page_bucket(p.rh, p.rw)
                waiting.setdefault(b, []).append(p)
                n_waiting += 1
                busy = True
            # 2. detection on full buckets (all buckets once the input is exhausted or idle)
            for b in list(waiting):
                g = waiting[b]
                while len(g) >= self.det_batch or (g and (inputs_done or len(post) == 0)):
                    chunk, g = g[: self.det_batch], g[self.det_batch :]
                    n_waiting -= len(chunk)
                    launch_det(b, chunk)
                    progress = True
                waiting[b] = g
            # 3. finished contour jobs -> crops on the GPU -> rec queues
            while post and (post[0].done() or (not rec_out and not n_waiting)):
                progress = True
                for p in post.popleft().result():
                    if not p.quads:
                        emit(p)
                        continue
                    t0 = time.perf_counter()
                    p.texts = [None] * len(p.quads)
                    p.pending = len(p.quads)
                    crops, rows = self._crop_page(p)
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

    def _rec_chunk(self, chunk: list, wb: int):
        n = len(chunk)
        # two batch shapes per width bucket (fewer CUDA graphs / compiled variants to build)
        small = max(1, self.rec_batch // 8)
        npad = small if n <= small else self.rec_batch
        x = torch.zeros((npad, 3, self.rec_h, wb), device=self.dev, dtype=self.rec.dtype)
        i = 0
        while i < n:  # one copy per run of consecutive rows of one page's crop tensor
            _, _, crops, r0 = chunk[i]
            j = i + 1
            while j < n and chunk[j][2] is crops and chunk[j][3] == r0 + (j - i):
                j += 1
            x[i:j] = crops[r0 : r0 + (j - i), :, :, :wb]
            i = j
        idx, conf = self._rec_forward(x)
        idx, conf = idx[:n], conf[:n]
        if self.cuda:
            hi = torch.empty(idx.shape, dtype=torch.int32, pin_memory=True)
            hc = torch.empty(conf.shape, dtype=torch.float32, pin_memory=True)
            hi.copy_(idx, non_blocking=True)
            hc.copy_(conf, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            return chunk, hi, hc, ev
        return chunk, idx.clone(), conf.clone(), None


def _perspective(w: np.ndarray, h: np.ndarray, quads: np.ndarray) -> np.ndarray:
    """Batched cv2.getPerspectiveTransform from the rectangles (0,0)-(w,h) to the quads."""
    k = len(w)
    src = np.zeros((k, 4, 2), np.float64)
    src[:, 1, 0] = w
    src[:, 2, 0] = w
    src[:, 2, 1] = h
    src[:, 3, 1] = h
    dst = quads.astype(np.float64)
    a = np.zeros((k, 8, 8))
    b = np.zeros((k, 8))
    for i in range(4):
        x, y = src[:, i, 0], src[:, i, 1]
        u, v = dst[:, i, 0], dst[:, i, 1]
        a[:, i, 0], a[:, i, 1], a[:, i, 2] = x, y, 1
        a[:, i, 6], a[:, i, 7] = -x * u, -y * u
        a[:, i + 4, 3], a[:, i + 4, 4], a[:, i + 4, 5] = x, y, 1
        a[:, i + 4, 6], a[:, i + 4, 7] = -x * v, -y * v
        b[:, i], b[:, i + 4] = u, v
    try:
        sol = np.linalg.solve(a, b[..., None])[..., 0]
    except np.linalg.LinAlgError:  # a degenerate quad somewhere: per quad, as OpenCV does
        return np.stack([cv2.getPerspectiveTransform(src[i].astype(np.float32),
                                                     dst[i].astype(np.float32)) for i in range(k)])
    return np.concatenate([sol, np.ones((k, 1))], axis=1).reshape(k, 3, 3)


def _has_nvjpeg() -> bool:
    try:
        import torchvision.io  # noqa: F401
    except Exception:
        return False
    return True


def _nvjpeg_decode(item: Any, dev: torch.device) -> torch.Tensor | None:
    """3xHxW BGR uint8 on the GPU for a plain JPEG path/bytes; None to use the CPU decoder
    (other formats, EXIF orientation, CMYK/grey JPEGs, any decoder complaint)."""
    import torchvision.io as tvio

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
    try:
        with _NVJPEG_LOCK:  # one nvJPEG decode at a time (decoder threads share its handle)
            t = tvio.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                                 mode=tvio.ImageReadMode.RGB, device=dev)
    except Exception:
        return None
    return t.flip(0)  # RGB -> BGR, as the CPU decoders deliver


_NVJPEG_LOCK = threading.Lock()
_PIPELINES: dict[int, GpuPipeline] = {}


def pipeline_for(engine: OCR) -> GpuPipeline:
    """One GpuPipeline per engine (its buckets and captured graphs are reused)."""
    p = _PIPELINES.get(id(engine))
    if p is None or p.engine is not engine:
        p = _PIPELINES[id(engine)] = GpuPipeline(engine)
    return p
