"""Text detection with a DB (differentiable binarisation) network: prepare and decode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import pyclipper

from ocrforge.models.registry import DetConstants
from ocrforge.stages.device_constants import constant
from ocrforge.stages.gutters import GUTTER_COMMON, GUTTER_GAP, GUTTER_ROWS, split_at_gutters
from ocrforge.stages.ink import box_ink as _box_ink
from ocrforge.stages.ink import upright as _upright


@dataclass
class DetInput:
    tensor: np.ndarray  # 1x3xHxW float32
    ratio_h: float
    ratio_w: float
    orig_h: int
    orig_w: int
    # the resized page in grey (uint8, the detector's H x W): where DBDecoder looks for the
    # blank gaps and ruling lines between cells (None: no splitting)
    gray: np.ndarray | None = None

    def size(self) -> tuple[int, int]:
        """The detector input's (H, W): of a float NCHW tensor or a uint8 NHWC page."""
        t = self.tensor
        return (t.shape[1], t.shape[2]) if t.dtype == np.uint8 else (t.shape[2], t.shape[3])


def resize_shape(h: int, w: int, limit: int, limit_type: str = "max", min_side: int = 0,
                 max_upscale: float = 1.0) -> tuple[int, int]:
    """Detector input (h, w): aspect kept, both multiples of 32.

    "max": the long side is at most ``limit``; pages whose short side is below ``min_side``
    are enlarged towards it (by at most ``max_upscale``, never past ``limit``), because
    small print on small images is found more reliably at a larger scale.
    "min": the short side is at least ``limit`` (PaddleOCR's mode; long side capped at 4000).
    """
    if limit_type == "max":
        ratio = min(1.0, limit / max(h, w))
        if min_side and min(h, w) < min_side:
            ratio = max(ratio, min(min_side / min(h, w), max_upscale, limit / max(h, w)))
    else:
        ratio = max(1.0, limit / min(h, w))
        if max(h, w) * ratio > 4000:
            ratio = 4000 / max(h, w)
    rh = max(32, int(round(h * ratio / 32)) * 32)
    rw = max(32, int(round(w * ratio / 32)) * 32)
    return rh, rw


def normalization(constants: DetConstants) -> tuple[np.ndarray, np.ndarray]:
    """(scale, offset) per channel: (x/255 - mean)/std as one multiply-add per pixel."""
    mean = np.array(constants.mean, np.float32)
    std = np.array(constants.std, np.float32)
    return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)


class DetPreprocessor:
    def __init__(self, constants: DetConstants, limit: int, limit_type: str = "max",
                 min_side: int = 0, max_upscale: float = 1.0):
        self.scale, self.offset = normalization(constants)
        self.limit = limit
        self.limit_type = limit_type
        self.min_side = min_side
        self.max_upscale = max_upscale

    def shape(self, h: int, w: int, limit: int | None = None) -> tuple[int, int]:
        """Detector input (h, w) of a page of (h, w); ``limit`` overrides the long-side cap."""
        return resize_shape(h, w, limit or self.limit, self.limit_type, self.min_side,
                            self.max_upscale)

    def prepare_torch(self, img: Any, rh: int, rw: int, out: Any) -> None:
        """Device-side twin of __call__: a 3 x H x W uint8 page tensor (BGR) resized to
        (rh, rw) and normalised into ``out[:, :rh, :rw]`` (out is 3 x Hb x Wb float, zeros
        around: the page bucket's padding)."""
        import torch
        import torch.nn.functional as F

        x = img
        if tuple(x.shape[1:]) != (rh, rw):
            x = F.interpolate(x.unsqueeze(0).float(), size=(rh, rw), mode="bilinear",
                              align_corners=False)[0]
        sc = constant(self.scale, (3, 1, 1), out, torch.float32)
        of = constant(self.offset, (3, 1, 1), out, torch.float32)
        # one kernel from the uint8 (or resized) page into the padded input's slice, the
        # arithmetic in FP32 as on the host and rounded once to the input's dtype
        torch.addcmul(of, x, sc, out=out[:, :rh, :rw])

    def __call__(self, img: np.ndarray, limit: int | None = None, raw: bool = False) -> DetInput:
        """The page resized and normalised (float32 1 x 3 x H x W), or with ``raw`` resized
        only (uint8 1 x H x W x 3: for a runtime that normalises itself)."""
        h, w = img.shape[:2]
        rh, rw = self.shape(h, w, limit)
        resized = cv2.resize(img, (rw, rh), interpolation=cv2.INTER_LINEAR) if (rh, rw) != (h, w) else img
        gray = cv2.cvtColor(resized, cv2.COLOR_BGR2GRAY) if resized.ndim == 3 else resized
        if raw:
            return DetInput(np.ascontiguousarray(resized)[None], rh / h, rw / w, h, w, gray)
        x = resized.astype(np.float32)
        x *= self.scale
        x += self.offset
        tensor = np.ascontiguousarray(x.transpose(2, 0, 1))[None]
        return DetInput(tensor, rh / h, rw / w, h, w, gray)


