"""The ink of a detected box: its pixels sampled upright and told apart from the background
(shared by box splitting at cell gaps, stages/detect.py, and at column gutters, stages/gutters.py)."""

from __future__ import annotations

import cv2
import numpy as np


def box_ink(box: np.ndarray, gray: np.ndarray, w: int, h: int) -> np.ndarray | None:
    """The box's pixels, upright (h x w), as a bool ink mask with horizontal rules removed; None
    when the box has too little contrast to tell ink from background."""
    strip = upright(box, gray, w, h)
    t, _ = cv2.threshold(strip, 0, 1, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    # the pixels at or below Otsu's cut (dark) and above it (light), as value histograms:
    # means and quantiles from them equal numpy's on the pixels, without masking the strip
    hist = np.bincount(strip.ravel(), minlength=256)
    cut = int(t) + 1
    lo, hi = _Values(hist[:cut], 0), _Values(hist[cut:], cut)
    if not lo.n or not hi.n or hi.mean() - lo.mean() < 30:
        return None
    # Otsu's cut misses thin anti-aliased strokes (a CJK "一" is one light line), which then
    # read as a gap: ink is anything a quarter of the way from the background to the ink
    if lo.n <= 0.5 * strip.size:
        bg, fg = hi.quantile(0.5), lo.quantile(0.1)
        ink = strip < bg - (bg - fg) / 4
    else:
        bg, fg = lo.quantile(0.5), hi.quantile(0.9)
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


class _Values:
    """uint8 pixel values given as a histogram (counts of first, first + 1, ...): their mean and
    quantiles computed as numpy computes them on the values (np.median, np.percentile's
    default linear method), so results match to the last bit."""

    def __init__(self, counts: np.ndarray, first: int):
        self.counts, self.first = counts, first
        self.cum = np.cumsum(counts)
        self.n = int(self.cum[-1]) if len(counts) else 0

    def mean(self) -> float:
        return float(np.dot(self.counts, np.arange(self.first, self.first + len(self.counts)))) / self.n

    def _at(self, k: int) -> float:
        """The k-th smallest value."""
        return float(self.first + int(np.searchsorted(self.cum, k, side="right")))

    def quantile(self, q: float) -> float:
        """np.percentile(values, 100 q); at q = 0.5 also np.median (for whole numbers the lerp
        halfway, b - (b - a) / 2, is exactly the mean of the middle two)."""
        v = (self.n - 1) * q  # numpy's virtual index, linear method
        k = int(np.floor(v))
        g = v - k
        a, b = self._at(min(max(k, 0), self.n - 1)), self._at(min(max(k + 1, 0), self.n - 1))
        return b - (b - a) * (1 - g) if g >= 0.5 else a + (b - a) * g
