"""read_many through several engine processes (scheduling/processes.py) reads what one process
reads, in input order, with bad inputs as error pages; the automatic process count follows the
CPUs and the memory."""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import pytest
from test_core_paths import make_page

from ocrforge import OCR
from ocrforge.scheduling.processes import PROCESS_MEMORY, auto_processes


def test_auto_processes_follows_cpus_and_memory() -> None:
    plenty = 64 * PROCESS_MEMORY
    assert auto_processes(2, 2, plenty) == 1  # the 2-core machine keeps one process
    assert auto_processes(3, 2, plenty) == 1
    assert auto_processes(4, 2, plenty) == 2
    assert auto_processes(16, 2, plenty) == 8
    assert auto_processes(16, 4, plenty) == 4
    assert auto_processes(16, 2, 3 * PROCESS_MEMORY) == 3  # memory caps it
    assert auto_processes(16, 2, 0) == 1


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> list:
    d = tmp_path_factory.mktemp("procs")
    items: list = []
    for i in range(5):
        img, _ = make_page(100 + i)
        if i == 2:
            items.append(str(d / "missing.png"))  # a bad input keeps its place
        if i == 3:
            ok, buf = cv2.imencode(".png", img)
            items.append(memoryview(buf.tobytes()))  # cannot be pickled: read in the parent
            continue
        p = d / f"page{i}.png"
        cv2.imwrite(str(p), img)
        items.append(str(p) if i % 2 == 0 else Path(p))
    items.append(make_page(200)[0])  # a numpy array
    return items


def test_processes_read_what_one_process_reads(inputs: list) -> None:
    one = OCR(**{"pipeline.processes": 1})
    ref = [p.to_dict() for p in one.read_many(_fresh(inputs))]
    many = OCR(**{"pipeline.processes": 2})
    try:
        assert many.process_pool() is not None and many.process_pool().processes == 2
        for _ in range(2):  # the pool is kept and reused
            got = [p.to_dict() for p in many.read_many(_fresh(inputs))]
            assert [g["source"] for g in got] == [r["source"] for r in ref]
            assert [g.get("error") for g in got] == [r.get("error") for r in ref]
            assert [g["text"] for g in got] == [r["text"] for r in ref]
        assert got[2]["error"] and "missing.png" in got[2]["source"]
        # closing a run early leaves the pool usable
        gen = many.read_many(_fresh(inputs))
        next(gen)
        gen.close()
        again = [p.text for p in many.read_many(_fresh(inputs)[:2])]
        assert again == [r["text"] for r in ref[:2]]
    finally:
        many.close()


def _fresh(items: list) -> list:
    return list(items)


def test_one_cpu_engine_has_no_pool() -> None:
    eng = OCR(**{"pipeline.processes": 1})
    assert eng.process_pool() is None


@pytest.fixture(scope="module")
def long_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from PIL import Image

    d = tmp_path_factory.mktemp("longpdf")
    pages = [Image.fromarray(make_page(300 + i)[0][:, :, ::-1]) for i in range(5)]
    pdf = d / "long.pdf"
    pages[0].save(pdf, save_all=True, append_images=pages[1:], resolution=100)
    return pdf


def test_a_long_pdf_is_shared_out_in_slices_and_reads_as_one_process_does(long_pdf: Path,
                                                                        tmp_path: Path) -> None:
    """One big PDF uses every engine process (slices of pages), pages in order, numbered as in
    the file, text as one process reads it; the engine's page range applies inside slices."""
    from ocrforge.config import LimitsConfig
    from ocrforge.io.inputs import PageSlice
    from ocrforge.scheduling.processes import pdf_slices

    slices = pdf_slices(str(long_pdf), LimitsConfig(), 2)
    assert slices == [PageSlice(str(long_pdf), 0, 1), PageSlice(str(long_pdf), 2, 3),
                      PageSlice(str(long_pdf), 4, 4)]
    assert pdf_slices(str(long_pdf), LimitsConfig(max_pdf_pages=4), 2) == [str(long_pdf)]
    assert pdf_slices(str(long_pdf), LimitsConfig(pages="2-4"), 2) == [str(long_pdf)]  # 3 pages
    picked = pdf_slices(str(long_pdf), LimitsConfig(pages="1,3-5"), 2)
    assert picked == [PageSlice(str(long_pdf), 0, 2), PageSlice(str(long_pdf), 3, 4)]
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4 broken")
    assert pdf_slices(str(bad), LimitsConfig(), 2) == [str(bad)]

    items = [str(long_pdf), str(bad)]
    for extra in ({}, {"limits.pages": "1,3-5"}):
        one = OCR(**{"pipeline.processes": 1, **extra})
        ref = [(p.source, p.page_index, p.text, bool(p.error)) for p in one.read_many(items)]
        many = OCR(**{"pipeline.processes": 2, **extra})
        try:
            got = [(p.source, p.page_index, p.text, bool(p.error)) for p in many.read_many(items)]
        finally:
            many.close()
        assert got == ref
    assert [r[1] for r in ref[:-1]] == [0, 2, 3, 4] and ref[-1][3]


def _thread_cpus(pid: int) -> set[str]:
    out = set()
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for row in status.read_text().splitlines():
            if row.startswith("Cpus_allowed_list"):
                out.add(row.split(":")[1].strip())
    return out


@pytest.mark.skipif(not Path("/proc/self/task").is_dir() or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and 2 CPUs")
def test_engine_processes_run_on_cpus_of_their_own(inputs: list) -> None:
    """Workers that share every CPU let OpenVINO pin all their threads to the same first cores;
    each worker gets its own CPUs when they fit."""
    many = OCR(**{"pipeline.processes": 2, "pipeline.process_threads": 1})
    try:
        assert len(list(many.read_many(_fresh(inputs)[:2]))) == 2
        cpus = [_thread_cpus(pid) for pid in many.process_pool()._procs]
        assert all(len(c) == 1 for c in cpus), cpus  # every thread of a worker on one CPU set
        assert cpus[0] != cpus[1], cpus
    finally:
        many.close()
