"""One engine per device on a real GPU: two torch engines on cuda:0 behind one shared page
queue (the layout of two GPUs, on one). Marked gpu; skipped without CUDA.

    python -m pytest -q -m gpu tests/test_multi_device_gpu.py
"""

from __future__ import annotations

import io

import pytest
from conftest import render_lines

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'ocrforge[torch]')")
pytest.importorskip("onnx", reason="the onnx package is needed to import ONNX weights")

from ocrforge.engine import OCR, on_devices  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = {"runtime": "torch", "det_limit_side": 960, "gpu.processes": 1}  # engines in this process


@pytest.fixture(scope="module")
def items():
    """40 pages of 4 lines (numpy, PNG and JPEG bytes mixed: the GPU's JPEG decoder is used on
    the JPEGs), a 3-page PDF and a corrupt input."""
    import numpy as np

    out: list = []
    for i in range(40):
        img = render_lines([f"Invoice {i:04d} total {i * 37 % 1000}.50", f"第 {i} 页 光学字符识别",
                            f"line three {i * 7}", "ocrforge two engines"], size=26).image
        if i % 3 == 0:
            out.append(np.ascontiguousarray(np.asarray(img)[:, :, ::-1]))
        else:
            buf = io.BytesIO()
            img.save(buf, format="JPEG" if i % 3 == 1 else "PNG", quality=95)
            out.append(buf.getvalue())
    pages = [render_lines([f"pdf page {k + 1}", "two devices"], size=26).image for k in range(3)]
    buf = io.BytesIO()
    pages[0].save(buf, format="PDF", save_all=True, append_images=pages[1:], resolution=72)
    return out[:20] + [buf.getvalue(), b"not an image"] + out[20:]


def _text(pages) -> list[tuple]:
    return [(p.page_index, p.error, [ln.text for ln in p.lines]) for p in pages]


def test_two_engines_on_one_gpu_read_like_one(items):
    one = OCR(device="cuda:0", **GPU)
    ref = _text(one.read_many(items))
    pool = on_devices(["cuda:0", "cuda:0"], None, **GPU)
    assert _text(pool.read_many(items)) == ref
    assert len(ref) == 40 + 3 + 1 and all(n > 0 for n in pool.pages_per_device)


def test_a_gpu_engine_that_fails_has_its_pages_read_by_the_other(items, capfd):
    pool = on_devices(["cuda:0", "cuda:0"], None, **GPU)
    ref = _text(OCR(device="cuda:0", **GPU).read_many(items))
    real = pool.engines[1].read_many

    def out_of_memory_after_3(batch_items, **kw):
        for n, page in enumerate(real(batch_items, **kw)):
            if n == 3:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
            yield page

    pool.engines[1].read_many = out_of_memory_after_3
    assert _text(pool.read_many(items)) == ref
    assert "OutOfMemoryError" in capfd.readouterr().err


def test_gpu_engine_processes_read_like_one_process_twice(items):
    """The default GPU engine's read_many over several driver processes (gpu.processes) reads
    every page as the in-process scheduler does, in order, on a second run of the same pool."""
    ref = _text(OCR(device="cuda:0", **GPU).read_many(items))
    eng = OCR(device="cuda:0", **{**GPU, "gpu.processes": 2})
    try:
        for _ in range(2):
            assert _text(eng.read_many(items)) == ref
        assert all(n > 0 for n in eng.gpu_pool().pages_per_device)
    finally:
        eng.close()
