"""Runtime "openvino": the same ONNX files through OpenVINO on the CPU read like ONNX Runtime.

FP32 (``runtime.openvino_precision=f32``) must give ONNX Runtime's lines; "auto" computes in
BF16 on CPUs that have it, so there the check is CER within a point on clean pages."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'ocrforge[openvino]')")

from test_core_paths import _summary, make_page  # noqa: E402

from ocrforge import OCR  # noqa: E402


@pytest.fixture(scope="module")
def pages() -> list[tuple[np.ndarray, list[str]]]:
    return [make_page(i) for i in range(6)]


@pytest.fixture(scope="module")
def ort_pages(pages):
    return list(OCR(runtime="onnxruntime", det_limit_side=1280).read_many([p[0] for p in pages]))


def test_openvino_runtime_matches_onnxruntime_outputs():
    from ocrforge.config import RuntimeConfig
    from ocrforge.models.registry import resolve_models
    from ocrforge.runtimes.factory import open_onnx

    m = resolve_models("ppocrv6-small")
    x = np.random.default_rng(0).random((2, 3, 48, 320), np.float32)
    ort_out = open_onnx(m.rec, RuntimeConfig(backend="onnxruntime")).run(x)
    ov = open_onnx(m.rec, RuntimeConfig(backend="openvino", openvino_precision="f32"))
    assert ov.name == "openvino[CPU,f32]", ov.name
    np.testing.assert_allclose(ov.run(x), ort_out, atol=1e-3)
    y = np.random.default_rng(1).random((1, 3, 48, 640), np.float32)  # another shape, same request
    assert ov.run(y).shape == open_onnx(m.rec, RuntimeConfig(backend="onnxruntime")).run(y).shape


def test_top1_recognition_output_is_the_argmax_of_the_whole_output():
    """Opened with ``top1``, the runtime hands out the argmax class, its probability and the
    space column instead of the N x T x 18,710 probabilities (less memory, no 96 MB copy per
    batch); the decoder reads the same text and character steps from either."""
    from ocrforge.config import RuntimeConfig
    from ocrforge.models.registry import resolve_models
    from ocrforge.runtimes.factory import open_onnx
    from ocrforge.stages.recognize import CTCDecoder

    m = resolve_models("ppocrv6-small")
    ctc = CTCDecoder(m.characters())
    cfg = RuntimeConfig(backend="openvino", openvino_precision="f32")
    whole = open_onnx(m.rec, cfg)
    top1 = open_onnx(m.rec, cfg, top1=(ctc.space_index,))
    eng = OCR(runtime="onnxruntime", det_limit_side=1280)
    from ocrforge.io.inputs import PageImage

    page = PageImage("page", 0, make_page(0)[0])
    crops = eng.runner.detect([page], eng.runner.settings(None))[0].crops
    for shape_crops in (crops[:8], crops[8:11]):  # two shapes through the same request
        x = eng.rec_prep(shape_crops)
        probs, (idx, conf, space) = whole.run(x), top1.run(x)
        np.testing.assert_array_equal(idx, probs.argmax(axis=2))
        np.testing.assert_allclose(conf, probs.max(axis=2), rtol=1e-6)
        np.testing.assert_allclose(space, probs[:, :, ctc.space_index], rtol=1e-6)
        widths = [eng.rec_prep.target_width(c) for c in shape_crops]
        assert ctc(probs) == ctc((idx, conf, space))
        a, b = ctc.decode_steps(probs, widths, x.shape[3]), ctc.decode_steps((idx, conf, space), widths, x.shape[3])
        assert [(s.text, s.start.tolist(), s.gap_space.tolist()) for s in a] == \
            [(s.text, s.start.tolist(), s.gap_space.tolist()) for s in b]
    assert sum(len(t) for t, _ in ctc(probs)) > 10


def test_openvino_fp32_engine_reads_like_onnxruntime_twice(pages, ort_pages):
    # the same width buckets as ONNX Runtime, so only the runtime differs
    eng = OCR(runtime="openvino", det_limit_side=1280,
              **{"runtime.openvino_precision": "f32", "rec.widths": "step"})
    imgs = [p[0] for p in pages]
    for run in range(2):
        got = list(eng.read_many(imgs))
        assert [[ln.text for ln in g.lines] for g in got] == \
            [[ln.text for ln in r.lines] for r in ort_pages], f"run {run}"
    assert [ln.text for ln in eng.read(imgs[0]).lines] == [ln.text for ln in ort_pages[0].lines]


def test_openvino_auto_precision_reads_within_a_point(pages, ort_pages):
    eng = OCR(runtime="openvino", det_limit_side=1280)
    got = list(eng.read_many([p[0] for p in pages]))
    _, ref_cer = _summary(ort_pages, pages)
    counts, got_cer = _summary(got, pages)
    assert abs(got_cer - ref_cer) <= 0.01, (eng.det_rt.name, got_cer, ref_cer)
    assert abs(sum(counts) - sum(len(p.lines) for p in ort_pages)) <= 2


def test_openvino_precision_needs_the_openvino_runtime():
    with pytest.raises(ValueError, match="openvino_precision"):
        OCR(runtime="onnxruntime", **{"runtime.openvino_precision": "bf16"})


def test_auto_picks_openvino_only_where_the_cpu_has_native_bf16():
    from ocrforge.config import RuntimeConfig
    from ocrforge.runtimes.choice import cpu_backend, openvino_native_bf16

    native = openvino_native_bf16()
    eng = OCR()  # the default: runtime.backend "auto"
    assert eng.config.runtime.backend == "auto"
    assert eng.det_rt.name.startswith("openvino[CPU,bf16]" if native else "onnxruntime"), eng.det_rt.name
    assert cpu_backend(RuntimeConfig(), precision="int8") == "onnxruntime"  # built artifacts
    assert cpu_backend(RuntimeConfig(providers=["cuda", "cpu"])) == "onnxruntime"
    assert cpu_backend(RuntimeConfig(backend="onnxruntime")) == "onnxruntime"


def test_auto_keeps_onnxruntime_on_a_cpu_without_native_bf16(monkeypatch):
    import ocrforge.runtimes.choice as choice

    monkeypatch.setattr(choice, "openvino_native_bf16", lambda: False)
    assert OCR().det_rt.name.startswith("onnxruntime")


def test_openvino_release_while_another_thread_infers():
    """The pipelined CPU reader recognises page group N (and first gives detection's buffers
    back) while its detector thread runs page N+1: OpenVINO refused ("release_memory() on a
    compiled model in a busy state") and the whole read_many failed, on any machine where the
    pipeline runs OpenVINO (found 2026-12-04 with pipeline.enabled=true on the 2-core VM)."""
    import threading
    import time

    from ocrforge.config import RuntimeConfig
    from ocrforge.models.registry import resolve_models
    from ocrforge.runtimes.factory import open_onnx

    ov = open_onnx(resolve_models("ppocrv6-small").det, RuntimeConfig(backend="openvino"))
    x = np.random.default_rng(0).random((1, 3, 640, 640), np.float32)
    ov.run(x)
    stop, started, errors = threading.Event(), threading.Event(), []

    def infer() -> None:
        try:
            while not stop.is_set():
                started.set()
                ov.run(x)
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    t = threading.Thread(target=infer)
    t.start()
    started.wait(30)
    try:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # most of these land while the other thread infers
            ov.release_memory()
    except Exception as e:  # noqa: BLE001
        errors.append(e)
    finally:
        stop.set()
        t.join()
    assert not errors, errors


def test_openvino_pipelined_read_many_reads_like_serial(pages):
    imgs = [p[0] for p in pages]
    serial = list(OCR(runtime="openvino", det_limit_side=1280, **{"pipeline.enabled": False}).read_many(imgs))
    piped = list(OCR(runtime="openvino", det_limit_side=1280, **{"pipeline.enabled": True}).read_many(imgs))
    assert [[(ln.text, ln.poly) for ln in p.lines] for p in piped] == \
        [[(ln.text, ln.poly) for ln in p.lines] for p in serial]
    assert sum(len(p.lines) for p in piped) > 0


def test_detection_takes_uint8_pages_and_normalises_them_like_the_host(pages):
    """Under OpenVINO detection is handed the resized uint8 page and computes x * scale + offset
    itself (a quarter of the bytes, no float copy of the page on the host): the probability map
    is the host-normalised one's. ONNX Runtime and batched detection keep float input."""
    from ocrforge.runtimes.factory import open_onnx

    eng = OCR(runtime="openvino", det_limit_side=1280)
    assert eng.det_rt.input_u8_nhwc and eng.rec_rt.input_u8_nhwc is False
    host = open_onnx(eng.models.det, eng.config.runtime)  # the same network, float32 NCHW input
    for img, _ in pages[:3]:
        raw, flt = eng.det_prep(img, raw=True), eng.det_prep(img)
        assert raw.tensor.dtype == np.uint8 and raw.size() == flt.size() == flt.tensor.shape[2:]
        a, b = eng.det_rt.run(raw.tensor), host.run(flt.tensor)
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=1e-3)
        # float input (what `ocrforge build`'s guard and sweep hand it) still runs, as is
        np.testing.assert_allclose(eng.det_rt.run(flt.tensor), b, atol=1e-3)
    assert not hasattr(OCR(runtime="onnxruntime").det_rt, "input_u8_nhwc")
    assert not OCR(runtime="openvino", **{"det.batch_size": 2}).det_rt.input_u8_nhwc
