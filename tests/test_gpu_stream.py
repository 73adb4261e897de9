"""The GPU scheduler fed as a stream (scheduling/gpu_stream.py, what `ocrforge serve
--gpu-pipeline` uses): pages submitted from several threads each come back to their own caller
and read as one run of the same scheduler reads them; a lone page is not held back. Runs on
the CPU (the scheduler's torch path), as the GPU parity tests do."""

from __future__ import annotations

import time

import httpx
import pytest
import torch
from serverkit import ServerProcess, in_threads, page_image, text_image
from test_core_paths import make_page

from ocrforge import OCR
from ocrforge.scheduling.gpu_stream import GpuStream


@pytest.fixture(scope="module")
def engine():
    torch.set_num_threads(2)
    return OCR(runtime="torch", device="cpu", det_limit_side=736)


def _texts(page) -> list[str]:
    return [ln.text for ln in page.lines]


def test_stream_pages_from_many_threads_read_like_one_run(engine):
    imgs = [make_page(i)[0] for i in range(6)]
    sch = engine.gpu_scheduler()
    ref = list(sch.run(imgs))
    stream = GpuStream(sch)
    got: dict = {}

    def client(k: int) -> None:
        for i in range(k, len(imgs), 3):
            got[i] = stream.submit(imgs[i]).result(timeout=600)

    in_threads(client, 3)
    # one page alone (nothing else queued): without the flush it waits for 63 more pages
    lone = stream.submit(imgs[2]).result(timeout=300)
    stream.close(60)
    assert [_texts(got[i]) for i in range(len(imgs))] == [_texts(p) for p in ref]
    assert sum(len(p.lines) for p in ref) > 100
    assert _texts(lone) == _texts(ref[2])
    with pytest.raises(RuntimeError, match="closed"):
        stream.submit(imgs[0])


def test_stream_gives_each_caller_its_page_in_whatever_order_pages_are_read():
    """The scheduler hands pages over as they are read, not in submission order (a slow page
    must not hold back other requests): each future still gets the page at its position."""
    from ocrforge.result import Page

    class Reversed:  # reads four pages, hands them over last first
        def run_as_read(self, items, options=None):
            got = []
            for it in items:
                if isinstance(it, str):
                    got.append(it)
                if len(got) == 4:
                    break
            for pos in reversed(range(4)):
                yield pos, Page([], 1, 1, source=got[pos])
            for _ in items:  # until closed
                pass

    stream = GpuStream(Reversed())
    futs = [stream.submit(f"page {k}") for k in range(4)]
    assert [f.result(timeout=30).source for f in futs] == [f"page {k}" for k in range(4)]
    stream.close(30)


def test_stream_with_layout_in_worker_processes_reads_like_one_run(engine):
    """Pages laid out in worker processes reach their callers when their worker is done."""
    imgs = [make_page(i)[0] for i in range(4)]
    ref = [_texts(p) for p in engine.gpu_scheduler().run(imgs)]
    eng = OCR(engine.config.with_(**{"gpu.layout_processes": 1}))
    sch = eng.gpu_scheduler()
    assert sch.layout_processes == 1
    stream = GpuStream(sch)
    futs = [stream.submit(im) for im in imgs]
    got = [f.result(timeout=600) for f in futs]
    stream.close(60)
    eng.close()
    assert [_texts(p) for p in got] == ref
    assert all(ln.words for p in got for ln in p.lines)


def test_a_failed_run_fails_its_waiting_pages_and_the_stream(engine, monkeypatch):
    sch = engine.gpu_scheduler()
    real = sch.run_as_read

    def failing_run(items, options=None):
        for k, got in enumerate(real(items, options)):
            if k == 1:
                raise RuntimeError("device lost")
            yield got

    monkeypatch.setattr(sch, "run_as_read", failing_run)
    stream = GpuStream(sch)
    img = make_page(3)[0]
    first, second = stream.submit(img), stream.submit(img)
    assert first.result(timeout=300).lines
    with pytest.raises(RuntimeError, match="device lost"):
        second.result(timeout=300)
    assert not stream.alive
    with pytest.raises(RuntimeError, match="closed"):
        stream.submit(img)