def gray_torch(x: Any, prep: DetPreprocessor) -> Any:
    """``DetInput.gray`` on the device: N x 3 x H x W detector inputs (normalised BGR, as
    ``prepare_torch`` writes them) back to N x H x W uint8 grey (cv2's BGR weights)."""
    import torch

    xf = x.float()
    sc = constant(prep.scale, (1, 3, 1, 1), xf)
    of = constant(prep.offset, (1, 3, 1, 1), xf)
    wts = constant((0.114, 0.587, 0.299), (1, 3, 1, 1), xf)
    return (((xf - of) / sc) * wts).sum(1).round_().clamp_(0, 255).to(torch.uint8)


class DetMapsPost:
    """The detector's device step after the network, as a runtime ``post`` (inside detection's
    CUDA graph): the probability map (as uint8 0..255 when ``to_uint8``: what the DB worker
    processes' shared memory carries) and two uint8 planes, the bitmap (prob > thresh) and
    ``DetInput.gray`` (where the decoder splits boxes at cell gaps)."""

    def __init__(self, thresh: float, prep: DetPreprocessor, to_uint8: bool):
        self.thresh, self.prep, self.to_uint8 = thresh, prep, to_uint8

    def __call__(self, out: Any, x: Any) -> tuple:
        import torch

        prob = out[:, 0].float()  # the threshold and the uint8 scaling on float32, as on the host
        bitmap = torch.stack([(prob > self.thresh).to(torch.uint8), gray_torch(x, self.prep)], 1)
        if self.to_uint8:
            prob = (prob * 255.0).round_().to(torch.uint8)
        return prob, bitmap


def stack_padded(inputs: list[DetInput]) -> np.ndarray:
    """Batch pages of different sizes by zero-padding (after normalisation) to the largest."""
    if len(inputs) == 1:
        return inputs[0].tensor
    H = max(d.tensor.shape[2] for d in inputs)
    W = max(d.tensor.shape[3] for d in inputs)
    out = np.zeros((len(inputs), 3, H, W), np.float32)
    for i, d in enumerate(inputs):
        _, _, h, w = d.tensor.shape
        out[i, :, :h, :w] = d.tensor[0]
    return out


# DBDecoder.split_gap of every engine (EngineConfig.det.split_gap); docs/ACCURACY.md, "Cells"
SPLIT_GAP = 1.0
SPLIT_THIN = 0.93
SPLIT_WIDE = 2.0
# boxes lower than this (detector pixels) are never split: strokes of text that small break
# up under Otsu, and a blank run inside a word looks like a gap
SPLIT_MIN_HEIGHT = 12


