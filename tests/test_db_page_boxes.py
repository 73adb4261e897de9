"""DB boxes to page pixels, all boxes at once, against a per-box reading of the same rule."""

from __future__ import annotations

import numpy as np

from ocrforge.stages.detect import _to_page


def _one(box: np.ndarray, sx: float, sy: float, w: int, h: int) -> np.ndarray | None:
    b = box.astype(np.float32)
    b[:, 0] = np.clip(np.round(b[:, 0] * sx), 0, w)
    b[:, 1] = np.clip(np.round(b[:, 1] * sy), 0, h)
    s = b.sum(axis=1)
    tl, br = int(np.argmin(s)), int(np.argmax(s))
    if tl != br:
        rest = [i for i in range(4) if i not in (tl, br)]
        d = [b[i, 1] - b[i, 0] for i in rest]
        b = b[[tl, rest[int(np.argmin(d))], br, rest[int(np.argmax(d))]]]
    if int(np.hypot(*(b[0] - b[1]))) <= 3 or int(np.hypot(*(b[0] - b[3]))) <= 3:
        return None
    return b


def test_boxes_to_page_match_the_per_box_rule():
    rng = np.random.default_rng(5)
    boxes = [rng.random((4, 2)).astype(np.float32) * rng.uniform(2, 80) for _ in range(3000)]
    boxes += [np.full((4, 2), 7, np.float32),  # every corner the same: kept as it is, then dropped
              np.array([[0, 30], [10, 20], [20, 10], [30, 0]], np.float32),  # x + y the same
              np.array([[5, 5], [60, 5], [60, 20], [5, 20]], np.float32)[[2, 0, 3, 1]]]
    want = [b for b in (_one(x, 2.0, 1.5, 300, 200) for x in boxes) if b is not None]
    got = _to_page(boxes, 2.0, 1.5, 300, 200)
    assert 100 < len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float32 and np.array_equal(g, w)
    assert np.array_equal(got[-1], [[10, 8], [120, 8], [120, 30], [10, 30]])  # clockwise from tl
    assert _to_page([], 1.0, 1.0, 10, 10) == []