def test_server_gpu_pipeline_serves_concurrent_requests_like_the_engine(tmp_path, engine):
    pages = [text_image([f"Stream request {k} line {j}" for j in range(6)], width=1000) for k in range(4)]
    srv = ServerProcess("--runtime", "torch", "--gpu-pipeline", "--det-limit", "736", api_key=None,
                        log_dir=tmp_path)
    try:
        srv.wait_ready(timeout=300)
        assert httpx.get(srv.url + "/readyz").json()["gpu_stream"] == "on"
        out: dict = {}

        def request(k: int) -> None:
            r = httpx.post(srv.url + "/v1/ocr", files={"file": (f"p{k}.png", pages[k])}, timeout=300)
            out[k] = r

        in_threads(request, len(pages))
    finally:
        srv.stop()
    ref = list(engine.gpu_scheduler().run(pages))
    for k, r in out.items():
        assert r.status_code == 200, r.text
        (page,) = r.json()["pages"]
        assert [ln["text"] for ln in page["lines"]] == _texts(ref[k]), k
        assert f"Stream request {k} line 5" in r.json()["text"]
    assert "Traceback" not in srv.log()


def _upright_jpeg_stored_turned(lines: list[str]) -> bytes:
    """A JPEG whose pixels are turned a quarter and whose EXIF orientation (6) turns them
    back: the decode must apply it, wherever it runs."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(text_image(lines, width=1000))).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=92, exif=exif)
    return buf.getvalue()


@pytest.mark.parametrize("children", [1, 2])
def test_server_with_its_engine_in_child_processes_serves_like_the_engine(tmp_path, engine,
                                                                          children):
    """--engine-process [N]: the stream's engine runs in N child processes. Concurrent
    requests read as the engine here reads their pages decoded here: PNG and JPEG uploads (one
    with an EXIF turn) go to the child undecoded, a TIFF decoded. A PNG whose header reads but
    whose pixels do not is its own request's 400, named, from the child's decode; a broken
    header is decoded (and refused) here. The children end with the server."""
    import psutil

    def lines(k: int) -> list[str]:
        return [f"Child request {k} line {j}" for j in range(5)]

    uploads = [("p0.png", text_image(lines(0), width=1000)),
               ("p1.jpg", text_image(lines(1), width=1000, fmt="JPEG")),
               ("p2.jpg", _upright_jpeg_stored_turned(lines(2))),
               ("p3.tif", text_image(lines(3), width=1000, fmt="TIFF"))]
    good = text_image(lines(4), width=1000)
    flag = ["--engine-process"] + ([str(children)] if children > 1 else [])
    srv = ServerProcess("--runtime", "torch", "--gpu-pipeline", *flag, "--det-limit", "736",
                        api_key=None, log_dir=tmp_path)
    try:
        srv.wait_ready(timeout=400)
        ready = httpx.get(srv.url + "/readyz").json()
        assert (ready["engine_process"], ready["engine_processes"]) == ("on", str(children))
        children_now = psutil.Process(srv.proc.pid).children()
        assert sum("spawn_main" in " ".join(c.cmdline()) for c in children_now) == children
        out: dict = {}

        def request(k: int) -> None:
            out[k] = httpx.post(srv.url + "/v1/ocr", files={"file": uploads[k]}, timeout=300)

        in_threads(request, len(uploads))
        bad = httpx.post(srv.url + "/v1/ocr", files={"file": ("bad.png", b"\x89PNG broken")},
                         timeout=60)
        cut = httpx.post(srv.url + "/v1/ocr", files={"file": ("cut.png", good[:len(good) // 2])},
                         timeout=60)
    finally:
        srv.stop()
    ref = list(engine.gpu_scheduler().run([next(iter(engine.decode(b))).image for _, b in uploads]))
    for k, r in out.items():
        assert r.status_code == 200, r.text
        (page,) = r.json()["pages"]
        assert [ln["text"] for ln in page["lines"]] == _texts(ref[k]), k
        assert f"Child request {k} line 3" in r.json()["text"], k
    assert 400 <= bad.status_code < 500 and "bad.png" in bad.text
    # pixels the parent never decoded: nothing spent decoding there (Server-Timing)
    assert ["decode;dur=0.0" in out[k].headers["server-timing"] for k in range(4)] == [
        True, True, True, False]
    assert (cut.status_code, cut.json()["error"]["kind"]) == (400, "corrupt_input"), cut.text
    assert cut.json()["error"]["message"].startswith("cut.png: "), cut.text
    assert "Traceback" not in srv.log()
    for c in children_now:
        assert not c.is_running() or c.status() == psutil.STATUS_ZOMBIE


def test_a_server_whose_engine_child_dies_starts_another_and_still_exits(tmp_path, engine):
    """--engine-process: pages sent to a child that is killed fail their own requests, the
    next request starts a new child and reads as the engine here, and the server still ends
    by itself on SIGTERM (uvicorn re-raises it: -15), not killed after the wait (-9)."""
    import os
    import signal

    import psutil

    big = text_image([f"Child killed here {j}" for j in range(40)], width=3000)
    page = text_image([f"After the child died line {j}" for j in range(4)], width=1000)
    srv = ServerProcess("--runtime", "torch", "--gpu-pipeline", "--engine-process", "--det-limit",
                        "736", api_key=None, log_dir=tmp_path)
    try:
        srv.wait_ready(timeout=400)
        (child,) = [c for c in psutil.Process(srv.proc.pid).children()
                    if "spawn_main" in " ".join(c.cmdline())]
        out: dict = {}

        def request(k: int) -> None:
            if k == 0:
                time.sleep(1.0)
                os.kill(child.pid, signal.SIGKILL)
                return
            out[k] = httpx.post(srv.url + "/v1/ocr", files={"file": (f"big{k}.png", big)},
                                timeout=300)

        in_threads(request, 7)
        after = httpx.post(srv.url + "/v1/ocr", files={"file": ("after.png", page)}, timeout=300)
    finally:
        rc = srv.stop(timeout=60)
    assert all(r.status_code in (200, 500, 503) for r in out.values()), [r.text for r in out.values()]
    assert after.status_code == 200, after.text
    (got,) = after.json()["pages"]
    assert [ln["text"] for ln in got["lines"]] == _texts(next(engine.gpu_scheduler().run([page])))
    assert rc in (0, -signal.SIGTERM), (rc, srv.log()[-3000:])
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_server_streams_to_the_gpu_scheduler_by_default_on_cuda_only():
    """`ocrforge serve --device cuda` feeds the GPU scheduler (measured faster on a GPU);
    torch on the CPU and ONNX Runtime keep batches through ocr_images unless asked."""
    from types import SimpleNamespace

    from ocrforge.config import EngineConfig
    from ocrforge.server.batcher import streams_to_gpu

    def eng(**kw):
        return SimpleNamespace(config=EngineConfig(**kw))

    cuda, cpu = eng(runtime="torch", device="cuda"), eng(runtime="torch", device="cpu")
    assert streams_to_gpu(cuda, None) and not streams_to_gpu(cpu, None)
    assert streams_to_gpu(cpu, True) and not streams_to_gpu(cuda, False)
    assert not streams_to_gpu(eng(runtime="onnxruntime"), True)


@pytest.mark.parametrize("budget", [30.0, 0.0])
def test_a_gpu_server_captures_the_common_shapes_before_it_says_ready(engine, monkeypatch, budget):
    """A fresh GPU server's first requests each waited for a new shape's first run and capture
    (64 one at a time right after start: p95 5.4 s, H100, 2026-12-07). Before ready it now
    captures the scheduler's warm-up plan (server.warmup_s; 0: only the warm-up page's shapes).
    Graphs need CUDA: the runtime's capture stands in and says which shapes lack a graph."""
    from ocrforge.runtimes.torch import TorchRuntime
    from ocrforge.server.service import ServiceState, load_engines
    from ocrforge.server.settings import ServerSettings

    taken: list[tuple] = []
    monkeypatch.setattr(TorchRuntime, "warmup",
                        lambda self, shapes, post=None: taken.extend(
                            (self.label, tuple(s)) for s in shapes) or 0.0)
    # only the warm-up asks for the whole graph budget; the driver's idle guesses see none
    monkeypatch.setattr(TorchRuntime, "needs_graph",
                        lambda self, shape, post=None, share=0.5: share == 1.0)
    state = ServiceState(ServerSettings(engine=engine.config, gpu_pipeline=True, warmup_s=budget))
    load_engines(state)
    try:
        assert state.ready, state.load_error
        gp = state.batcher.engines[0].gpu_scheduler(engine.config.det.limit_side)
        steps = bool(engine.config.layout.enabled and engine.config.layout.words)
        plan = [(rt.label, sh) for rt, sh, _ in gp.warmup_plan(steps)]
        assert taken == (plan if budget else [])
        assert state.info["warmup_shapes"] == str(len(taken))  # /readyz and /v1/info say so
    finally:
        state.batcher.stop(timeout=60)


