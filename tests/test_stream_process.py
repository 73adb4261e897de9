"""The GPU stream with its engine in a child process (scheduling/stream_process.py, what
`ocrforge serve --engine-process` feeds): pages from several threads read as the same
scheduler reads them in this process, a bad page fails only its own caller, and a child that
dies fails every waiting caller instead of leaving them waiting. On the CPU (the scheduler's
torch path), as the GPU stream's own tests."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch
from exitkit import ends_after
from serverkit import in_threads
from test_core_paths import make_page

from ocrforge import OCR
from ocrforge.config import EngineConfig, ReadOptions
from ocrforge.scheduling.stream_process import ProcessStream
from ocrforge.scheduling.stream_set import StreamSet

CFG = EngineConfig().with_(runtime="torch", device="cpu", det_limit_side=736,
                           **{"runtime.intra_op_threads": 1})
OPTS = ReadOptions(det_limit_side=736)


@pytest.fixture(scope="module")
def engine():
    torch.set_num_threads(2)
    return OCR(CFG)


def _texts(page) -> list[str]:
    return [ln.text for ln in page.lines]


def test_process_stream_reads_pages_from_many_threads_like_the_scheduler_here(engine):
    imgs = [make_page(i)[0] for i in range(6)]
    ref = list(engine.gpu_scheduler(736).run(imgs, OPTS))
    stream = ProcessStream(OCR, CFG, 736, OPTS, warm_page=imgs[0])
    try:
        assert stream.wait_ready(600)["pid"] == stream.pid != os.getpid()
        got: dict = {}

        def client(k: int) -> None:
            for i in range(k, len(imgs), 3):
                got[i] = stream.submit(imgs[i]).result(timeout=600)

        in_threads(client, 3)
        bad = stream.submit(b"not an image")
        again = stream.submit(imgs[1]).result(timeout=300)  # a lone page, after the bad one
        assert bad.result(timeout=300).error  # its own page says why; nothing else failed
    finally:
        stream.close(120)
    assert [_texts(got[i]) for i in range(len(imgs))] == [_texts(p) for p in ref]
    assert sum(len(p.lines) for p in ref) > 100
    assert _texts(again) == _texts(ref[1])
    assert not stream.alive
    with pytest.raises(RuntimeError, match="closed"):
        stream.submit(imgs[0])


def test_a_set_of_two_child_streams_reads_like_the_scheduler_and_uses_both(engine):
    """--engine-process 2: pages from several threads go to the child with the fewest pages in
    hand; every page reads as the scheduler here reads it, and both children read some."""
    imgs = [make_page(i)[0] for i in range(6)]
    ref = list(engine.gpu_scheduler(736).run(imgs, OPTS))
    streams = [ProcessStream(OCR, CFG, 736, OPTS, name=f"t-{k}") for k in range(2)]
    for st in streams:
        st.wait_ready(600)
    both = StreamSet(streams)
    try:
        got: dict = {}

        def client(k: int) -> None:
            for i in range(k, len(imgs), 3):
                got[i] = both.submit(imgs[i]).result(timeout=600)

        in_threads(client, 3)
        assert both.alive and both.pending == 0
    finally:
        both.close(120)
    assert [_texts(got[i]) for i in range(len(imgs))] == [_texts(p) for p in ref]
    assert sum(both.submitted) == len(imgs) and min(both.submitted) > 0, both.submitted
    assert len(set(both.info["pids"])) == 2
    assert not both.alive


def test_a_process_stream_whose_child_dies_fails_its_waiting_pages():
    stream = ProcessStream(OCR, CFG, 736, OPTS)
    try:
        stream.wait_ready(600)
        big = np.full((2400, 1800, 3), 255, np.uint8)
        waiting = [stream.submit(big) for _ in range(4)]
        os.kill(stream.pid, signal.SIGKILL)
        for fut in waiting:
            with pytest.raises(RuntimeError, match="died"):
                fut.result(timeout=60)
        assert not stream.alive
        with pytest.raises(RuntimeError, match="died"):
            stream.submit(big)
    finally:
        stream.close(10)


def _no_engine(cfg: EngineConfig) -> OCR:
    raise FileNotFoundError("det.onnx is missing")


def test_a_process_stream_that_cannot_start_says_why():
    stream = ProcessStream(_no_engine, CFG, 736, OPTS)
    with pytest.raises(RuntimeError, match="did not start.*det.onnx is missing"):
        stream.wait_ready(300)
    assert not stream.alive


def test_the_interpreter_ends_after_a_process_stream_whose_child_died_with_pages_queued():
    """The pages the killed child never took stay in the queue's pipe; the parent must still
    exit (CI hung here for 90 minutes: the queue's feeder thread was joined at exit)."""
    ends_after("""
        import os, signal
        import numpy as np
        from test_stream_process import CFG, OPTS
        from ocrforge import OCR
        from ocrforge.scheduling.stream_process import ProcessStream

        stream = ProcessStream(OCR, CFG, 736, OPTS)
        stream.wait_ready(600)
        big = np.full((2400, 1800, 3), 255, np.uint8)
        waiting = [stream.submit(big) for _ in range(4)]
        os.kill(stream.pid, signal.SIGKILL)
        assert all(f.exception(timeout=60) for f in waiting)
        stream.close(10)
    """)
