"""One engine per device over a shared page queue (scheduling/multi_device.py), on the CPU:
two real engines on "cpu" stand in for two GPUs. Order, completeness, equality with one engine,
a slow page that does not stall the other device, and a device that fails mid-job (an injected
exception, as a CUDA out-of-memory or a lost device would raise)."""

from __future__ import annotations

import threading

import pytest
from jobkit import ENGINE_ARGS, ENGINE_KW, mixed_inputs

from ocrforge.cli import main
from ocrforge.config import EngineConfig
from ocrforge.engine import OCR, on_devices

N_IMAGES = 20


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """20 one-page PNGs, a 5-page PDF in the middle and a corrupt file: 26 results."""
    return mixed_inputs(tmp_path_factory.mktemp("multi"), N_IMAGES, 5, pdf_at=8, bad_at=14)


@pytest.fixture(scope="module")
def config():
    return EngineConfig().with_(**ENGINE_KW)


@pytest.fixture(scope="module")
def reference(inputs, config):
    return [_key(p) for p in OCR(config).read_many(inputs, batch_pages=1)]


def _key(page) -> tuple:
    d = page.to_dict()
    d.pop("timings_ms", None)
    return page.source, page.page_index, page.error, repr(d)


def test_two_engines_equal_one_in_input_order_every_page_once(inputs, config, reference):
    pool = on_devices(["cpu", "cpu"], config)
    got = [_key(p) for p in pool.read_many(inputs, batch_pages=1)]
    assert len(got) == len(reference) == N_IMAGES + 5 + 1
    assert [g[:3] for g in got] == [r[:3] for r in reference]  # order, errors in place
    assert got == reference
    assert sum(pool.pages_per_device) == len(reference)
    assert all(n > 0 for n in pool.pages_per_device), pool.pages_per_device


def _fail_after(engine: OCR, calls: int, message: str) -> None:
    """Make this engine's detection raise from its ``calls``-th page on."""
    real = engine.runner.detect
    seen = [0]

    def detect(pages, s):
        seen[0] += 1
        if seen[0] >= calls:
            raise RuntimeError(message)
        return real(pages, s)

    engine.runner.detect = detect


def test_a_failing_device_has_its_pages_read_by_the_other(inputs, config, reference, capfd):
    pool = on_devices(["cpu", "cpu"], config)
    _fail_after(pool.engines[1], 4, "CUDA error: out of memory (injected)")
    got = [_key(p) for p in pool.read_many(inputs, batch_pages=1)]
    assert got == reference, "a page lost, duplicated or changed when a device failed"
    assert pool.pages_per_device[1] <= 3 and sum(pool.pages_per_device) == len(reference)
    err = capfd.readouterr().err
    assert "device cpu failed (RuntimeError: CUDA error: out of memory (injected))" in err, err
    # the retired device stays out for the rest of that call only: a new call uses it again
    pool.engines[1].runner.detect = OCR(config).runner.detect
    assert [_key(p) for p in pool.read_many(inputs[:4], batch_pages=1)] == reference[:4]


def test_every_device_failing_is_one_error_naming_each(inputs, config):
    pool = on_devices(["cpu", "cpu"], config)
    _fail_after(pool.engines[0], 2, "lost device A")
    _fail_after(pool.engines[1], 2, "lost device B")
    with pytest.raises(RuntimeError, match="every device failed: cpu: RuntimeError: lost "
                       "device A; cpu: RuntimeError: lost device B"):
        list(pool.read_many(inputs, batch_pages=1))


def test_a_slow_page_does_not_stall_the_other_device(inputs, config, reference):
    """The first page blocks its device until the other device has read every page that the
    blocked one had not already taken (at most its pipeline's depth): if the other device
    waited for it, the event would never be set and the test would fail, not hang."""
    pool = on_devices(["cpu", "cpu"], config)
    release, blocked = threading.Event(), []
    held_back = config.pipeline.queue_size + 2  # pages a blocked CPU pipeline may hold
    total = N_IMAGES + 5
    counts = [0, 0]
    lock = threading.Lock()
    for i, eng in enumerate(pool.engines):
        real_detect, real_rec = eng.runner.detect, eng.runner.recognize

        def detect(pages, s, i=i, real=real_detect):
            if pages[0].source == inputs[0]:
                blocked.append(i)
                release.wait(300)
            return real(pages, s)

        def recognize(dets, s, i=i, real=real_rec):
            out = real(dets, s)
            with lock:
                counts[i] += len(dets)
                if blocked and counts[1 - blocked[0]] >= total - 1 - held_back:
                    release.set()
            return out

        eng.runner.detect, eng.runner.recognize = detect, recognize
    got = [_key(p) for p in pool.read_many(inputs, batch_pages=1)]
    assert release.is_set(), f"the free device stalled behind the slow page: {counts}"
    assert got == reference


def test_cli_read_on_two_devices(inputs, config, tmp_path, capsys):
    """`ocrforge read --device cpu,cpu` writes what one engine writes."""
    assert main(["read", *inputs[:8], "-f", "json", "--no-progress", *ENGINE_ARGS,
                 "--device", "cpu,cpu", "-o", str(tmp_path / "two.json")]) == 0
    assert main(["read", *inputs[:8], "-f", "json", "--no-progress", *ENGINE_ARGS,
                 "-o", str(tmp_path / "one.json")]) == 0
    import json

    def strip(path):
        docs = json.loads(path.read_text())
        docs = docs if isinstance(docs, list) else docs.get("pages", docs)
        for d in docs:
            d.pop("timings_ms", None)
        return docs

    assert strip(tmp_path / "two.json") == strip(tmp_path / "one.json")
    assert main(["read", inputs[0], "--device", ",", *ENGINE_ARGS]) == 2
    assert "--device" in capsys.readouterr().err
