"""0/180 degree orientation of text-line crops (PP-OCR mobile v2.0 classifier)."""

from __future__ import annotations

import math

import cv2
import numpy as np

CLS_SHAPE = (3, 48, 192)


def prepare(crops: list[np.ndarray]) -> np.ndarray:
    _, H, W = CLS_SHAPE
    out = np.zeros((len(crops), 3, H, W), np.float32)
    for i, c in enumerate(crops):
        h, w = c.shape[:2]
        rw = min(W, int(math.ceil(H * w / max(h, 1))))
        r = cv2.resize(c, (rw, H)).astype(np.float32)
        out[i, :, :, :rw] = ((r / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)
    return out


def decide(probs: np.ndarray, thresh: float) -> list[bool]:
    """True where the crop is upside down with confidence above thresh."""
    return [bool(p[1] > p[0] and p[1] > thresh) for p in probs]
