"""Engines in child processes behind one read_many (scheduling/engine_process.py): what a GPU
engine uses to run several driver processes on one GPU. On the CPU here, real engines in real
spawned processes: the same pages as one in-process engine, in input order, every page once,
on a second run of the same pool too; a PDF shared out page by page; a child killed mid-job has
its pages read by the other; the engine facade's wiring (children never start children)."""

from __future__ import annotations

import os
import signal

import pytest
from exitkit import ends_after
from jobkit import ENGINE_KW, mixed_inputs

from ocrforge.config import EngineConfig
from ocrforge.engine import OCR
from ocrforge.scheduling.engine_process import auto_gpu_processes, child_config, start_engines
from ocrforge.scheduling.multi_device import DevicePool

GiB = 2**30


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """16 one-page PNGs, a 6-page PDF in the middle and a corrupt file: 23 results."""
    return mixed_inputs(tmp_path_factory.mktemp("engproc"), 16, 6, pdf_at=5, bad_at=11,
                        words=("process page", "code"))


@pytest.fixture(scope="module")
def config():
    return EngineConfig().with_(**ENGINE_KW)


@pytest.fixture(scope="module")
def reference(inputs, config):
    return [_key(p) for p in OCR(config).read_many(inputs, batch_pages=1)]


@pytest.fixture(scope="module")
def pool(config):
    engines = start_engines(OCR, config, 2)
    p = DevicePool(engines)
    yield p
    p.close()


def _key(page) -> tuple:
    d = page.to_dict()
    d.pop("timings_ms", None)
    return page.source, page.page_index, page.error, repr(d)


def test_engine_processes_read_like_one_engine_twice(inputs, reference, pool):
    assert len(reference) == 16 + 6 + 1
    for _ in range(2):  # a second session of the same child processes
        got = [_key(p) for p in pool.read_many(inputs, batch_pages=1)]
        assert [g[:3] for g in got] == [r[:3] for r in reference]  # order, errors in place
        assert got == reference
    assert all(n > 0 for n in pool.pages_per_device), pool.pages_per_device
    assert [r[1] for r in reference[5:11]] == list(range(6))  # the PDF's pages keep their numbers


def test_a_killed_engine_process_has_its_pages_read_by_the_other(inputs, reference, config, capfd):
    engines = start_engines(OCR, config, 2)
    pool = DevicePool(engines)
    victim = engines[1]
    real = victim.read_many

    def die_after_2(items, **kw):
        for n, page in enumerate(real(items, **kw)):
            if n == 2:
                os.kill(victim.pid, signal.SIGKILL)
            yield page

    victim.read_many = die_after_2
    try:
        got = [_key(p) for p in pool.read_many(inputs, batch_pages=1)]
    finally:
        pool.close()
    assert got == reference
    assert "died" in capfd.readouterr().err


def test_the_engine_starts_its_gpu_processes_and_children_start_none(inputs, reference, config):
    child = child_config(config.with_(**{"gpu.processes": 3}), 3, 16)
    assert child.gpu.processes == 1  # a child engine reads in its own process
    assert child.gpu.post_processes >= 1 and child.gpu.layout_processes >= 1
    assert OCR(child).gpu_pool() is None
    eng = OCR(config.with_(**{"gpu.processes": 2}))
    try:
        gp = eng.gpu_pool()
        assert gp is not None and len(gp.engines) == 2 and gp is eng.gpu_pool()
        assert [_key(p) for p in gp.read_many(inputs, batch_pages=1)] == reference
    finally:
        eng.close()


@pytest.mark.parametrize(("cpus", "free", "want"), [
    (16, 139 * GiB, 3),  # the H200 and its 16-core host: the CPUs bound it
    (16, 7 * GiB, 1),  # an 8 GB card: one engine, in this process
    (2, 139 * GiB, 1),  # a small host cannot feed two
    (32, 300 * GiB, 4),  # never more than four
])
def test_gpu_processes_follow_memory_and_cpus(cpus, free, want):
    assert auto_gpu_processes(cpus, free) == want


def test_the_interpreter_ends_after_an_engine_process_died_with_inputs_queued():
    """Inputs the killed child never took stay in the queue's pipe; the parent must still
    exit (the queue's feeder thread is not joined at exit)."""
    ends_after("""
        import os, signal
        import numpy as np
        from jobkit import ENGINE_KW
        from ocrforge.config import EngineConfig
        from ocrforge.engine import OCR
        from ocrforge.scheduling.engine_process import start_engines

        (eng,) = start_engines(OCR, EngineConfig().with_(**ENGINE_KW), 1)
        big = np.full((2400, 1800, 3), 255, np.uint8)
        pages = eng.read_many(big for _ in range(12))
        next(pages)
        os.kill(eng.pid, signal.SIGKILL)
        try:
            list(pages)
            raise SystemExit("read on after its engine process died")
        except RuntimeError as e:
            assert "died" in str(e), e
        eng.close()
    """)
