"""GPU scheduler: decides which pages and lines go into which device batch; the runner's stages
do the work (on device tensors) and the runner's ``assemble`` builds every Page.

    decode       CPU threads read files / decode non-JPEG pages and pin them;
                 plain JPEGs go to the GPU thread as bytes (batched nvJPEG decode there)
    orient       whole-page 0/90/180/270 on the device, in two stages as on the host: the
                 centre 224 x 224 crop of every page of a batch (page_orientation.
                 crops_torch_into), the native classifier, the probabilities read back
                 asynchronously; pages whose centre is unsure or says 180 (a fifth of the dev
                 set) then get their end crops and the centre turned by 180 in a second
                 launch, and are decided as on the host (page_orientation.decide, confirm);
                 turned pages rotated on the device
    detect       pages resized + normalised into a fixed set of page buckets (DetPreprocessor.
                 prepare_torch), DB network (CUDA graph per bucket), binarised on the device
                 inside the same graph (detect.DetMapsPost)
    boxes        contours, box scores, unclip: CPU worker threads / processes; the threads then
                 plan each page's line cuts (sizes, width buckets, page maps: stages.crop.plan_crops)
    crop         the lines of a page in one grid_sample (two: narrow and wide lines; stages.crop.cut_planned),
                 each line padded to its width bucket (RecPreprocessor.bucket, as on the CPU)
    recognize    batches of one width bucket (CUDA graph per bucket); head, softmax and
                 per-step argmax inside the same graph, a few lines at a time
                 (recognize.CTCHeadPost: the N x T x classes logits never exist whole);
                 only indices and scores come back; CTCDecoder.collapse on the CPU

The scheduler gets the runner and a decode function (never the ``OCR`` facade): it decides,
the runner's stages execute. Every device operation is issued by one thread (the GPU driver
thread, scheduling/gpu_loop.py), so all GPU work is ordered on one stream: nothing decoded or
copied is used before it is ready. Shapes come from fixed buckets; a bucket's CUDA graph is
captured the second time its shape is used (``gpu.warmup="lazy"``, the default: pages flow at
once) or all at start (``gpu.warmup="all"``). Results come out in input order. An
out-of-memory error on a batch halves that stage's batch size and retries.

It also runs on the CPU (slowly), which is how CI compares it with the ONNX Runtime engine.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ocrforge.config import ReadOptions
from ocrforge.core import PageRunner, looks_like_crop
from ocrforge.io.inputs import InputError, PageImage, describe
from ocrforge.result import Page
from ocrforge.runtimes.base import DeviceRuntime
from ocrforge.scheduling import gc_freeze
from ocrforge.scheduling.gpu_loop import END as _END
from ocrforge.scheduling.gpu_loop import DriverLoop
from ocrforge.scheduling.layout_workers import PendingLayout
from ocrforge.scheduling.pinned_ring import PinnedRing
from ocrforge.scheduling.threads import Reusable, Workers
from ocrforge.stages import page_orientation as po
from ocrforge.stages.crop import CropPlan, normalise_lines, plan_crops
from ocrforge.stages.detect import DetInput, DetMapsPost
from ocrforge.stages.recognize import CTCHeadPost

Decode = Callable[[Any], Iterable[PageImage]]
# an item of run()'s input: "nothing more for now", so pages held back for decoding ahead go to
# the device at once (a stream of requests, scheduling/gpu_stream.py)
FLUSH = object()


def page_buckets_for(limit: int, fractions: list[tuple[float, float]]) -> list[tuple[int, int]]:
    """Detection page shapes (H, W), multiples of 32, from fractions of the limit."""
    def r32(v: float) -> int:
        return max(32, int(math.ceil(v * limit / 32)) * 32)

    return sorted({(r32(a), r32(b)) for a, b in fractions}, key=lambda b: (b[0] * b[1], b))


@dataclass
class GpuPage:
    seq: int
    source: str
    index: int
    h: int = 0
    w: int = 0
    dpi: float | None = None
    rotation: int = 0  # whole-page orientation applied (on the host or on the device)
    host: torch.Tensor | None = None  # H x W x 3 uint8 (pinned on CUDA), before upload
    jpeg: bytes | None = None  # plain JPEG for the device decoder
    img: torch.Tensor | None = None  # 3 x H x W uint8 on the device (BGR)
    ready: Any = None  # CUDA event: img decoded on the decode stream (decoder threads)
    rh: int = 0
    rw: int = 0
    quads: list[np.ndarray] = field(default_factory=list)
    texts: list[tuple[str, float] | None] = field(default_factory=list)
    pending: int = 0
    whole: bool = False  # quads[-1] is the whole image (crop-like input)
    since: float = 0.0  # when it joined its detection bucket's queue (perf_counter)
    # when the driver took it in, launched its orientation (or placed it, without one),
    # launched its detection, a contour worker had its maps, the driver cut its lines and
    # launched the last of them (perf_counter): SchedulerStats.inflight_phase_s
    t_in: float = 0.0
    t_ori: float = 0.0
    t_det: float = 0.0
    t_det_done: float = 0.0
    t_cut: float = 0.0
    t_rec: float = 0.0
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    plan: CropPlan | None = None  # its lines' crops, planned on the host (plan_lines)
    # page orientation: the centre crop's probabilities, kept while its second stage (the end
    # crops and the centre turned by 180) runs (DriverLoop.finish_orient)
    ori_centre: np.ndarray | None = None

    @property
    def height(self) -> int:
        return self.h

    @property
    def width(self) -> int:
        return self.w


# network rows a page in each page-orientation stage (run_orient): the centre crop; the end
# crops and the centre turned by 180
ORIENT_ROWS = {1: 1, 2: len(po.ENDS) + 1}


@dataclass
class SchedulerStats:
    pages: int = 0
    lines: int = 0
    det_batches: int = 0
    rec_batches: int = 0
    orient_batches: int = 0
    orient_second: int = 0  # pages that needed orientation's second stage (run_orient)
    pages_turned: int = 0
    det_s: float = 0.0  # GPU-thread wall time in each stage (launch + any sync)
    orient_s: float = 0.0
    crop_s: float = 0.0
    rec_s: float = 0.0
    decode_s: float = 0.0  # GPU-thread time decoding JPEGs and uploading pages
    post_s: float = 0.0  # CPU worker time in contour extraction (summed over threads)
    oom_retries: int = 0
    warmup_s: float = 0.0
    warmup_shapes: int = 0  # shapes captured by warmup() (gpu.warmup="all", a server's start)
    idle_captures: int = 0  # shapes captured while the driver had nothing else to do
    idle_capture_s: float = 0.0
    inflight_full_s: float = 0.0  # driver time with gpu.max_inflight pages in hand
    crop_peak_mb: float = 0.0  # most line-crop memory held at once (gpu.max_crop_megabytes)
    # seconds pages spent in each phase while in flight, summed over the emitted pages: taken
    # in -> orientation launched (decode, upload; "admit") -> placed for detection ("orient":
    # the decision back and seen by the driver) -> detection launched (bucket wait) -> its
    # maps on the host (detection, behind the work queued before it) -> lines cut (contours,
    # then the driver's turn) -> its last line launched (width buckets filling, "rec_wait")
    # -> emitted (recognition on the device, the driver's turn). Divided by the pages, the
    # mean time in flight (what fills gpu.max_inflight)
    inflight_phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("admit", "orient", "det_wait", "det", "contours", "rec_wait", "rec"), 0.0))
    # megapixels the networks ran (batch rows x bucket, padding included) and what the pages
    # and lines needed (detector input, text width x 48): the device work padding costs
    det_mpx_run: float = 0.0
    det_mpx_used: float = 0.0
    rec_mpx_run: float = 0.0
    rec_mpx_used: float = 0.0
    rec_rows_run: int = 0  # recognition rows run, padding included (lines: the rows used)


class GpuScheduler:
    """Many pages through a runner on a device. One per engine and det-limit bucket."""

    def __init__(self, runner: PageRunner, decode: Decode, *, det_limit: int | None = None):
        if not isinstance(runner.det_rt, DeviceRuntime) or not isinstance(runner.rec_rt, DeviceRuntime):
            raise ValueError("the GPU scheduler needs an engine with runtime.backend='torch'")
        cfg = runner.config
        g = cfg.gpu
        self.runner = runner
        self.decode = decode
        self.det = runner.det_rt
        self.rec = runner.rec_rt
        self.dev = self.det.dev
        self.cuda = self.dev.type == "cuda"
        # network inputs are built in the runtimes' memory format (channels-last on CUDA), so
        # no conversion pass runs before each call
        self.input_format = torch.channels_last if self.cuda else torch.contiguous_format
        # the driver thread of each run, kept for the next run (cuDNN's plans are per thread)
        self.drivers = Reusable("ocrforge-gpu-driver")
        self.det_batch = cfg.det_batch()
        self.rec_batch = cfg.rec_batch()
        # line pixels per recognition call (rows x bucket width): rec.batch_pixels, else the
        # batch size at 1280 px. The widest calls' activations size recognition's graph pool
        self.rec_pixels = cfg.rec.batch_pixels or self.rec_batch * 1280
        self.rec_pow2_rows = g.rec_pow2_rows
        self.det_pixels = int(g.det_batch_megapixels * 1024 * 1024)
        self.limit = det_limit or cfg.det.limit_side
        self.bucket_step = g.bucket_step
        self.page_buckets = page_buckets_for(self.limit, g.page_buckets)
        if self.bucket_step:  # what warmup="all" captures: the same common shapes, on the grid
            self.page_buckets = sorted({self.page_bucket(*b) for b in self.page_buckets},
                                       key=lambda b: (b[0] * b[1], b))
        self.post_workers = g.post_workers
        self.post_processes = _post_processes(g.post_processes, self.cuda)
        self._dbpool: Any = None
        self.layout_processes = _post_processes(g.layout_processes, self.cuda, layout=True)
        self.layout_pool: Any = None
        self.gpu_decode = g.decode and self.cuda and _has_nvjpeg()
        self.decode_in_threads = self.gpu_decode and g.decode_in_threads
        self.max_inflight = g.max_inflight
        ahead = g.decode_ahead or self.max_inflight * 3 // 2
        self.decode_window, self.decoded_queue = max(1, ahead // 3), max(1, ahead - ahead // 3)
        self.max_crop_bytes = g.max_crop_megabytes * 2**20 if g.max_crop_megabytes else None
        self.max_wait = g.max_wait_ms / 1e3
        self.launch_when_idle = g.launch_when_idle
        self.step_budget = g.step_budget_ms / 1e3 or None
        self.admit_when_decoded = g.admit_when_decoded
        self.orient_batch = g.orient_batch
        self.thresh = float(runner.det_decode.thresh)
        # what runs inside each network's CUDA graph after it (same objects every call: they
        # are part of the graph's key)
        self.det_post = DetMapsPost(self.thresh, runner.det_prep, bool(self.post_processes))
        self.rec_posts = {False: CTCHeadPost(), True: CTCHeadPost(runner.ctc.space_index)}
        # gpu.grey_crops: the crops waiting for recognition were the largest live item on the
        # driver's stream; as grey levels it reserved 3,752 against 4,878 MiB, same dev-set
        # reading (H100, 2026-12-06, docs/BENCHMARKS.md)
        self.crop_dtype = torch.uint8 if g.grey_crops else self.rec.dtype
        self.orient_shapes = sorted({min(8, g.orient_batch), g.orient_batch})
        self.capture_when_idle = g.capture_when_idle
        self.gc_freeze = g.gc_freeze
        self.switch_s = None if g.switch_interval_ms is None else g.switch_interval_ms / 1000.0
        self._idle_tried: set[tuple] = set()  # shapes offered for an idle capture once
        self.warmup_cut_short = False  # a warm-up stopped on its budget: idle drivers go on
        self.stats = SchedulerStats()
        # a list to trace the driver's passes into (gpu_loop.TRACE_COLUMNS; a diagnostic for
        # benchmarks/driver_timeline.py), None: not traced
        self.trace: list | None = None
        self._orient_rt: Any = None
        self._ring: PinnedRing | None = None  # upload_small's staging slots
        self._decode_stream = torch.cuda.Stream(self.dev) if self.cuda else None
        self._lock = threading.Lock()  # one run at a time per scheduler (_turn)
        self._owner: int | None = None  # the thread whose run holds it
        if g.warmup in (True, "all") and self.cuda:
            self.warmup()

    def device_context(self) -> AbstractContextManager:
        """Makes this scheduler's GPU the current one (streams, events, graphs) in a thread."""
        return torch.cuda.device(self.dev) if self.cuda else nullcontext()

    # ------------------------------------------------------------------ buckets
    def det_batch_for(self, bucket: tuple[int, int]) -> int:
        """Pages per detection call in this bucket: at most ``gpu.det_batch_megapixels`` of
        input per call (bounded memory and capture time), never more than the det batch."""
        return max(1, min(self.det_batch, self.det_pixels // (bucket[0] * bucket[1])))

    def page_bucket(self, rh: int, rw: int) -> tuple[int, int]:
        if self.bucket_step:
            st = self.bucket_step
            return (-(-rh // st) * st, -(-rw // st) * st)
        for b in self.page_buckets:
            if rh <= b[0] and rw <= b[1]:
                return b
        return (int(math.ceil(rh / 32) * 32), int(math.ceil(rw / 32) * 32))

    def rec_shapes(self) -> list[int]:
        rp = self.runner.rec_prep
        if rp.widths:
            return list(rp.widths)
        return list(range(rp.bucket(1), rp.max_width + 1, rp.width_step))

    def rec_small(self) -> int:
        return max(1, self.rec_batch // 8)

    def rec_rows_for(self, n: int, width: int) -> int:
        """The batch shape that ``n`` lines of this width bucket run in: the small shape or the
        full one, or with ``gpu.rec_pow2_rows`` the smallest power of two between them that
        holds n (more graphs, less padding: 17 lines otherwise run as 128)."""
        small, full = self.rec_small(), self.rec_batch_for(width)
        if n <= small:
            return small
        if n >= full:  # max(): after an out-of-memory split a half may be larger
            return n
        return min(full, 1 << (n - 1).bit_length()) if self.rec_pow2_rows else full

    def rec_row_shapes(self, width: int) -> list[int]:
        small, full = self.rec_small(), self.rec_batch_for(width)
        return sorted({self.rec_rows_for(n, width) for n in range(small, full + 1)})

    def rec_batch_for(self, width: int) -> int:
        """Lines per recognition call at this width bucket: the rec batch size while it stays
        within ``rec_pixels``, fewer for wider buckets (bounded memory and capture time)."""
        return max(self.rec_small(), min(self.rec_batch, self.rec_pixels // max(width, 1)))

    def orient_runtime(self) -> Any:
        """The page orientation network on this device (None: feature off or file missing)."""
        if self._orient_rt is None:
            rt = self.runner.page_orientation_runtime() if self.runner.config.cls.page_orientation else None
            self._orient_rt = rt if isinstance(rt, DeviceRuntime) else False
        return self._orient_rt or None

    def warmup(self, budget_s: float | None = None) -> float:
        """Capture every bucket shape now, most used first (warmup_plan), on this thread;
        with ``budget_s``, stop once that many seconds are spent (a capture begun finishes:
        ~1 s each on the H100). Shapes left are captured as pages bring them, or by the
        driver thread while it has nothing to do (next_idle_capture). Seconds spent."""
        t0 = time.perf_counter()
        steps = bool(self.runner.config.layout.enabled and self.runner.config.layout.words)
        with torch.inference_mode(), self.device_context():
            for rt, shape, post in self.warmup_plan(steps):
                if budget_s is not None and time.perf_counter() - t0 >= budget_s:
                    self.warmup_cut_short = True  # idle drivers capture the rest
                    break
                if rt.needs_graph(shape, post, share=1.0):
                    rt.warmup([shape], post)
                    self.stats.warmup_shapes += 1
        self.stats.warmup_s = time.perf_counter() - t0
        return self.stats.warmup_s

    def warmup_plan(self, steps: bool) -> list[tuple[Any, tuple[int, ...], Any]]:
        """(runtime, input shape, post) of every bucket shape, in the order a warm-up takes
        them: page orientation (every page, few small shapes), detection of one page per
        bucket (a served request at low concurrency), the recognition widths up to 1280 px,
        detection's batch shapes (under load), then the wide recognition widths, which few
        lines need."""
        h = self.runner.rec_prep.height
        post = self.rec_post(steps)
        det1 = [(self.det, (1, 3, hb, wb), self.det_post) for hb, wb in self.page_buckets]
        detn = [(self.det, (n, 3, hb, wb), self.det_post) for hb, wb in self.page_buckets
                if (n := self.det_batch_for((hb, wb))) > 1]
        rec = [(self.rec, (n, 3, h, wb), post) for wb in self.rec_shapes()
               for n in self.rec_row_shapes(wb)]
        ori = self.orient_runtime()
        orient = [] if ori is None else [(ori, (n, 3, po.SIZE, po.SIZE), None)
                                         for n in self.orient_row_shapes()]
        narrow = [r for r in rec if r[1][3] <= 1280]
        wide = [r for r in rec if r[1][3] > 1280]
        return orient + det1 + narrow + detn + wide

    def next_idle_capture(self, steps: bool) -> tuple[Any, tuple[int, ...], Any] | None:
        """(runtime, input shape, post) of one CUDA graph worth capturing while the driver
        thread has nothing to do, or None: a sibling of a shape already met (the other batch
        shape of its detection bucket, the other row shapes of its recognition width, the
        other page-orientation shape) that has no graph yet, then, after a warm-up that its
        budget cut short (a server's start), the rest of its plan. Each is offered once."""
        for rt, shape, post, share in self._idle_candidates(steps):
            key = (id(rt), shape, post)
            if key in self._idle_tried:
                continue
            self._idle_tried.add(key)
            if rt.needs_graph(shape, post, share=share):
                return rt, shape, post
        return None

    def _idle_candidates(self, steps: bool) -> Iterator[tuple[Any, tuple[int, ...], Any, float]]:
        # shapes met so far (the graph path counts them); sorted() snapshots them at once
        for _, c, hb, wb in sorted(getattr(self.det, "uses", ())):
            for n in sorted({1, self.det_batch_for((hb, wb))}):
                yield self.det, (n, c, hb, wb), self.det_post, 0.5
        widths = sorted({s[3] for s in getattr(self.rec, "uses", ())})
        for wb in widths:
            for n in self.rec_row_shapes(wb):
                yield self.rec, (n, 3, self.runner.rec_prep.height, wb), self.rec_post(steps), 0.5
        ori = self.orient_runtime()
        if ori is not None and getattr(ori, "uses", None):
            for n in self.orient_row_shapes():
                yield ori, (n, 3, po.SIZE, po.SIZE), None, 0.5
        if self.warmup_cut_short:  # the bucket shapes themselves: the whole graph budget
            yield from ((rt, shape, post, 1.0) for rt, shape, post in self.warmup_plan(steps))

    # ------------------------------------------------------------------ device pieces
    def upload(self, p: GpuPage) -> None:
        """On the GPU thread: the page onto the device."""
        if p.host is not None:
            t = p.host.to(self.dev, non_blocking=True) if self.cuda else p.host
            p.img = t.permute(2, 0, 1)
            p.host = None

    def upload_small(self, arr: np.ndarray) -> torch.Tensor:
        """Driver thread: a small host array (crop coefficients) onto the device through the
        pinned ring (scheduling/pinned_ring.py), stream-ordered with what follows."""
        if not self.cuda:
            return torch.from_numpy(arr)
        if self._ring is None:
            self._ring = PinnedRing(self.dev)
        return self._ring.upload(arr)

    def decode_jpegs(self, pages: list[GpuPage]) -> None:
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
                self.upload(p)
            else:
                p.img = t.flip(0)  # RGB -> BGR, as the CPU decoders deliver
                p.h, p.w = int(t.shape[1]), int(t.shape[2])
            p.jpeg = None

    def _device_decode_here(self, p: GpuPage) -> None:
        """Decoder thread: one JPEG by nvJPEG on the decode stream; the driver waits for
        ``p.ready`` before using ``p.img`` (receive). A refused JPEG stays for the driver."""
        import torchvision.io as tvio

        with self.device_context(), torch.cuda.stream(self._decode_stream):
            try:
                t = tvio.decode_jpeg(torch.frombuffer(bytearray(p.jpeg or b""), dtype=torch.uint8),
                                     mode=tvio.ImageReadMode.RGB, device=self.dev)
                p.img = t.flip(0)  # RGB -> BGR, as the CPU decoders deliver
            except Exception:  # refused, or out of device memory
                return
            p.ready = torch.cuda.Event()
            p.ready.record(self._decode_stream)
        p.h, p.w = int(t.shape[1]), int(t.shape[2])
        p.jpeg = None

    def receive(self, p: GpuPage) -> None:
        """Driver thread: a page decoded in a decoder thread, ordered before what follows."""
        main = torch.cuda.current_stream(self.dev)
        main.wait_event(p.ready)
        p.img.record_stream(main)
        p.ready = None

    def _cpu_decode_into(self, p: GpuPage, data: bytes) -> None:
        try:
            pg = next(iter(self.decode(data)))
            p.h, p.w = pg.image.shape[:2]
            p.host = torch.from_numpy(np.ascontiguousarray(pg.image))
        except Exception as e:
            p.error = f"cannot read ({type(e).__name__}: {e})"

    def orient_row_shapes(self) -> list[int]:
        """The network batch shapes (rows) of page orientation: both stages at both page
        counts (run_orient)."""
        return sorted({n * r for r in ORIENT_ROWS.values() for n in self.orient_shapes})

    def run_orient(self, pages: list[GpuPage], stage: int = 1) -> tuple:
        """Page orientation probabilities of these pages, pages x crops x angles (async copy to
        the host + event). Stage 1: the centre crop of every page. Stage 2, for the pages whose
        centre was unsure or said 180 (11 of the 54 dev images classified): the ``ENDS``
        crops, then the centre turned by 180 (po.decide, po.confirm)."""
        # two batch shapes a stage (few graphs to capture); the network is small, padding is cheap
        n = next((k for k in self.orient_shapes if k >= len(pages)), len(pages))
        crops = po.CENTRE if stage == 1 else po.CENTRE + po.ENDS
        rt = self.orient_runtime()
        # grey levels per page, normalised once for the batch
        raw = torch.empty((n, len(crops), 3, po.SIZE, po.SIZE), device=self.dev, dtype=torch.float32)
        for k, p in enumerate(pages):
            po.crops_torch_into(p.img, crops, raw[k])
        raw[len(pages):].zero_()  # padding rows (their results are dropped)
        po.normalise_torch(raw)
        rows = ORIENT_ROWS[stage]
        x = torch.empty((n, rows, 3, po.SIZE, po.SIZE), device=self.dev, dtype=rt.dtype)
        if stage == 1:
            x.copy_(raw)
        else:  # the end crops, then the centre turned by 180, all in one launch
            x[:, : rows - 1] = raw[:, 1:]
            x[:, rows - 1] = raw[:, 0].flip((-2, -1))
        probs = rt.forward(x.flatten(0, 1)).unflatten(0, (n, rows))
        return self.to_host(probs[: len(pages)].float())

    def run_det(self, pages: list[GpuPage], hb: int, wb: int) -> tuple:
        nb = self.det_batch_for((hb, wb))
        n = max(nb if len(pages) > 1 else 1, len(pages))
        x = torch.empty((n, 3, hb, wb), device=self.dev, dtype=self.det.dtype,
                        memory_format=self.input_format).zero_()
        self.stats.det_mpx_run += n * hb * wb / 1e6
        self.stats.det_mpx_used += sum(p.rh * p.rw for p in pages) / 1e6
        dp = self.runner.det_prep
        for k, p in enumerate(pages):
            dp.prepare_torch(p.img, p.rh, p.rw, x[k])
        prob, bitmap = self.det.forward(x, self.det_post)  # DetMapsPost, inside the graph
        return self.to_host(prob[: len(pages)], bitmap[: len(pages)])

    def rec_chunk(self, chunk: list, wb: int, steps: bool = False) -> tuple:
        """Recognise one batch of lines of width bucket ``wb``: (chunk, wb, indices, scores,
        space probabilities per step or None, event), copies on their way to the host."""
        n = len(chunk)
        npad = self.rec_rows_for(n, wb)
        hs = self.runner.rec_prep.height
        self.stats.rec_mpx_run += npad * hs * wb / 1e6
        self.stats.rec_rows_run += npad
        self.stats.rec_mpx_used += sum(min(c[4], wb) for c in chunk) * hs / 1e6
        x = self.rec_input(chunk, npad, wb)
        out = self.rec.forward(x, self.rec_post(steps))  # CTCHeadPost, inside the graph
        if len(out) == 3:
            return (chunk, wb, *self.to_host(*(t[:n] for t in out)))
        idx_h, conf_h, ev = self.to_host(out[0][:n], out[1][:n])
        return chunk, wb, idx_h, conf_h, None, ev

    def rec_input(self, chunk: list, npad: int, wb: int) -> torch.Tensor:
        """The batch of ``chunk``'s crops (padded to ``npad`` rows of zeros) in the network's
        dtype; grey-level crops are normalised and masked here, once per batch."""
        n, hs = len(chunk), self.runner.rec_prep.height
        grey = self.crop_dtype == torch.uint8
        x = torch.empty((npad, 3, hs, wb), device=self.dev, dtype=self.rec.dtype,
                        memory_format=self.input_format)
        if not grey:  # grey crops: normalise_lines masks the padding rows whole (width 0)
            x.zero_()
        i = 0
        while i < n:  # one copy per run of consecutive rows of one page's crop tensor
            crops, r0 = chunk[i][2], chunk[i][3]
            j = i + 1
            while j < n and chunk[j][2] is crops and chunk[j][3] == r0 + (j - i):
                j += 1
            x[i:j] = crops[r0 : r0 + (j - i), :, :, :wb]
            i = j
        if grey:
            widths = np.zeros(npad, np.int32)  # padding rows: all masked, zeros as before
            widths[:n] = [c[4] for c in chunk]
            normalise_lines(x, self.upload_small(widths), self.runner.rec_prep)
        return x

    def rec_post(self, steps: bool) -> CTCHeadPost:
        """Per-step argmax and score (and the space class's probability when words need it)."""
        return self.rec_posts[steps and self.runner.ctc.space_index is not None]

    def to_host(self, *tensors: torch.Tensor) -> tuple:
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
    def post(self, pages: list[GpuPage], prob: torch.Tensor, bitmap: torch.Tensor, ev: Any
             ) -> list[GpuPage]:
        t0 = time.perf_counter()
        if ev is not None:
            ev.synchronize()
        done = time.perf_counter()
        for p in pages:
            p.t_det_done = done
        pn = prob.numpy()
        bn = bitmap.numpy()
        if self._dbpool is not None:
            futs = [self._dbpool.submit(pn[k, : p.rh, : p.rw], bn[k, 0, : p.rh, : p.rw], p.h, p.w,
                                        bn[k, 1, : p.rh, : p.rw])
                    for k, p in enumerate(pages)]
            for p, f in zip(pages, futs, strict=True):
                p.quads = f.result()
        else:
            dec = self.runner.det_decode
            for k, p in enumerate(pages):
                d = DetInput(np.empty((1, 3, 1, 1), np.float32), p.rh / p.h, p.rw / p.w, p.h, p.w,
                             bn[k, 1, : p.rh, : p.rw])
                p.quads = dec(pn[k, : p.rh, : p.rw], d, bn[k, 0, : p.rh, : p.rw])
        for p in pages:
            self.plan_lines(p)
        self.stats.post_s += time.perf_counter() - t0
        return pages

    def plan_lines(self, p: GpuPage) -> None:
        """The host half of cutting a page's lines (stages.crop.plan_crops), in the contour
        worker thread, so the driver thread only launches the cut. A crop-like page without
        lines is read whole (rec.crop_fallback), as on the CPU."""
        if self.runner.config.rec.crop_fallback and looks_like_crop(p.h, p.w, len(p.quads)):
            p.quads.append(np.array([[0, 0], [p.w, 0], [p.w, p.h], [0, p.h]], np.float32))
            p.whole = True
        if p.quads:
            p.plan = plan_crops(np.stack(p.quads), self.runner.rec_prep, p.w, p.h)

    def with_oom_retry(self, what: str, fn: Any, items: list, *args: Any) -> list:
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
            elif what == "rec":
                self.rec_batch = max(1, self.rec_batch // 2)
            half = len(items) // 2
            return (self.with_oom_retry(what, fn, items[:half], *args)
                    + self.with_oom_retry(what, fn, items[half:], *args))

    def ensure_db_pool(self) -> None:
        if self.post_processes and self._dbpool is None:
            from ocrforge.scheduling.db_workers import ShmDBPool

            dd = self.runner.det_decode
            side = max(max(b) for b in [*self.page_buckets, self.page_bucket(self.limit, self.limit)])
            self._dbpool = ShmDBPool(self.post_processes, side,
                                     (dd.thresh, dd.box_thresh, dd.unclip_ratio,
                                      dd.max_candidates, dd.min_size))

    def ensure_layout_pool(self, s: Any) -> None:
        if s.layout and self.layout_processes and self.layout_pool is None:
            from ocrforge.scheduling.layout_workers import LayoutPool  # noqa: I001

            self.layout_pool = LayoutPool(self.layout_processes, self.runner.layout_settings())

    def wait_captures(self, timeout: float | None = None) -> bool:
        """Block until the CUDA graphs asked for so far (captured in the background) are in."""
        rts = [self.det, self.rec, self.orient_runtime()]
        return all(rt.wait_captures(timeout) for rt in rts if hasattr(rt, "wait_captures"))

    def close(self) -> None:
        gc_freeze.release(self)
        self.drivers.close()
        if self._dbpool is not None:
            self._dbpool.close()
            self._dbpool = None
        if self.layout_pool is not None:
            self.layout_pool.close()
            self.layout_pool = None

    # ------------------------------------------------------------------ host side
    def decode_item(self, item: Any) -> list[GpuPage]:
        """Decoder thread: host work only (read, sniff, CPU decode, pin). No device calls."""
        t0 = time.perf_counter()
        src = describe(item)
        out: list[GpuPage] = []
        try:
            if self.gpu_decode:
                data = _plain_jpeg(item)
                if data is not None:
                    p = GpuPage(0, src, 0, jpeg=data)
                    if self.decode_in_threads:
                        self._device_decode_here(p)
                    p.timings["decode"] = time.perf_counter() - t0
                    return [p]
            for pg in self.decode(item):
                out.append(self._host_page(pg))
        except InputError as e:
            out.append(GpuPage(0, e.source, 0, error=e.reason))
        except Exception as e:
            out.append(GpuPage(0, src, 0, error=f"cannot read ({type(e).__name__}: {e})"))
        dt = (time.perf_counter() - t0) / max(len(out), 1)
        for p in out:
            p.timings["decode"] = dt
        return out

    def _host_page(self, pg: PageImage) -> GpuPage:
        h, w = pg.image.shape[:2]
        t = torch.from_numpy(np.ascontiguousarray(pg.image))
        if self.cuda:
            t = t.pin_memory()
        return GpuPage(0, pg.source, pg.index, h, w, dpi=pg.dpi,
                       rotation=getattr(pg, "rotation", 0), host=t)

    # ------------------------------------------------------------------ run
    def run(self, items: Iterable[Any], options: ReadOptions | None = None) -> Iterator[Page]:
        """OCR every page of every input, in input order; bad inputs yield error pages."""
        with self._turn():
            yield from self._run(items, options, ordered=True)

    def run_as_read(self, items: Iterable[Any], options: ReadOptions | None = None
                    ) -> Iterator[tuple[int, Page | PendingLayout]]:
        """``run``'s pages as soon as each is read, with its position in input order (the
        server's stream: a slow page holds back no other caller's). A page still being laid
        out comes as a PendingLayout (``result()`` waits for it)."""
        with self._turn():
            yield from self._run(items, options, ordered=False)

    @contextmanager
    def _turn(self) -> Iterator[None]:
        """This scheduler's device, for one run: a run in another thread is waited for; one
        still open in this very thread (a generator not read to its end) never ends while we
        wait, so that is an error, not a hang."""
        me = threading.get_ident()
        if not self._lock.acquire(blocking=False):
            if self._owner == me:
                raise RuntimeError(
                    "a read_many / run of this GPU engine is still open in this thread: read it "
                    "to its end or close() it before starting another (one run at a time per "
                    "device; use one run for all inputs, or another thread)")
            self._lock.acquire()
        self._owner = me
        try:
            yield
        finally:
            self._owner = None
            self._lock.release()

    def _run(self, items: Iterable[Any], options: ReadOptions | None, ordered: bool) -> Iterator:
        s = self.runner.settings(options)
        s.det_limit = self.limit
        self.ensure_db_pool()
        self.ensure_layout_pool(s)
        if self.gc_freeze or self.switch_s is not None:
            gc_freeze.hold(self, freeze=self.gc_freeze, switch_s=self.switch_s)
        w = Workers("ocrforge-gpu")  # closing the run stops and joins its threads (threads.py)
        out_q = w.queue(self.max_inflight * 2)
        in_q = w.queue(self.decoded_queue)
        stop = w.stop
        pool = ThreadPoolExecutor(self.post_workers, thread_name_prefix="ocrforge-gpu-post")
        decoders = ThreadPoolExecutor(max(2, self.post_workers // 2),
                                      thread_name_prefix="ocrforge-gpu-decode")
        gpu_err: list[BaseException] = []

        def gpu() -> None:
            try:
                with torch.inference_mode(), self.device_context():
                    DriverLoop(self, s, in_q, out_q, pool, stop).run()
            except BaseException as e:
                gpu_err.append(e)
            finally:
                out_q.put(_END)

        w.start("producer", lambda: self._produce(items, decoders, in_q, stop))
        w.start_on(self.drivers, gpu)
        try:
            yield from (_in_order(out_q, gpu_err) if ordered else _as_read(out_q, gpu_err))
        finally:
            w.close()
            pool.shutdown(wait=True)
            decoders.shutdown(wait=True)

    def _produce(self, items: Iterable[Any], decoders: ThreadPoolExecutor, in_q: queue.Queue,
                 stop: threading.Event) -> None:
        seq = 0
        window: deque[Future] = deque()

        def flush(keep: int) -> None:
            nonlocal seq
            while len(window) > keep:
                for pg in window.popleft().result():
                    pg.seq = seq
                    seq += 1
                    in_q.put(pg)

        try:
            for item in items:
                if stop.is_set():
                    return
                if item is FLUSH:
                    flush(0)
                    continue
                window.append(decoders.submit(self.decode_item, item))
                flush(self.decode_window - 1)
            flush(0)
        except BaseException as e:  # the items iterator itself failed
            in_q.put(e)
        finally:
            in_q.put(_END)


def _in_order(out_q: queue.Queue, gpu_err: list[BaseException]) -> Iterator[Page]:
    done: dict[int, Page] = {}
    nxt = 0
    while True:
        got = out_q.get()
        if got is _END:
            break
        if isinstance(got, BaseException):
            raise got
        seq, page = got
        done[seq] = laid_out(page) if isinstance(page, PendingLayout) else page
        while nxt in done:
            yield done.pop(nxt)
            nxt += 1
    if gpu_err:
        raise gpu_err[0]
    for k in sorted(done):
        yield done[k]


def _as_read(out_q: queue.Queue, gpu_err: list[BaseException]) -> Iterator[tuple[int, Any]]:
    while (got := out_q.get()) is not _END:
        if isinstance(got, BaseException):
            raise got
        yield got
    if gpu_err:
        raise gpu_err[0]


def laid_out(fut: PendingLayout) -> Page:
    """The page once its worker has laid it out; a worker's failure as a RuntimeError."""
    try:
        return fut.result()
    except Exception as e:  # a worker died or layout failed: the run fails, as it would inline
        raise RuntimeError(f"layout stage failed ({type(e).__name__}: {e})") from e


def _post_processes(configured: int | None, cuda: bool, layout: bool = False) -> int:
    if configured is not None:
        return configured
    if not cuda:
        return 0
    cpus = os.cpu_count() or 2
    if layout:  # ~5-10 ms per document page: 4 processes carry a few hundred pages/s
        return min(4, max(1, cpus // 4))
    # ~100 pages/s per process for document pages (benchmarks/gpu_host_costs.py); leave a few
    # cores to the GPU driver thread, the decoders and the layout processes
    return min(12, max(1, cpus - 4 - min(4, cpus // 4)))


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
