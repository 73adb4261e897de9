"""Page geometry in the frame of the text: skew, deskewed line boxes, rows of lines.

Every layout decision (rows, columns, blocks, tables) is taken on axis-aligned boxes in a frame
turned by the page's skew, so a page photographed a few degrees off reads like a straight one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ocrforge.result import Line
from ocrforge.stages.crop import VERTICAL_RATIO


def page_skew(lines: Sequence[Line]) -> float:
    """The page's text angle in radians (clockwise, image y down): the length-weighted median
    direction of the lines at least three times longer than high. A tall line is read top to
    bottom (recognition turns its crop that way), so on a page turned by 90 degrees the angle is
    about pi/2 and the deskewed frame puts its lines upright. 0 when no line is long enough."""
    angles, weights = [], []
    for ln in lines:
        q = np.asarray(ln.poly, np.float64)[:4]
        along = ((q[1] - q[0]) + (q[2] - q[3])) * 0.5
        across = ((q[3] - q[0]) + (q[2] - q[1])) * 0.5
        a_len, c_len = float(np.hypot(*along)), float(np.hypot(*across))
        if c_len >= VERTICAL_RATIO * a_len:  # a vertical line: it reads along its long side
            along, a_len, c_len = across, c_len, a_len
        if a_len < 3 * max(c_len, 1.0):
            continue
        angles.append(math.atan2(along[1], along[0]))
        weights.append(a_len)
    if not angles:
        return 0.0
    order = np.argsort(angles)
    a, w = np.asarray(angles)[order], np.cumsum(np.asarray(weights)[order])
    return float(a[np.searchsorted(w, w[-1] * 0.5)])


def deskewed_boxes(lines: Sequence[Line], angle: float) -> np.ndarray:
    """Nx4 axis-aligned boxes (x0, y0, x1, y1) of the lines after turning the page by -angle."""
    if not lines:
        return np.zeros((0, 4))
    pts = np.asarray([np.asarray(ln.poly, np.float64)[:4] for ln in lines])  # N x 4 x 2
    if angle:
        c, s = math.cos(-angle), math.sin(-angle)
        x, y = pts[..., 0], pts[..., 1]
        pts = np.stack([x * c - y * s, x * s + y * c], -1)
    return np.concatenate([pts.min(axis=1), pts.max(axis=1)], axis=1)


def rotate_box_back(box: Sequence[float], angle: float) -> tuple[float, float, float, float]:
    """Axis-aligned page box around a deskewed-frame box (for block and cell boxes)."""
    x0, y0, x1, y1 = box
    if not angle:
        return float(x0), float(y0), float(x1), float(y1)
    c, s = math.cos(angle), math.sin(angle)
    xs, ys = [], []
    for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1)):
        xs.append(x * c - y * s)
        ys.append(x * s + y * c)
    return min(xs), min(ys), max(xs), max(ys)


def same_row(a: np.ndarray, b: np.ndarray, share: float = 0.5) -> bool:
    """Whether two deskewed boxes share a row: their vertical extents overlap by more than
    ``share`` of the lower one's height."""
    overlap = min(a[3], b[3]) - max(a[1], b[1])
    return overlap > share * min(a[3] - a[1], b[3] - b[1])


def group_rows(boxes: np.ndarray, ids: Sequence[int] | None = None) -> list[list[int]]:
    """Boxes grouped into rows (top to bottom), each row left to right. A box joins the row
    whose vertical extent it overlaps mostly; rows are built greedily by box centre."""
    ids = list(range(len(boxes))) if ids is None else list(ids)
    rows: list[list[int]] = []
    spans: list[list[float]] = []  # running [y0, y1] of each row
    for i in sorted(ids, key=lambda k: (boxes[k, 1] + boxes[k, 3]) * 0.5):
        b = boxes[i]
        # boxes come by their centres, so only the last few rows can still overlap this one
        for r in range(len(spans) - 1, max(len(spans) - 9, -1), -1):
            y0, y1 = spans[r]
            overlap = min(y1, b[3]) - max(y0, b[1])
            if overlap > 0.5 * min(y1 - y0, b[3] - b[1]):
                rows[r].append(i)
                spans[r] = [min(y0, b[1]), max(y1, b[3])]
                break
        else:
            rows.append([i])
            spans.append([b[1], b[3]])
    order = sorted(range(len(rows)), key=lambda r: spans[r][0])
    return [sorted(rows[r], key=lambda k: boxes[k, 0]) for r in order]


def median_height(boxes: np.ndarray) -> float:
    """Median box height (at least 1 pixel)."""
    if not len(boxes):
        return 1.0
    return float(max(np.median(boxes[:, 3] - boxes[:, 1]), 1.0))