def test_a_failing_capture_of_the_common_shapes_leaves_the_server_ready(engine, monkeypatch):
    """Capturing ahead is an optimisation: if a capture fails (say, out of device memory on a
    small card), the server logs it and says ready; pages capture their shapes as they come."""
    from ocrforge.runtimes.torch import TorchRuntime
    from ocrforge.server.service import ServiceState, load_engines
    from ocrforge.server.settings import ServerSettings

    def warmup(self, shapes, post=None):
        raise torch.OutOfMemoryError("CUDA out of memory (test)")

    monkeypatch.setattr(TorchRuntime, "warmup", warmup)
    monkeypatch.setattr(TorchRuntime, "needs_graph",
                        lambda self, shape, post=None, share=0.5: share == 1.0)
    state = ServiceState(ServerSettings(engine=engine.config, gpu_pipeline=True, warmup_s=30.0))
    load_engines(state)
    try:
        assert state.ready and state.load_error is None
        assert state.info["warmup_shapes"] == "0"
    finally:
        state.batcher.stop(timeout=60)


def _streaming_batcher(engine, **kw):
    from ocrforge.server.admission import Admission
    from ocrforge.server.batcher import Batcher

    adm = Admission(max_pages=100, engines=1, safety=1.0, unit_s=1e-6)  # admits anything
    return Batcher([engine], admission=adm, gpu_pipeline=True, **kw)