class DBDecoder:
    """Probability map -> quadrilaterals in original image coordinates."""

    def __init__(self, thresh: float, box_thresh: float, unclip_ratio: float,
                 max_candidates: int = 1000, min_size: int = 3,
                 order: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None,
                 split_gap: float = SPLIT_GAP, split_thin: float = SPLIT_THIN,
                 split_wide: float = SPLIT_WIDE, gutter_gap: float = GUTTER_GAP,
                 gutter_common: float = GUTTER_COMMON, gutter_rows: int = GUTTER_ROWS):
        # order: how the boxes come out (the runner passes layout.reading_order's top-to-bottom
        # rule; a stage does not know reading order); None: in contour order
        self.order = order
        # split a box where the page (DetInput.gray) shows a blank run at least split_gap box
        # heights wide over which the probability band thins to split_thin of its usual
        # thickness (or twice as wide, however thick), or a ruling line (split_box); 0: never
        self.split_gap = split_gap
        self.split_thin = split_thin
        self.split_wide = split_wide
        # and where a column gutter runs down through it and the rows around it (gutters.py); 0: never
        self.gutter = (gutter_gap, gutter_common, gutter_rows)
        self.thresh = thresh
        self.box_thresh = box_thresh
        self.unclip_ratio = unclip_ratio
        self.max_candidates = max_candidates
        self.min_size = min_size

    def __call__(self, prob: np.ndarray, d: DetInput,
                 bitmap: np.ndarray | None = None) -> list[np.ndarray]:
        # prob: HxW of the resized page (padding, if any, already cut off); bitmap: prob >
        # thresh as uint8 when the caller binarised already (the GPU pipeline does it on device)
        rh, rw = prob.shape
        if bitmap is None:
            bitmap = (prob > self.thresh).astype(np.uint8)
        contours, _ = cv2.findContours(bitmap, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        sx = d.orig_w / rw
        sy = d.orig_h / rh
        pieces: list[tuple[np.ndarray, Any]] = []
        for contour in contours[: self.max_candidates]:
            pts, sside = _mini_box(contour)
            if sside < self.min_size:
                continue
            if _box_score(prob, pts) < self.box_thresh:
                continue
            expanded = _unclip(pts, self.unclip_ratio)
            if expanded is None:
                continue
            box, sside = _mini_box(expanded.reshape(-1, 1, 2))
            if sside < self.min_size + 2:
                continue
            pieces.extend([(box, None)] if d.gray is None or self.split_gap <= 0
                          else split_box_cols(box, d.gray, prob, self.split_gap, self.split_thin,
                                              self.split_wide))
        boxes = [b for b, _ in pieces]
        if d.gray is not None and self.gutter[0] > 0:
            boxes = split_at_gutters(boxes, d.gray, *self.gutter, cols=[c for _, c in pieces])
        boxes = _to_page(boxes, sx, sy, d.orig_w, d.orig_h)
        return self.order(boxes) if self.order is not None else boxes


def _to_page(boxes: list[np.ndarray], sx: float, sy: float, w: int, h: int) -> list[np.ndarray]:
    """Detector-pixel boxes in page pixels (w x h), each clockwise from top-left; boxes whose
    sides are 3 page pixels or less dropped. All boxes at once: per box this was ~10 small
    numpy calls, ~8 % of the DB step's time on the dev pages."""
    if not boxes:
        return []
    b = np.stack(boxes).astype(np.float32, copy=False)  # n x 4 x 2 (a new array already)
    b[:, :, 0] = np.clip(np.round(b[:, :, 0] * sx), 0, w)
    b[:, :, 1] = np.clip(np.round(b[:, :, 1] * sy), 0, h)
    b = _order_clockwise_all(b)
    wide = np.linalg.norm(b[:, 0] - b[:, 1], axis=1).astype(np.int64) > 3
    tall = np.linalg.norm(b[:, 0] - b[:, 3], axis=1).astype(np.int64) > 3
    return list(b[wide & tall])


def _order_clockwise_all(b: np.ndarray) -> np.ndarray:
    """n x 4 x 2 boxes as tl, tr, br, bl (smallest / largest x + y, then of the other two the
    smallest / largest y - x); a box whose x + y is the same at every corner stays as it is."""
    n = len(b)
    rows = np.arange(n)
    s = b.sum(axis=2)
    i_tl, i_br = s.argmin(axis=1), s.argmax(axis=1)
    rest = np.ones((n, 4), bool)
    rest[rows, i_tl] = False
    rest[rows, i_br] = False
    ok = i_tl != i_br
    idx = np.argsort(~rest, axis=1, kind="stable")[:, :2]  # the two others, in corner order
    d = b[rows[:, None], idx, 1] - b[rows[:, None], idx, 0]
    i_tr = idx[rows, d.argmin(axis=1)]
    i_bl = idx[rows, d.argmax(axis=1)]
    out = b[rows[:, None], np.stack([i_tl, i_tr, i_br, i_bl], axis=1)]
    out[~ok] = b[~ok]
    return out


def _mini_box(contour: np.ndarray) -> tuple[np.ndarray, float]:
    rect = cv2.minAreaRect(contour)
    pts = cv2.boxPoints(rect)
    pts = pts[np.argsort(pts[:, 0])]
    left, right = pts[:2], pts[2:]
    tl, bl = (left[0], left[1]) if left[0, 1] <= left[1, 1] else (left[1], left[0])
    tr, br = (right[0], right[1]) if right[0, 1] <= right[1, 1] else (right[1], right[0])
    return np.array([tl, tr, br, bl], np.float32), min(rect[1])


def _box_score(prob: np.ndarray, box: np.ndarray) -> float:
    """Mean probability inside the box polygon (on its bounding window only)."""
    h, w = prob.shape
    xmin = int(np.clip(np.floor(box[:, 0].min()), 0, w - 1))
    xmax = int(np.clip(np.ceil(box[:, 0].max()), 0, w - 1))
    ymin = int(np.clip(np.floor(box[:, 1].min()), 0, h - 1))
    ymax = int(np.clip(np.ceil(box[:, 1].max()), 0, h - 1))
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), np.uint8)
    shifted = box.copy()
    shifted[:, 0] -= xmin
    shifted[:, 1] -= ymin
    cv2.fillPoly(mask, shifted.reshape(1, -1, 2).astype(np.int32), 1)
    return cv2.mean(prob[ymin : ymax + 1, xmin : xmax + 1], mask)[0]


