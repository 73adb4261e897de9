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


@dataclass
class DetInput:
    tensor: np.ndarray  # 1x3xHxW float32
    ratio_h: float
    ratio_w: float
    orig_h: int
    orig_w: int


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


class DetPreprocessor:
    def __init__(self, constants: DetConstants, limit: int, limit_type: str = "max",
                 min_side: int = 0, max_upscale: float = 1.0):
        mean = np.array(constants.mean, np.float32)
        std = np.array(constants.std, np.float32)
        # (x/255 - mean)/std as one multiply-add per pixel
        self.scale = (1.0 / (255.0 * std)).astype(np.float32)
        self.offset = (-mean / std).astype(np.float32)
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
        import torch.nn.functional as F

        x = img.unsqueeze(0).float()
        if tuple(x.shape[2:]) != (rh, rw):
            x = F.interpolate(x, size=(rh, rw), mode="bilinear", align_corners=False)
        sc = constant(self.scale, (1, 3, 1, 1), x)
        of = constant(self.offset, (1, 3, 1, 1), x)
        out[:, :rh, :rw] = (x * sc + of)[0]

    def __call__(self, img: np.ndarray, limit: int | None = None) -> DetInput:
        h, w = img.shape[:2]
        rh, rw = self.shape(h, w, limit)
        resized = cv2.resize(img, (rw, rh), interpolation=cv2.INTER_LINEAR) if (rh, rw) != (h, w) else img
        x = resized.astype(np.float32)
        x *= self.scale
        x += self.offset
        tensor = np.ascontiguousarray(x.transpose(2, 0, 1))[None]
        return DetInput(tensor, rh / h, rw / w, h, w)


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


class DBDecoder:
    """Probability map -> quadrilaterals in original image coordinates."""

    def __init__(self, thresh: float, box_thresh: float, unclip_ratio: float,
                 max_candidates: int = 1000, min_size: int = 3,
                 order: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None):
        # order: how the boxes come out (the runner passes layout.reading_order's top-to-bottom
        # rule; a stage does not know reading order); None: in contour order
        self.order = order
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
        boxes = []
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
            box[:, 0] = np.clip(np.round(box[:, 0] * sx), 0, d.orig_w)
            box[:, 1] = np.clip(np.round(box[:, 1] * sy), 0, d.orig_h)
            box = _order_clockwise(box)
            w = int(np.linalg.norm(box[0] - box[1]))
            h = int(np.linalg.norm(box[0] - box[3]))
            if w <= 3 or h <= 3:
                continue
            boxes.append(box.astype(np.float32))
        return self.order(boxes) if self.order is not None else boxes


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


def _order_clockwise(pts: np.ndarray) -> np.ndarray:
    """tl, tr, br, bl."""
    s = pts.sum(axis=1)
    d = np.diff(pts, axis=1).ravel()
    tl, br = pts[np.argmin(s)], pts[np.argmax(s)]
    rest = np.delete(pts, [np.argmin(s), np.argmax(s)], axis=0)
    if len(rest) != 2:  # degenerate (duplicate corners): fall back to the min-area order
        return pts
    d = np.diff(rest, axis=1).ravel()
    tr, bl = rest[np.argmin(d)], rest[np.argmax(d)]
    return np.array([tl, tr, br, bl], np.float32)