async def _request(b, page):
    """One one-page request through the batcher, as the server's upload handler makes it."""
    job = b.open(b.default_key(), b.admit([0.3], time_left_s=60))
    await b.acquire_slot()
    b.put(job, page)
    b.finish(job)
    try:
        return await job.future
    finally:
        job.reservation.release()


def test_a_bad_page_in_a_streamed_batch_fails_only_its_own_request(engine):
    """Pages of several requests share a batch on their way to the GPU stream. A page the
    scheduler cannot read failed every request of its batch (run_stream raised for the batch):
    now only its own request gets the error, naming the input."""
    import asyncio

    from ocrforge.io.inputs import PageImage

    batches: list[tuple[int, int]] = []
    b = _streaming_batcher(engine, max_batch_pages=8, max_batch_ms=1e9,
                           on_batch=lambda pages, requests, dt: batches.append((pages, requests)))

    async def main():
        reqs = [asyncio.ensure_future(_request(b, page_image("Good request", 480, "good.png"))),
                asyncio.ensure_future(_request(b, PageImage("broken.png", 0, b"not an image")))]
        while b.queued_pages < 2:  # both queued before the worker starts: one batch
            await asyncio.sleep(0.01)
        b.start()
        return await asyncio.gather(*reqs, return_exceptions=True)

    try:
        ok, bad = asyncio.run(main())
    finally:
        b.stop(60)
    assert not isinstance(ok, BaseException), ok
    assert "".join(ok[0].text.split()) == "Goodrequest"
    assert isinstance(bad, RuntimeError) and "broken.png" in str(bad)
    assert batches == [(2, 2)]  # they did share a batch


def test_a_streamed_batch_does_not_hold_its_worker_until_its_pages_are_read(engine, monkeypatch):
    """The GPU stream batches across everything in flight; a batch worker that waited for its
    batch's pages kept at most workers x batch pages in the scheduler (48 of 64 concurrent
    requests, H100 2026-12-07) and held each page until the slowest of its batch was read.
    With one worker and a stream that has read nothing yet, a later request still reaches the
    stream, and is answered as soon as its own page is read."""
    import asyncio
    from concurrent.futures import Future

    from ocrforge.result import Page

    submitted: list[tuple[object, Future]] = []

    class HeldStream:  # stands in for GpuStream: pages are read when the test says so
        alive = True

        def submit(self, image):
            fut: Future = Future()
            submitted.append((image, fut))
            return fut

    b = _streaming_batcher(engine, max_batch_pages=8, max_wait_ms=0)
    b.stream_workers = 1
    monkeypatch.setattr(b, "_stream", lambda eng, det_limit: HeldStream())
    b.start()

    async def main():
        first = asyncio.ensure_future(_request(b, page_image("first")))
        for _ in range(200):
            if submitted:
                break
            await asyncio.sleep(0.01)
        second = asyncio.ensure_future(_request(b, page_image("second")))
        for _ in range(200):
            if len(submitted) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(submitted) == 2, "the second request did not reach the stream"
        submitted[1][1].set_result(Page([], 10, 10, source="x"))
        got = await asyncio.wait_for(second, 10)
        assert not first.done()
        submitted[0][1].set_result(Page([], 10, 10, source="y"))
        return await asyncio.wait_for(first, 10), got

    try:
        first, second = asyncio.run(main())
    finally:
        b.stop(30)
    assert first[0].source == "first" and second[0].source == "second"
