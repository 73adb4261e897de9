"""gpu.memory_limit_gib: the share of the card the engine's allocator may take."""

from __future__ import annotations

import argparse

import pytest

from ocrforge.cli import add_engine_options, engine_config_from_args
from ocrforge.config import ConfigError, EngineConfig
from ocrforge.runtimes.device_memory import GIB, limit_device_memory, memory_fraction


def test_memory_fraction_is_the_share_of_the_card_and_at_most_all_of_it():
    assert memory_fraction(5 * GIB, 80 * GIB) == pytest.approx(0.0625)
    assert memory_fraction(100 * GIB, 80 * GIB) == 1.0
    with pytest.raises(ValueError):
        memory_fraction(0, 80 * GIB)
    with pytest.raises(ValueError):
        memory_fraction(GIB, 0)


def test_no_limit_is_set_on_the_cpu_or_without_one():
    assert limit_device_memory("cpu", 4.0) is False
    assert limit_device_memory("cpu", None) is False


def test_the_limit_comes_from_the_command_line_and_must_be_positive():
    p = argparse.ArgumentParser()
    add_engine_options(p)
    cfg = engine_config_from_args(p.parse_args(["--device", "cuda", "--gpu-memory", "5"]))
    assert cfg.gpu.memory_limit_gib == 5.0
    assert engine_config_from_args(p.parse_args([])).gpu.memory_limit_gib is None
    with pytest.raises(ConfigError, match="memory_limit_gib"):
        EngineConfig().with_(**{"gpu.memory_limit_gib": 0})


def test_a_limit_on_a_cpu_engine_changes_nothing(monkeypatch):
    from ocrforge import OCR

    calls = []
    monkeypatch.setattr("ocrforge.engine.limit_device_memory",
                        lambda dev, gib: calls.append((dev, gib)) or False)
    eng = OCR(runtime="torch", device="cpu", **{"gpu.memory_limit_gib": 4.0})
    assert calls == [("cpu", 4.0)] and eng._memory_limited is False
    eng.close()
    assert calls == [("cpu", 4.0)]  # nothing to give back


@pytest.mark.gpu
def test_gpu_an_engine_held_below_what_it_takes_reads_the_same_within_the_limit():
    """Many pages with the allocator held to 60 % of what the same engine reserved without a
    limit: it stays within the limit, the pages read as without one, and the closed engine
    gives the whole card back."""
    import gc

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from test_torch_runtime import LINES, _page

    from ocrforge import OCR

    pages = [_page(LINES, 720 + 64 * (k % 5), 400 + 48 * (k % 3)) for k in range(48)]
    kw = {"runtime": "torch", "device": "cuda", "torch_precision": "fp16", "cuda_graphs": True}
    torch.cuda.reset_peak_memory_stats()
    free = OCR(**kw)
    ref = [p.text for p in free.gpu_scheduler().run(pages)]
    unlimited = torch.cuda.max_memory_reserved()
    free.close()
    del free
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    limit = 0.6 * unlimited / GIB
    eng = OCR(**kw, **{"gpu.memory_limit_gib": limit})
    sch = eng.gpu_scheduler()
    for _ in range(2):
        assert [p.text for p in sch.run(pages)] == ref
    assert torch.cuda.max_memory_reserved() <= limit * GIB, (unlimited, limit)
    eng.close()
    big = torch.empty(int(unlimited), dtype=torch.uint8, device="cuda")  # the limit is gone
    del big
