"""The packed hand-over of the layout stage's worker processes (scheduling/layout_workers.py):
a page laid out from its packed request and applied from the packed result equals the page
laid out in place, exactly (corners, words, spaces, blocks, tables, order)."""

from __future__ import annotations

import copy
import pickle

import pytest

from ocrforge import OCR
from ocrforge.core import layout_page
from ocrforge.evaluation.dataset import load_dataset
from ocrforge.evaluation.synth import generate
from ocrforge.result import Line, Page
from ocrforge.scheduling import layout_workers as lw


@pytest.fixture(scope="module")
def laid_out_inputs(tmp_path_factory):
    """(page, CTC steps) as the layout stage receives them, from real reads of generated pages
    of the kinds with most structure (columns, tables, forms, screenshots, receipts)."""
    root = tmp_path_factory.mktemp("lw")
    images = []
    for kind in ("columns", "table", "form", "screenshot", "receipt"):
        out = generate(root / kind, 1, seed=11, kind=kind, clean=True, min_lines=5)
        images += [str(rec.image) for rec in load_dataset(out)]
    eng = OCR()
    seen = []
    lay_out = eng.runner.lay_out

    def recording(page, image, steps):
        seen.append((copy.deepcopy(page), copy.deepcopy(steps)))
        return lay_out(page, image, steps)

    eng.runner.lay_out = recording
    for img in images:
        eng.read(img)
    assert len(seen) == len(images) == 5 and all(steps for _, steps in seen)
    return seen


def _through_worker(page: Page, steps: list | None, options: dict) -> Page:
    lw._W["options"] = options
    req = pickle.loads(pickle.dumps(lw.pack_request(page, steps)))
    res = pickle.loads(pickle.dumps(lw._work(req, None)))
    return lw.apply_result(page, res)


def test_packed_layout_equals_layout_in_place(laid_out_inputs):
    options = OCR().runner.layout_settings()
    words = blocks = tables = 0
    for page, steps in laid_out_inputs:
        want = layout_page(copy.deepcopy(page), None, copy.deepcopy(steps), options)
        got = _through_worker(copy.deepcopy(page), steps, options)
        want.timings.pop("layout")
        got.timings.pop("layout")
        assert got == want, page.source
        words += sum(len(ln.words) for ln in got.lines)
        blocks += len(got.blocks)
        tables += sum(b.table is not None for b in got.blocks)
    assert words > 100 and blocks > 10 and tables >= 1


def test_a_page_that_cannot_be_packed_goes_whole():
    odd = Page([Line("pentagon", [[0, 0], [10, 0], [12, 5], [10, 10], [0, 10]], 0.9)], 100, 50)
    assert lw.pack_request(odd, None) is None
    worded = Page([Line("a b", [[0, 0], [10, 0], [10, 10], [0, 10]], 0.9)], 100, 50)
    worded.lines[0].words = [copy.deepcopy(worded.lines[0])]
    assert lw.pack_request(worded, None) is None
    empty = Page([], 100, 50, source="blank.png")
    got = _through_worker(copy.deepcopy(empty), None, {})
    assert got.lines == [] and got.source == "blank.png"
