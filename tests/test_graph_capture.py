"""CUDA graphs captured by a worker thread while the caller runs the shape eagerly."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from ocrforge.runtimes.torch_capture import BackgroundCapture  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class _Recorder:
    def __init__(self, fail: set | None = None, delay: float = 0.02):
        self.calls: list[tuple] = []
        self.threads: set[str] = set()
        self.fail = fail or set()
        self.delay = delay

    def __call__(self, key: tuple, x, fn) -> None:
        time.sleep(self.delay)
        self.calls.append((key, tuple(x.shape), x.stride(), x.dtype, fn))
        self.threads.add(threading.current_thread().name)
        if key in self.fail:
            raise RuntimeError(f"capture of {key} failed")


def test_each_shape_is_captured_once_off_the_callers_thread():
    rec = _Recorder()
    bg = BackgroundCapture(rec, torch.device("cpu"))
    x = torch.zeros(2, 3, 8, 16).contiguous(memory_format=torch.channels_last)
    for _ in range(3):  # asked again while queued or running: still one capture
        bg.request(("a",), x, "fn-a")
        bg.request(("b",), x[:1], "fn-b")
    assert bg.wait(10)
    assert [c[0] for c in rec.calls] == [("a",), ("b",)]
    # the template input has the caller's shape, strides and dtype
    assert rec.calls[0][1:4] == ((2, 3, 8, 16), x.stride(), torch.float32)
    assert rec.calls[1][4] == "fn-b"
    assert threading.current_thread().name not in rec.threads
    assert bg.pending() == 0 and bg._worker is None  # no thread left holding the runtime


def test_a_failed_capture_is_not_tried_again_and_others_go_on():
    rec = _Recorder(fail={("bad",)})
    bg = BackgroundCapture(rec, torch.device("cpu"))
    x = torch.zeros(1, 3, 4, 4)
    bg.request(("bad",), x, None)
    bg.request(("good",), x, None)
    assert bg.wait(10)
    bg.request(("bad",), x, None)  # the shape keeps running eagerly instead
    assert bg.wait(10)
    assert [c[0] for c in rec.calls] == [("bad",), ("good",)]
    assert len(bg.errors) == 1 and "bad" in str(bg.errors[0])


def test_wait_times_out_while_a_capture_runs():
    rec = _Recorder(delay=0.5)
    bg = BackgroundCapture(rec, torch.device("cpu"))
    bg.request(("slow",), torch.zeros(1), None)
    assert not bg.wait(0.05)
    assert bg.wait(10) and len(rec.calls) == 1


def _det_runtime(background: bool):
    from ocrforge.config import RuntimeConfig
    from ocrforge.models.native import build_native
    from ocrforge.models.registry import resolve_models
    from ocrforge.runtimes.torch import TorchRuntime

    m = resolve_models("ppocrv6-small")
    return TorchRuntime(build_native(m.model_set, "det", m.det),
                        RuntimeConfig(backend="torch", device="cuda", torch_precision="fp16",
                                      cuda_graphs=True, capture_in_background=background))


@pytest.mark.gpu
@cuda
def test_gpu_background_capture_reads_as_eager_while_other_shapes_run():
    """A shape met twice is captured by the worker; meanwhile the caller runs other shapes
    eagerly on its own stream. Every output equals the eager reference, before and after the
    graphs are installed."""
    rt = _det_runtime(True)
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = {hw: torch.rand((1, 3, *hw), generator=g, device="cuda") for hw in
          [(320, 480), (352, 480), (384, 480), (416, 480)]}
    ref = {hw: rt.forward(x).clone() for hw, x in xs.items()}  # first use: eager
    for _ in range(5):  # second use asks for captures; the caller never waits for one
        for hw, x in xs.items():
            torch.testing.assert_close(rt.forward(x), ref[hw], atol=2e-3, rtol=0)
    assert rt.wait_captures(120) and not rt.background.errors
    assert rt.counts["captures"] == 4 and rt.counts["eager"] >= 4
    replays = rt.counts["replays"]
    for hw, x in xs.items():
        torch.testing.assert_close(rt.forward(x), ref[hw], atol=2e-3, rtol=0)
    assert rt.counts["replays"] == replays + 4


@pytest.mark.gpu
@cuda
def test_gpu_inline_capture_when_background_is_off():
    rt = _det_runtime(False)
    x = torch.rand((1, 3, 320, 480), device="cuda")
    rt.forward(x)
    rt.forward(x)
    assert rt.background is None and rt.counts["captures"] == 1 and rt.counts["replays"] == 1
