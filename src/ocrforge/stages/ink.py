"""The ink of a detected box: its pixels sampled upright and told apart from the background
(shared by box splitting at cell gaps, stages/detect.py, and at column gutters, stages/gutters.py)."""

from __future__ import annotations

import cv2
import numpy as np


def box_ink(box: np.ndarray, gray: np.ndarray, w: int, h: int) -> np.ndarray | None:
    """The box's pixels, upright (h x w), as a bool ink mask with horizontal rules removed; None
    when the box has too little contrast to tell ink from background."""
    strip = upright(box, gray, w, h)
    t, dark = cv2.threshold(strip, 0, 1, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    dark = dark.astype(bool)
    lo, hi = strip[dark], strip[~dark]
    if not len(lo) or not len(hi) or float(hi.mean()) - float(lo.mean()) < 30:
        return None
    # Otsu's cut misses thin anti-aliased strokes (a CJK "一" is one light line), which then
    # read as a gap: ink is anything a quarter of the way from the background to the ink
    if dark.mean() <= 0.5:
        bg, fg = float(np.median(hi)), float(np.percentile(lo, 10))
        ink = strip < bg - (bg - fg) / 4
    else:
        bg, fg = float(np.median(lo)), float(np.percentile(hi, 90))
        ink = strip > bg + (fg - bg) / 4
    # a row inked across most of the box is a rule above or below the text, not text: such
    # rows are cut off (a vertical rule then still crosses all the rows left)
    rows = np.flatnonzero(ink.mean(1) <= 0.8)
    if len(rows) < 4:
        return None
    ink = ink[rows[0] : rows[-1] + 1]
    ink[ink.mean(1) > 0.8] = False
    # specks of noise or JPEG ringing are not ink (a hyphen or a dot, >= 4 px here, is), nor
    # is a long thin horizontal piece (a rule of a skewed table, an underline)
    _, labels, stats, _ = cv2.connectedComponentsWithStats(ink.astype(np.uint8), connectivity=8)
    hh = ink.shape[0]
    drop = (stats[:, cv2.CC_STAT_AREA] < 4) | ((stats[:, cv2.CC_STAT_HEIGHT] <= max(2, 0.15 * hh))
                                               & (stats[:, cv2.CC_STAT_WIDTH] >= 1.5 * hh))
    drop[0] = False  # the background
    if drop.any():
        ink &= ~drop[labels]
    return ink


def upright(box: np.ndarray, img: np.ndarray, w: int, h: int) -> np.ndarray:
    """The box's pixels of ``img`` sampled upright into h x w."""
    dst = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float32)
    m = cv2.getPerspectiveTransform(box.astype(np.float32), dst)
    return cv2.warpPerspective(img, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
