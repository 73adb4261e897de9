"""The GPU driver thread's loop: the one thread that issues device work for a GpuScheduler run.

Each pass takes what is ready and moves it one step, never waiting on the GPU while something
else can be done:

    take        new pages from the decoders (blocks only when nothing is in flight)
    admit       nvJPEG decode / upload; page orientation launched for pages that need it
    orient      decisions whose copy-back is done: turned pages rotated on the device,
                every page placed in its detection bucket
    detect      full buckets (all buckets once the input is exhausted or the CPU is idle)
    boxes       finished contour jobs (in any order) -> line crops on the device -> width-bucket queues
    recognize   full width buckets (all of them when nothing else will fill them soon)
    drain       finished recognitions -> texts; a page whose last line is read is emitted
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ocrforge.core import Settings
from ocrforge.result import Page
from ocrforge.stages import page_orientation as po
from ocrforge.stages.crop import cut_planned

if TYPE_CHECKING:
    from ocrforge.scheduling.gpu import GpuPage, GpuScheduler

END = object()  # the end of a queue (inputs, results)
# the driver's steps, in the order of each pass over them (DriverLoop.step)
STEPS = ("take", "finish_orient", "launch_det", "finish_boxes", "flush_rec", "drain_rec")
# a row of GpuScheduler.trace (benchmarks/driver_timeline.py reads them): when the pass began,
# device idle (1, 0, -1 without events), pages in hand, waiting for detection, orientation
# batches out, contour jobs out and done, lines queued for recognition, recognition batches out,
# pages ready to take, MiB of line crops held; then each step's seconds, and the driver's CPU
# seconds in them (less than their sum: waits for the GIL or for the device)
TRACE_COLUMNS = ("t", "idle", "live", "waiting", "orienting", "contours", "contours_done",
                 "rec_lines", "rec_out", "inputs", "crop_mib", *(f"s_{n}" for n in STEPS), "cpu")


class DriverLoop:
    def __init__(self, sch: GpuScheduler, s: Settings, in_q: queue.Queue, out_q: queue.Queue,
                 pool: ThreadPoolExecutor, stop: threading.Event):
        self.sch = sch
        self.runner = sch.runner
        self.stats = sch.stats
        self.s = s
        self.in_q, self.out_q, self.pool, self.stop = in_q, out_q, pool, stop
        self.waiting: dict[tuple[int, int], list[GpuPage]] = {}  # pages waiting for detection
        self.n_waiting = 0
        self.orienting: deque[tuple[list[GpuPage], torch.Tensor, Any, int]] = deque()  # + stage
        self.post: deque[Future] = deque()  # contour jobs
        self.rec_q: dict[int, list[tuple[GpuPage, int, torch.Tensor, int, int]]] = {}
        self.rec_t: dict[int, list[float]] = {}  # when each line of rec_q joined it
        # words need the characters' CTC steps and the space class per step (as on the CPU)
        self.steps = bool(s.layout and self.runner.config.layout.words)
        self.rec_out: deque = deque()
        # the event of the latest device launch: once it has fired the GPU has nothing queued
        # from this run, and waiting for a fuller batch would only leave it idle
        self.last_ev: Any = None
        self.idle_launch = sch.launch_when_idle
        self.live = 0  # pages taken in and not yet emitted
        self.inputs_done = False
        self.full_since: float | None = None  # note_full
        self.crop_bytes = 0  # line crops held for recognition (crop_room)
        self.crop_rows: dict[int, list] = {}  # id(crops) -> [rows not yet read, bytes]
        self.orient = sch.orient_runtime() is not None
        # pages taken in whose device decode (a decoder thread's nvJPEG call) has not finished
        # yet (gpu.admit_when_decoded): admitted once it has, so the driver's stream never
        # waits for the decode stream
        self.decoding: deque[GpuPage] = deque()
        self.admit_when_decoded = sch.admit_when_decoded

    def run(self) -> None:
        trace = self.sch.trace
        while not self.stop.is_set():
            progress = self.step() if trace is None else self.traced_step(trace)
            if self.finished():
                return
            if not progress and not (self.live == 0 and self.capture_when_idle()):
                time.sleep(0.0002)  # waiting on the GPU or the CPU workers; leave them the GIL

    def step(self) -> bool:
        """One pass over every step; whether any of them moved something."""
        progress = False
        for name in STEPS:
            progress |= getattr(self, name)()
        return progress

    def traced_step(self, trace: list) -> bool:
        """step(), adding a row to ``trace`` (GpuScheduler.trace): the state the pass began
        with (TRACE_COLUMNS), then each step's seconds and the CPU time they took."""
        row = [time.perf_counter(), *self.state()]
        progress = False
        c0 = time.thread_time()
        for name in STEPS:
            t0 = time.perf_counter()
            progress |= getattr(self, name)()
            row.append(time.perf_counter() - t0)
        row.append(time.thread_time() - c0)
        trace.append(row)
        return progress

    def state(self) -> tuple:
        """TRACE_COLUMNS[1:11]: whether the device has finished all it was given (-1: no
        device events), then what is in hand at each step."""
        idle = -1 if self.last_ev is None else int(self.last_ev.query())
        return (idle, self.live, self.n_waiting, len(self.orienting), len(self.post),
                sum(1 for j in self.post if j.done()), sum(map(len, self.rec_q.values())),
                len(self.rec_out), self.in_q.qsize(), self.crop_bytes / 2**20)

    def capture_when_idle(self) -> bool:
        """No page in hand and none arrived within take()'s wait: capture one likely next
        shape (GpuScheduler.next_idle_capture) in this thread, where its cuDNN plans are then
        kept for the run's own calls. False when there is nothing left to capture."""
        if self.inputs_done or not self.sch.capture_when_idle:
            return False
        nxt = self.sch.next_idle_capture(self.steps)
        if nxt is None:
            return False
        rt, shape, post = nxt
        self.stats.idle_captures += 1
        self.stats.idle_capture_s += rt.warmup([shape], post)
        return True

    # ------------------------------------------------------------------ state
    def busy(self) -> bool:
        return bool(self.post or self.rec_out or self.orienting or self.n_waiting
                    or self.decoding or any(self.rec_q.values()))

    def gpu_idle(self) -> bool:
        """Everything launched has finished on the device (never on the CPU: no events)."""
        return self.idle_launch and self.last_ev is not None and self.last_ev.query()

    def finished(self) -> bool:
        if not self.inputs_done or self.post or self.n_waiting or self.orienting \
                or self.decoding or any(self.rec_q.values()):
            return False
        self.drain_rec(block=True)
        return not self.rec_out

    def emit(self, p: GpuPage) -> None:
        self.live -= 1
        p.img = None
        self.note_phases(p)
        if p.error is not None:
            self.out_q.put((p.seq, Page([], 0, 0, source=p.source, page_index=p.index,
                                        error=p.error)))
            return
        page, steps = self.runner.page_lines(p, p.quads, p.texts, [0] * len(p.quads), self.s,
                                             p.timings, whole_image=p.whole)
        self.stats.pages += 1
        self.stats.lines += len(page.lines)
        if not self.s.layout:
            self.out_q.put((p.seq, page))
        elif self.sch.layout_pool is not None:  # a Future: _in_order waits for it
            self.out_q.put((p.seq, self.sch.layout_pool.submit(page, steps)))
        else:
            self.out_q.put((p.seq, self.runner.lay_out(page, None, steps)))

    def note_phases(self, p: GpuPage) -> None:
        """Add the page's time in each phase (a phase it skipped counts as zero)."""
        now = time.perf_counter()
        marks = [p.t_in, p.t_ori, p.since, p.t_det, p.t_det_done, p.t_cut, p.t_rec, now]
        for i in range(1, len(marks)):  # a mark not reached takes the one before it
            marks[i] = marks[i] or marks[i - 1]
        ph = self.stats.inflight_phase_s
        for k, name in enumerate(ph):
            ph[name] += marks[k + 1] - marks[k]

    # ------------------------------------------------------------------ steps
    def take(self) -> bool:
        taken: list[GpuPage] = self.decoded()
        busy = self.busy()
        while not self.inputs_done and self.live < self.sch.max_inflight:
            try:
                got = self.in_q.get(timeout=0.05) if not (busy or taken) else self.in_q.get_nowait()
            except queue.Empty:
                break
            if got is END:
                self.inputs_done = True
                break
            if isinstance(got, BaseException):
                raise got
            self.live += 1
            got.t_in = time.perf_counter()
            if self.admit_when_decoded and got.ready is not None and (
                    self.decoding or not got.ready.query()):
                self.decoding.append(got)  # in arrival order
                continue
            taken.append(got)
        if taken:
            self.admit(taken)
        self.note_full()
        return bool(taken)

    def decoded(self) -> list[GpuPage]:
        """The pages at the head of ``decoding`` whose device decode has finished."""
        out = []
        while self.decoding and self.decoding[0].ready.query():
            out.append(self.decoding.popleft())
        return out

    def note_full(self) -> None:
        """Time from a take() that left ``gpu.max_inflight`` pages in hand (the window full,
        no page taken in) to the next take()."""
        now = time.perf_counter()
        if self.full_since is not None:
            self.stats.inflight_full_s += now - self.full_since
        self.full_since = now if self.live >= self.sch.max_inflight else None

    def admit(self, batch: list[GpuPage]) -> None:
        sch = self.sch
        t0 = time.perf_counter()
        jpegs = [p for p in batch if p.jpeg is not None]
        if jpegs:
            sch.decode_jpegs(jpegs)
        for p in batch:
            if p.ready is not None:
                sch.receive(p)
            elif p.error is None:
                sch.upload(p)
        self.stats.decode_s += time.perf_counter() - t0
        todo = []
        for p in batch:
            if p.error is not None:
                self.emit(p)
            elif self.orient and p.rotation == 0 and po.applies(p.h, p.w):
                todo.append(p)
            else:
                self.place(p)
        self.launch_orient(todo)

    def launch_orient(self, todo: list[GpuPage], stage: int = 1) -> None:
        sch = self.sch
        t0 = time.perf_counter()
        if stage == 1:
            for p in todo:
                p.t_ori = t0
        for i in range(0, len(todo), sch.orient_batch):
            chunk = todo[i : i + sch.orient_batch]
            for g, probs, ev in sch.with_oom_retry(
                    "orient", lambda g: (g, *sch.run_orient(g, stage)), chunk):
                self.orienting.append((g, probs, ev, stage))
                self.last_ev = ev
                self.stats.orient_batches += 1
        self.stats.orient_s += time.perf_counter() - t0

    def place(self, p: GpuPage) -> None:
        p.rh, p.rw = self.runner.det_prep.shape(p.h, p.w, self.sch.limit)
        p.since = time.perf_counter()
        p.t_ori = p.t_ori or p.since  # no orientation: admitted until now
        self.waiting.setdefault(self.sch.page_bucket(p.rh, p.rw), []).append(p)
        self.n_waiting += 1

    def finish_orient(self) -> bool:
        """Decisions whose copy is done (or any, when nothing else is in flight)."""
        moved = False
        while self.orienting:
            pages, probs, ev, stage = self.orienting[0]
            done = ev is None or ev.query()
            if not done and (self.post or self.rec_out or self.n_waiting):
                break
            self.orienting.popleft()
            t0 = time.perf_counter()
            if not done:  # nothing else in flight: wait for it (a call that gives up the GIL)
                ev.synchronize()
            pr = probs.numpy()
            if stage == 1:
                self.decide_centre(pages, pr[:, 0])
            else:
                self.decide_second(pages, pr)
            self.stats.orient_s += time.perf_counter() - t0
            moved = True
        return moved

    def decide_centre(self, pages: list[GpuPage], centre: np.ndarray) -> None:
        """Orientation's first stage back: pages the centre crop decides (sure, and not
        upside down) are placed; the rest go to the second stage (po.decide, po.confirm)."""
        angles = po.decide(centre, po.THRESH)
        again = set(po.unsure(centre, po.THRESH)) | set(po.pages_to_confirm(angles))
        second = []
        for i, p in enumerate(pages):
            if i in again:  # a copy: on CUDA ``centre`` is a pinned buffer that is reused
                p.ori_centre = np.array(centre[i])
                second.append(p)
            else:
                self.turn_and_place(p, angles[i])
        if second:
            self.stats.orient_second += len(second)
            self.launch_orient(second, stage=2)

    def decide_second(self, pages: list[GpuPage], pr: np.ndarray) -> None:
        """The second stage back: ends and the turned centre decide with the centre kept."""
        ne = len(po.ENDS)
        ends, back = pr[:, :ne], pr[:, ne]
        centre = np.stack([p.ori_centre for p in pages])
        angles = po.confirm(po.decide(centre, po.THRESH, ends), back, po.THRESH, ends)
        for p, angle in zip(pages, angles, strict=True):
            p.ori_centre = None
            self.turn_and_place(p, angle)

    def turn_and_place(self, p: GpuPage, angle: int) -> None:
        if angle:
            p.img = po.upright_torch(p.img, angle)
            p.h, p.w = int(p.img.shape[1]), int(p.img.shape[2])
            p.rotation = angle
            self.stats.pages_turned += 1
        self.place(p)

    def launch_det(self) -> bool:
        launched = False
        due = time.perf_counter() - self.sch.max_wait
        idle = bool(self.n_waiting) and self.gpu_idle()
        for b in list(self.waiting):
            g = self.waiting[b]
            nb = self.sch.det_batch_for(b)
            while len(g) >= nb or (g and (self.inputs_done or not self.post or idle
                                          or g[0].since <= due)):
                chunk, g = g[:nb], g[nb:]
                self.n_waiting -= len(chunk)
                t0 = time.perf_counter()
                for p in chunk:
                    p.t_det = t0
                res = self.sch.with_oom_retry("det", lambda c, b=b: (c, *self.sch.run_det(c, *b)), chunk)
                for c, prob, bm, ev in res:
                    self.post.append(self.pool.submit(self.sch.post, c, prob, bm, ev))
                    self.last_ev = ev
                self.stats.det_batches += len(res)
                self.stats.det_s += time.perf_counter() - t0
                launched = True
            self.waiting[b] = g
        return launched

    def crop_room(self) -> bool:
        """Whether more pages may be cut (gpu.max_crop_megabytes; one page's crops always)."""
        cap = self.sch.max_crop_bytes
        return cap is None or self.crop_bytes == 0 or self.crop_bytes < cap

    def out_of_time(self, t0: float) -> bool:
        """Whether a step begun at ``t0`` has used its share of the pass (gpu.step_budget_ms)."""
        return self.sch.step_budget is not None and time.perf_counter() - t0 > self.sch.step_budget

    def finish_boxes(self) -> bool:
        """Finished contour jobs -> crops on the device -> rec queues."""
        moved = False
        t0 = time.perf_counter()
        while not (moved and self.out_of_time(t0)) and self.crop_room() \
                and (job := self.next_boxes()) is not None:
            moved = True
            pages = job.result()
            for k, p in enumerate(pages):
                if not self._crop(p):  # out of device memory: the rest waits for recognition
                    self.post.appendleft(_done(pages[k:]))
                    break
            for wb in list(self.rec_q):
                self.launch_rec(wb, force=False)
        return moved

    def next_boxes(self) -> Future | None:
        """A finished contour job, whichever finished first (a big page's contours do not hold
        up the small pages launched after it); the oldest when nothing else is in flight."""
        for k, job in enumerate(self.post):
            if job.done():
                del self.post[k]
                return job
        if self.post and not self.rec_out and not self.n_waiting:
            return self.post.popleft()
        return None

    def _crop(self, p: GpuPage) -> bool:
        """Cut a page's lines into the recognition queues. False when the device ran out of
        memory (a small card) while other pages' crops are held: the crop budget then halves,
        as batch sizes do, and the page is cut again once recognition has freed some."""
        if p.plan is None:  # no lines (GpuScheduler.plan_lines)
            self.emit(p)
            return True
        t0 = time.perf_counter()
        try:
            cut = cut_planned(p.img, p.plan, self.runner.rec_prep, self.sch.crop_dtype,
                              upload=self.sch.upload_small)  # a list: all cut, or none queued
        except torch.OutOfMemoryError:
            if not self.crop_bytes:  # nothing held that recognition would free
                raise
            self.sch.max_crop_bytes = max(1, self.crop_bytes // 2)
            self.stats.oom_retries += 1
            return False
        p.texts = [None] * len(p.quads)
        p.pending = len(p.quads)
        now = p.t_cut = time.perf_counter()
        for li, wb, crops, row, tw in cut:
            self.rec_q.setdefault(wb, []).append((p, li, crops, row, tw))
            self.rec_t.setdefault(wb, []).append(now)
            self.hold_crop(crops)
        p.img = None
        p.plan = None
        self.stats.crop_s += time.perf_counter() - t0
        return True

    def hold_crop(self, crops: torch.Tensor) -> None:
        held = self.crop_rows.get(id(crops))
        if held is None:
            nbytes = crops.numel() * crops.element_size()
            held = self.crop_rows[id(crops)] = [0, nbytes]
            self.crop_bytes += nbytes
            self.stats.crop_peak_mb = max(self.stats.crop_peak_mb, self.crop_bytes / 2**20)
        held[0] += 1

    def release_crop(self, crops: torch.Tensor) -> None:
        held = self.crop_rows[id(crops)]
        held[0] -= 1
        if held[0] == 0:
            self.crop_bytes -= held[1]
            del self.crop_rows[id(crops)]

    def launch_rec(self, wb: int, force: bool) -> None:
        lst = self.rec_q.get(wb, [])
        nb = self.sch.rec_batch_for(wb)
        while len(lst) >= nb or (force and lst):
            t0 = time.perf_counter()
            chunk, lst = lst[:nb], lst[nb:]
            self.rec_t[wb] = self.rec_t[wb][len(chunk):]
            for line in chunk:  # a page's last launch wins: when its lines all left the queues
                line[0].t_rec = t0
            res = self.sch.with_oom_retry("rec", self.sch.rec_chunk, chunk, wb, self.steps)
            self.rec_out.extend(res)
            self.last_ev = res[-1][-1]
            self.stats.rec_batches += len(res)
            self.stats.rec_s += time.perf_counter() - t0
        self.rec_q[wb] = lst

    def flush_rec(self) -> bool:
        """Partial rec batches: when nothing else will fill them soon, when the GPU has run
        out of work, or when their oldest line has waited ``gpu.max_wait_ms``."""
        # with the crop budget spent, no new line will fill a partial batch until one is read
        idle = not (self.post or self.n_waiting or self.orienting) or (
            any(self.rec_q.values()) and (self.gpu_idle() or not self.crop_room()))
        due = time.perf_counter() - self.sch.max_wait
        flushed = False
        for wb in list(self.rec_q):
            if self.rec_q[wb] and (idle or self.rec_t[wb][0] <= due):
                self.launch_rec(wb, force=True)
                flushed = True
        return flushed

    def drain_rec(self, block: bool = False) -> bool:
        drained = False
        t0 = time.perf_counter()
        while self.rec_out and (block or self.rec_out[0][-1] is None or self.rec_out[0][-1].query()):
            if drained and not block and self.out_of_time(t0):
                break
            chunk, wb, idx, conf, space, ev = self.rec_out.popleft()
            if block and ev is not None:  # otherwise query() said it is done
                ev.synchronize()
            if space is None:
                texts = self.runner.ctc.collapse(idx.numpy(), conf.numpy())
            else:  # as CTCDecoder.decode_steps on the CPU: steps covering each line's content
                tw = np.array([c[4] for c in chunk], np.float64)
                cs = np.minimum(tw, wb) * idx.shape[1] / wb
                texts = self.runner.ctc.collapse_steps(idx.numpy(), conf.numpy(), space.numpy(), cs)
            for (p, li, crops, _, _), tx in zip(chunk, texts, strict=True):
                self.release_crop(crops)
                p.texts[li] = tx
                p.pending -= 1
                if p.pending == 0:
                    self.emit(p)
            drained = True
        return drained


def _done(result: Any) -> Future:
    fut: Future = Future()
    fut.set_result(result)
    return fut