def _unclip(box: np.ndarray, ratio: float) -> np.ndarray | None:
    """Grow the polygon by area*ratio/perimeter (the DB paper's offset)."""
    area = cv2.contourArea(box)
    length = cv2.arcLength(box.reshape(-1, 1, 2), True)
    if length == 0:
        return None
    distance = area * ratio / length
    off = pyclipper.PyclipperOffset()
    off.AddPath(box.astype(np.int64).tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    out = off.Execute(distance)
    if len(out) != 1:
        return None
    return np.array(out[0], np.float32)


# ------------------------------------------------------------------ splitting at cell gaps
def split_box(box: np.ndarray, gray: np.ndarray, prob: np.ndarray, gap: float,
              thin: float = SPLIT_THIN, wide: float = SPLIT_WIDE) -> list[np.ndarray]:
    """``box`` (tl, tr, br, bl in detector pixels) cut where ``gray`` shows the text stop."""
    return [piece for piece, _ in split_box_cols(box, gray, prob, gap, thin, wide)]


def split_box_cols(box: np.ndarray, gray: np.ndarray, prob: np.ndarray, gap: float,
                   thin: float = SPLIT_THIN, wide: float = SPLIT_WIDE) -> list[tuple[np.ndarray, Any]]:
    """``split_box``'s pieces, each with the ink of its columns (a bool array across the
    piece; None where the box was not sampled), which the gutter pass reuses.

    The DB network links the cells of a table row (and the buttons of a toolbar) into one
    line across gaps of two text heights and more; the probability map stays high over
    the gap, the page does not. The box is sampled upright from ``gray``, its ink found by
    Otsu (minority class, so light text on dark fills too), and a blank run of columns ends
    a piece when it is ``gap`` box heights wide and the probability band over it thins to
    ``thin`` of its usual thickness, or twice that wide; so does a ruling line across the box.
    Each piece keeps the box's height and its own ink plus the box's side margins.
    """
    tl, tr, bl = box[0], box[1], box[3]
    w, h = float(np.linalg.norm(tr - tl)), float(np.linalg.norm(bl - tl))
    if h < SPLIT_MIN_HEIGHT or w < 2 * h:
        return [(box, None)]
    iw, ih = int(round(w)), int(round(h))
    ink = _box_ink(box, gray, iw, ih)
    if ink is None:  # sampled, no contrast: an empty column set, so the gutter pass skips it too
        return [(box, np.zeros(0, bool))]
    inked = ink.any(0)
    band = _upright(box, prob, iw, ih).sum(0)  # the probability band's thickness per column
    spans = _ink_spans(ink, band, gap, thin, wide)
    if len(spans) < 2:
        return [(box, inked)]
    cols = np.flatnonzero(inked)
    pad_l, pad_r = float(cols[0]), float(ink.shape[1] - 1 - cols[-1])
    ux, uy = (tr - tl) / ink.shape[1], (bl - tl)
    out = []
    for k, (a, b) in enumerate(spans):
        lo = spans[k - 1][1] + 1 if k else 0
        hi = spans[k + 1][0] if k + 1 < len(spans) else ink.shape[1]
        x0, x1 = max(lo, a - pad_l), min(hi, b + 1 + pad_r)
        p0, p1 = tl + ux * x0, tl + ux * x1
        out.append((np.array([p0, p1, p1 + uy, p0 + uy], np.float32),
                    inked[int(x0): max(int(np.ceil(x1)), int(x0) + 1)]))
    return out


def _ink_spans(ink: np.ndarray, band: np.ndarray, gap: float, thin: float,
               wide: float) -> list[tuple[int, int]]:
    """Column ranges [a, b] of ink between ruling lines and blank runs >= ``gap`` box heights
    where ``band`` (the probability band's thickness) falls to ``thin`` of its median over
    the ink, or >= 2 ``gap`` box heights. (Measured: the gaps of full-width punctuation in
    running Chinese text reach 1.4 box heights with the band >= 0.95 as thick; cells the
    network joins, 1.0-1.5 box heights, thin it to 0.5-0.93.)
"""
    h = ink.shape[0]
    count = ink.sum(0)
    full = count >= 0.85 * h
    inked = (count >= 1) & ~full
    rows = np.flatnonzero(ink[:, inked].sum(1) >= 1) if inked.any() else np.zeros(0, int)
    if len(rows) == 0:
        return []
    text_h = float(rows[-1] - rows[0] + 1)
    # a ruling line crosses the box's blank margins above and below the text; in a box as
    # tight as its text a long stroke fills the height too, so there no column is a rule
    rule = full if text_h <= 0.8 * h else np.zeros_like(full)
    inked = (count >= 1) & ~rule
    cols = np.flatnonzero(inked)
    typical = float(np.median(band[cols])) or 1.0
    spans: list[tuple[int, int]] = []
    ruled: list[bool] = []  # whether the cut after spans[k] is a rule
    start = int(cols[0])
    # only a run of non-ink columns between two inked ones can end a span
    for i in np.flatnonzero(np.diff(cols) > 1):
        prev, c = int(cols[i]), int(cols[i + 1])
        by_rule = bool(rule[prev + 1 : c].any())
        blank = c - prev - 1
        if by_rule or blank >= wide * h or (
                blank >= gap * h and band[prev + 1 : c].min() <= thin * typical):
            spans.append((start, prev))
            ruled.append(by_rule)
            start = c
    spans.append((start, int(cols[-1])))
    return _drop_narrow_ends(spans, ruled, h)


def _drop_narrow_ends(spans: list[tuple[int, int]], ruled: list[bool], h: int) -> list[tuple[int, int]]:
    """Undo a cut that leaves a narrow first or last piece: past a rule it is the edge of the
    next cell's text, which the box reached past the rule (that cell has a box of its own);
    past a blank run it is a list number or a lone digit, which stays with its line (the dev
    set's reference lists label "2  Author, Title" as one line)."""
    while len(spans) > 1 and spans[-1][1] - spans[-1][0] + 1 < (0.5 if ruled[-1] else 1.0) * h:
        if ruled[-1]:
            spans.pop()
        else:
            spans[-2:] = [(spans[-2][0], spans[-1][1])]
        ruled.pop()
    while len(spans) > 1 and spans[0][1] - spans[0][0] + 1 < (0.5 if ruled[0] else 1.0) * h:
        if ruled[0]:
            spans.pop(0)
        else:
            spans[:2] = [(spans[0][0], spans[1][1])]
        ruled.pop(0)
    return spans
