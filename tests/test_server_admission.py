"""Admission by work (issue 14 items 6-7, issue 9 item 6): the accounting itself, then real
`ocrforge serve` processes under concurrent multi-page PDFs and a 200-request burst."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image, ImageDraw
from serverkit import ServerProcess, page_image, text_image

from ocrforge.server.admission import Admission, Overloaded, page_units


# ------------------------------------------------------------------ accounting (no server)
def test_admission_refuses_work_that_cannot_finish_in_time_and_computes_retry_after():
    adm = Admission(max_pages=1000, engines=1, safety=1.0, unit_s=1.0)  # 1 s per unit
    first = adm.admit([2.0], time_left_s=10)  # empty server: always admitted
    adm.admit([3.0], time_left_s=10)  # all work, 2 + 3 s, fits both deadlines
    with pytest.raises(Overloaded) as ei:
        adm.admit([6.0], time_left_s=10)  # 5 + 6 s > 10 s
    assert 1 <= ei.value.retry_after <= 5  # at most until the 5 s queued now have drained
    assert "retry after" in str(ei.value)
    first.release()
    adm.admit([6.0], time_left_s=10)  # 3 + 6 <= 10 now
    assert adm.pending_pages == 2 and adm.pending_units == pytest.approx(9.0)


def test_a_request_is_not_admitted_if_an_earlier_one_would_miss_its_deadline():
    adm = Admission(max_pages=1000, engines=1, safety=1.0, unit_s=1.0)
    adm.admit([4.0], time_left_s=5)  # 1 s of slack
    with pytest.raises(Overloaded):
        adm.admit([2.0], time_left_s=60)  # would fit its own 60 s, but not the first's 5 s
    adm.admit([0.5], time_left_s=60)  # fits within the first's slack


def test_retry_after_grows_with_the_queue_and_engines_drain_faster():
    waits = []
    for queued in (10, 20, 80):
        adm = Admission(max_pages=1000, engines=1, safety=0.8, unit_s=0.5)
        adm.admit([1.0] * queued, time_left_s=1e9)
        with pytest.raises(Overloaded) as ei:
            adm.admit([1.0], time_left_s=4)
        waits.append(ei.value.retry_after)
    assert waits[0] < waits[1] < waits[2], waits
    two = Admission(max_pages=1000, engines=2, safety=0.8, unit_s=0.5)
    two.admit([1.0] * 80, time_left_s=1e9)
    with pytest.raises(Overloaded) as ei:
        two.admit([1.0], time_left_s=4)
    assert ei.value.retry_after < waits[2]


def test_page_limit_and_measured_speed():
    adm = Admission(max_pages=10, engines=1, safety=1.0, unit_s=0.01)
    r = adm.admit([0.2] * 8, time_left_s=60)
    with pytest.raises(Overloaded, match="limit of 10"):
        adm.admit([0.2] * 3, time_left_s=60)
    for i in range(3):
        r.page_done(i)
    r.page_done(0)  # given back once only
    assert adm.pending_pages == 5
    adm.admit([0.2] * 3, time_left_s=60)
    for _ in range(30):  # the engine turns out 100x slower than assumed
        adm.observe(units=1.0, seconds=1.0)
    assert adm.unit_s == pytest.approx(1.0, rel=0.01)
    with pytest.raises(Overloaded):
        adm.admit([0.2], time_left_s=1)


def test_page_units_follow_the_detection_resize():
    from ocrforge.stages.detect import resize_shape

    def units(w: int, h: int, limit: int) -> float:
        return page_units(w, h, resize_shape(h, w, limit, "max", 736, 1.6))

    small = units(240, 104, 2048)
    a4 = units(1700, 2200, 2048)
    a4_640 = units(1700, 2200, 640)
    assert small < a4_640 < a4
    assert a4 == pytest.approx(0.05 + 1582 * 2048 / 1e6 + 0.7 * (1700 * 2200 / 1e6) ** 0.5, rel=0.02)


# ------------------------------------------------------------------ real servers
def vm_peak_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def big_page_pdf(n_pages: int) -> bytes:
    """Letter-size pages (1700x2200 px at 200 dpi: 11 MB each decoded), nearly blank so that
    reading them is cheap; a few KB per page as a file."""
    imgs = []
    for i in range(n_pages):
        img = Image.new("L", (850, 1100), 255)
        ImageDraw.Draw(img).rectangle((60, 80, 60 + 10 * (i + 1), 90), fill=0)
        imgs.append(img)
    buf = io.BytesIO()
    imgs[0].save(buf, "PDF", save_all=True, append_images=imgs[1:], resolution=100)
    return buf.getvalue()


def _post_all(url: str, uploads: list[tuple[str, bytes]], timeout: float = 120
              ) -> list[httpx.Response]:
    """Every upload at once (one connection each), as fast as the client can send them."""
    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=len(uploads), max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as c:
            return await asyncio.gather(*(c.post(url + "/v1/ocr", files={"file": u})
                                          for u in uploads))
    return asyncio.run(run())


@pytest.fixture(scope="module")
def pdf_server(tmp_path_factory):
    # a long timeout: on a slow machine the PDFs must still be admitted, not refused as too much
    # work; det_limit 320 keeps reading the big pages cheap
    srv = ServerProcess("--det-limit", "320", "--max-pdf-pages", "50", "--timeout", "600",
                        api_key=None, log_dir=tmp_path_factory.mktemp("pdfsrv"))
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_concurrent_multipage_pdfs_keep_memory_bounded(pdf_server):
    """Issue 14 item 6: six concurrent multi-page PDFs used to be decoded whole (1.3 GB of pages
    here) before any page was read; now pages are decoded as page slots free up."""
    n_pages = 12
    pdfs = [(f"doc{k}.pdf", big_page_pdf(n_pages)) for k in range(6)]
    pid = pdf_server.proc.pid
    base = vm_peak_mb(pid)
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(vm_peak_mb(pid))
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    t.start()
    try:
        rs = _post_all(pdf_server.url, pdfs)
    finally:
        stop.set()
        t.join()
    growth = max(samples + [vm_peak_mb(pid)]) - base
    codes = [r.status_code for r in rs]
    # 6 x 12 pages x 11 MB = 800 MB if decoded at once; page slots hold 16 pages (180 MB)
    assert growth < 400, f"peak RSS grew by {growth:.0f} MB (codes {codes})"
    assert set(codes) <= {200, 429}, [r.text[:200] for r in rs if r.status_code not in (200, 429)]
    assert codes.count(200) >= 1, codes
    for (name, _), r in zip(pdfs, rs, strict=True):
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1
            continue
        body = r.json()
        assert [p["page"] for p in body["pages"]] == list(range(n_pages))
        assert all(p["source"] == name for p in body["pages"])
        assert 0 < body["timings_ms"]["first_page"] < body["timings_ms"]["total"]


def test_burst_of_200_requests_admits_only_what_finishes_in_time(tmp_path):
    """Issue 14 item 7: with default settings (a short timeout to keep the test quick) a burst
    of 200 requests gets 200 or 429 with a computed Retry-After; no admitted request times out."""
    srv = ServerProcess("--timeout", "6", api_key=None, log_dir=tmp_path)
    try:
        srv.wait_ready()
        png = text_image(["Burst 42"], width=320)
        rs = _post_all(srv.url, [(f"b{i}.png", png) for i in range(200)])
        metrics = httpx.get(srv.url + "/metrics").text
    finally:
        srv.stop()
    codes = [r.status_code for r in rs]
    assert codes.count(504) == 0, codes
    assert set(codes) <= {200, 429}, sorted(set(codes))
    assert codes.count(200) >= 1, codes
    waits = [int(r.headers["retry-after"]) for r in rs if r.status_code == 429]
    assert all(w >= 1 for w in waits)
    for r in rs:
        if r.status_code == 200:
            assert "".join(r.json()["text"].split()).upper() == "BURST42"
        elif r.status_code == 429:
            assert r.json()["error"]["kind"] == "overloaded"
    assert "ocrforge_work_unit_seconds" in metrics


def test_work_over_the_timeout_alone_is_refused_at_once():
    from ocrforge.server.admission import TooMuchWork

    adm = Admission(max_pages=1000, engines=1, safety=0.8, unit_s=1.0)
    with pytest.raises(TooMuchWork, match="50 page"):
        adm.admit([2.0] * 50, time_left_s=60)  # 100 s of work, 60 s of timeout
    adm.admit([1.0] * 50, time_left_s=60)  # 50 s: over the margin, but the server is empty


# ------------------------------------------------------------------ batcher with a real engine

def test_batcher_streams_pages_through_bounded_slots_and_cancels_cleanly(engine):
    from ocrforge.server.batcher import Batcher

    adm = Admission(max_pages=100, engines=1, safety=1.0, unit_s=1e-6)  # admits anything
    b = Batcher([engine], max_batch_pages=2, max_wait_ms=5, admission=adm, max_decoded_pages=3)
    b.start()
    key = b.default_key()
    peak = [0]

    async def stream(n: int, tag: str, deadline: float | None = None) -> list:
        job = b.open(key, b.admit([0.3] * n, time_left_s=60))
        try:
            async with asyncio.timeout(deadline):
                for i in range(n):
                    await b.acquire_slot()
                    peak[0] = max(peak[0], b.decoded_pages)
                    b.put(job, page_image(f"{tag} {i}"))
                b.finish(job)
                return await job.future
        except TimeoutError:
            b.cancel(job)
            raise
        finally:
            job.reservation.release()

    async def main() -> None:
        pages = await stream(7, "Page")
        assert ["".join(p.text.split()) for p in pages] == [f"Page{i}" for i in range(7)]
        with pytest.raises(TimeoutError):  # a deadline passes with pages still queued
            await stream(7, "Late", deadline=0.05)
        for _ in range(200):  # the batch already running finishes; the rest was dropped
            if b.decoded_pages == 0:
                break
            await asyncio.sleep(0.05)
        assert b.queued_pages == 0 and b.decoded_pages == 0
        assert adm.pending_pages == 0 and adm.pending_units == 0
        again = await stream(2, "Again")  # slots were all given back
        assert [p.text for p in again] == ["Again 0", "Again 1"]

    try:
        asyncio.run(main())
    finally:
        b.stop(30)
    assert peak[0] <= 3


def test_batcher_serves_a_one_page_request_before_the_rest_of_a_long_one(engine):
    """Fair batches: a one-page request queued after a 6-page PDF goes out in the next batch,
    not after all six pages (first-page latency behind multi-page uploads)."""
    from ocrforge.server.batcher import Batcher

    adm = Admission(max_pages=100, engines=1, safety=1.0, unit_s=1e-6)
    b = Batcher([engine], max_batch_pages=2, max_wait_ms=500, max_batch_ms=1e9, admission=adm,
                max_decoded_pages=16)
    b.start()
    key = b.default_key()

    async def main() -> tuple[str, int, int]:
        long = b.open(key, b.admit([0.3] * 6, time_left_s=60))
        short = b.open(key, b.admit([0.3], time_left_s=60))
        for i in range(6):
            await b.acquire_slot()
            b.put(long, page_image(f"Long {i}"))
        await b.acquire_slot()
        b.put(short, page_image("Short"))
        b.finish(long)
        b.finish(short)
        done, _ = await asyncio.wait([long.future, short.future],
                                     return_when=asyncio.FIRST_COMPLETED)
        first = "short" if short.future in done else "long"
        await asyncio.gather(long.future, short.future)
        return first, short.batch_pages, long.batch_pages

    try:
        first, short_batch, long_batch = asyncio.run(main())
    finally:
        b.stop(30)
    assert first == "short"
    assert short_batch <= 2 and long_batch <= 2


def test_upload_bytes_held_at_once_are_bounded(ocr_server):
    """Nothing a client sends grows server memory without bound: with --max-inflight-mb 2 and
    1 MiB uploads, at most two ~0.9 MB uploads are held; the rest get 429 before being read."""
    import numpy as np

    noise = np.random.default_rng(0).integers(0, 256, (540, 560, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(noise).save(buf, "PNG")
    data = buf.getvalue()
    assert 0.8e6 < len(data) < 1024 * 1024
    headers = ocr_server.headers()

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120, headers=headers) as c:
            return await asyncio.gather(*(c.post(ocr_server.url + "/v1/ocr",
                                                 files={"file": (f"n{i}.png", data)})
                                          for i in range(6)))

    rs = asyncio.run(run())
    codes = [r.status_code for r in rs]
    assert set(codes) <= {200, 429}, codes
    held = [r for r in rs if r.status_code == 429 and "uploads in flight" in r.text]
    assert held, [r.text[:120] for r in rs]
    assert all(int(r.headers["retry-after"]) >= 1 for r in held)
    assert codes.count(200) >= 1
